"""Websocket compression (issue 18): daphne does not negotiate permessage-deflate; uvicorn does,
and the README documents it as the production web server for that reason. Its
``websockets-sansio`` implementation compresses with a 4 KiB window (``server_max_window_bits=12``,
zlib memLevel 5: the websockets library's recommended settings), which keeps an idle socket's
compression state at about a third of zlib's defaults (``--ws websockets``): 66–70 KiB per idle
socket against 126–131 KiB in ``bench/idle_sockets.py``, with the same wire bytes per token.
Real processes and sockets; the client offers deflate like browsers do.
"""

from __future__ import annotations

import json

import pytest
from websockets.sync.client import connect

from . import flows
from .flows import QUESTION
from .harness import Platform, require_services, services_unreachable_reason, started


@pytest.fixture(scope="module")
def uvicorn_platform():
    platform = Platform("embedded", asgi_server="uvicorn")
    yield from started(platform)


def _deflate_socket(platform: Platform, thread_id: str, token: str):
    return connect(platform.ws_url(thread_id), additional_headers={"Authorization": f"Token {token}"},
                   compression="deflate", proxy=None, open_timeout=10, close_timeout=5, ping_interval=None)


def _negotiated(ws) -> dict[str, str] | None:
    """The server's permessage-deflate parameters (``{"server_max_window_bits": "12", …}``), or
    None when it answered without the extension."""
    for extension in ws.response.headers.get("Sec-WebSocket-Extensions", "").split(","):
        name, *params = [part.strip() for part in extension.split(";")]
        if name == "permessage-deflate":
            return dict(param.partition("=")[::2] for param in params)
    return None


def test_uvicorn_negotiates_a_small_window_and_streams_a_turn(uvicorn_platform):
    token = flows.login_token(uvicorn_platform, "alice")
    thread_id = flows.create_thread(uvicorn_platform, token)
    with _deflate_socket(uvicorn_platform, thread_id, token) as ws:
        assert _negotiated(ws) == {"server_max_window_bits": "12", "client_max_window_bits": "12"}
        ws.send("{this is not json")  # a compressed socket handles bad input like any other
        err = flows.recv_json(ws)
        assert err["type"] == "error" and err["code"] == "invalid_json", err
        turn = flows.ws_turn(ws, QUESTION)
        flows.assert_conversation(uvicorn_platform, token, thread_id, turn)
    # Over --ws-max-size as the README runs it: a closing handshake with 1009, as on daphne —
    # the limit holds for the inflated message, though deflate sends it as a few kB.
    with _deflate_socket(uvicorn_platform, thread_id, token) as ws:
        ws.send(json.dumps({"type": "message.send", "content": "x" * 1024 * 1024}))
        assert flows.close_code(ws) == 1009


@pytest.mark.services
def test_production_layout_streams_compressed_over_uvicorn():
    """The README's production layout: uvicorn, a Celery worker, PostgreSQL and Redis; the turn's
    events cross from the worker through Redis to a compressed socket, all of them in order, and
    access is refused with the contract's close codes."""
    require_services(services_unreachable_reason())
    with Platform("services", asgi_server="uvicorn") as platform:
        token = flows.login_token(platform, "alice")
        thread_id = flows.create_thread(platform, token)
        with _deflate_socket(platform, thread_id, token) as ws:
            assert _negotiated(ws) is not None
            turn = flows.ws_turn(ws, QUESTION)
            flows.assert_conversation(platform, token, thread_id, turn)
        # The contract's close codes come through this server as through daphne.
        with _deflate_socket(platform, thread_id, flows.login_token(platform, "dave")) as ws:
            assert flows.close_code(ws) == 4404  # another user's thread
        with _deflate_socket(platform, thread_id, "not-a-real-token") as ws:
            assert flows.close_code(ws) == 4403


def test_daphne_does_not_negotiate_compression(embedded_platform):
    token = flows.login_token(embedded_platform, "alice")
    thread_id = flows.create_thread(embedded_platform, token)
    with _deflate_socket(embedded_platform, thread_id, token) as ws:
        assert _negotiated(ws) is None  # why production uses uvicorn
