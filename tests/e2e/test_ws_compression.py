"""Websocket compression (issue 18): daphne does not negotiate permessage-deflate, uvicorn with
the ``websockets`` implementation does — the README documents uvicorn as the production web
server for that reason. Real processes and sockets; the client offers deflate like browsers do.
"""

from __future__ import annotations

import pytest
from websockets.sync.client import connect

from . import flows
from .flows import QUESTION
from .harness import Platform, started


@pytest.fixture(scope="module")
def uvicorn_platform():
    platform = Platform("embedded", asgi_server="uvicorn")
    yield from started(platform)


def _deflate_socket(platform: Platform, thread_id: str, token: str):
    return connect(platform.ws_url(thread_id), additional_headers={"Authorization": f"Token {token}"},
                   compression="deflate", proxy=None, open_timeout=10, close_timeout=5, ping_interval=None)


def _negotiated(ws) -> str:
    return ws.response.headers.get("Sec-WebSocket-Extensions", "")


def test_uvicorn_negotiates_permessage_deflate_and_streams_a_turn(uvicorn_platform):
    token = flows.login_token(uvicorn_platform, "alice")
    thread_id = flows.create_thread(uvicorn_platform, token)
    with _deflate_socket(uvicorn_platform, thread_id, token) as ws:
        assert "permessage-deflate" in _negotiated(ws)
        turn = flows.ws_turn(ws, QUESTION)
        flows.assert_conversation(uvicorn_platform, token, thread_id, turn)


def test_daphne_does_not_negotiate_compression(embedded_platform):
    token = flows.login_token(embedded_platform, "alice")
    thread_id = flows.create_thread(embedded_platform, token)
    with _deflate_socket(embedded_platform, thread_id, token) as ws:
        assert "permessage-deflate" not in _negotiated(ws)  # why production uses uvicorn
