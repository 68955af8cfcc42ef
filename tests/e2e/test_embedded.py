"""End-to-end, embedded mode: daphne + SQLite + in-memory channel layer, as real processes.

Everything goes over real sockets on 127.0.0.1: HTTP with httpx, the websocket with the
``websockets`` library, and ``manage.py ask`` as a subprocess against the same database.
"""

from __future__ import annotations

import json
import uuid

import pytest

from . import flows
from .flows import QUESTION, WITH_TOPIC_TITLE


@pytest.fixture(scope="module")
def alice(embedded_platform) -> str:
    return flows.login_token(embedded_platform, "alice")


def bench(capsys, line: str) -> None:
    with capsys.disabled():
        print("\n" + line, flush=True)


def test_login_and_providers(embedded_platform, alice):
    with flows.http(embedded_platform) as anon:
        bad = anon.post("/api/v1/auth/token/", json={"username": "alice", "password": "wrong"})
        assert bad.status_code == 400
        assert anon.get("/api/v1/providers/").status_code in (401, 403)
    with flows.http(embedded_platform, alice) as client:
        providers = client.get("/api/v1/providers/")
    assert providers.status_code == 200
    by_slug = {p["slug"]: p for p in providers.json()}
    assert by_slug["offline"]["status"] == "ok"
    assert by_slug["offline"]["kind"] == "offline"
    assert not any("key" in field for p in providers.json() for field in p), providers.json()


def test_websocket_conversation(embedded_platform, alice, capsys):
    thread_id = flows.create_thread(embedded_platform, alice)
    with flows.ws_connect(embedded_platform, thread_id, token=alice) as ws:
        turn = flows.ws_turn(ws, QUESTION)
        flows.assert_conversation(embedded_platform, alice, thread_id, turn)
        bench(capsys, f"BENCH first_delta_ms={turn.first_delta_ms:.1f} mode=embedded turn=1 "
                      f"events={len(turn.events)} total_ms={turn.total_ms:.0f}")
        # A second turn on the same socket: warm path, seq starts again at 1 for the new run.
        second = flows.ws_turn(ws, QUESTION)
        assert second.run_id != turn.run_id
        flows.assert_conversation(embedded_platform, alice, thread_id, second)
        bench(capsys, f"BENCH first_delta_ms={second.first_delta_ms:.1f} mode=embedded turn=2 "
                      f"events={len(second.events)} total_ms={second.total_ms:.0f}")
    msgs = flows.messages(embedded_platform, alice, thread_id)
    assert [m["content"] for m in msgs if m["role"] == "user"] == [QUESTION, QUESTION]


def test_websocket_other_users_thread_closes_4404(embedded_platform, alice):
    thread_id = flows.create_thread(embedded_platform, alice)
    dave = flows.login_token(embedded_platform, "dave")
    with flows.ws_connect(embedded_platform, thread_id, token=dave) as ws:
        assert flows.close_code(ws) == 4404
    # Same answer for a thread that does not exist at all (no existence oracle).
    with flows.ws_connect(embedded_platform, str(uuid.uuid4()), token=alice) as ws:
        assert flows.close_code(ws) == 4404
    # And dave's REST view of it is a 404 too.
    with flows.http(embedded_platform, dave) as client:
        assert client.get(f"/api/v1/threads/{thread_id}/messages/").status_code == 404


def test_websocket_without_credentials_closes_4403(embedded_platform, alice):
    thread_id = flows.create_thread(embedded_platform, alice)
    with flows.ws_connect(embedded_platform, thread_id) as ws:
        assert flows.close_code(ws) == 4403
    with flows.ws_connect(embedded_platform, thread_id, token="not-a-real-token") as ws:
        assert flows.close_code(ws) == 4403


def test_malformed_frames_get_error_events_and_socket_stays_usable(embedded_platform, alice):
    thread_id = flows.create_thread(embedded_platform, alice)
    with flows.ws_connect(embedded_platform, thread_id, token=alice) as ws:
        ws.send("{this is not json")
        err = flows.recv_json(ws, timeout=10)
        assert err["type"] == "error" and err["code"] == "invalid_json", err
        ws.send(json.dumps(["a", "list"]))
        err = flows.recv_json(ws, timeout=10)
        assert err["type"] == "error" and err["code"] == "invalid_frame", err
        ws.send(json.dumps({"type": "no.such.thing"}))
        err = flows.recv_json(ws, timeout=10)
        assert err["type"] == "error" and err["code"] == "unknown_type", err
        ws.send(json.dumps({"type": "message.send"}))  # no content
        err = flows.recv_json(ws, timeout=10)
        assert err["type"] == "error" and err["message"], err
        # Still open and authorised: a proper message runs a whole turn.
        turn = flows.ws_turn(ws, QUESTION)
        flows.assert_conversation(embedded_platform, alice, thread_id, turn)


def test_foreign_origin_with_session_cookie_is_refused(embedded_platform, alice):
    thread_id = flows.create_thread(embedded_platform, alice)
    browser = flows.login_session(embedded_platform, "alice")
    cookie = f"sessionid={browser.cookies['sessionid']}"
    browser.close()
    # A cross-site page riding alice's cookie: refused.
    with flows.ws_connect(embedded_platform, thread_id, cookie=cookie, origin="http://evil.example") as ws:
        assert flows.close_code(ws) == 4403
    # The cookie alone without any Origin is not a credential either (browsers always send one).
    with flows.ws_connect(embedded_platform, thread_id, cookie=cookie) as ws:
        assert flows.close_code(ws) == 4403
    # Control: the same cookie from the platform's own origin is accepted and authorised
    # (an unknown frame type is only answered once the socket joined the thread).
    with flows.ws_connect(embedded_platform, thread_id, cookie=cookie, origin=embedded_platform.base_url) as ws:
        ws.send(json.dumps({"type": "no.such.thing"}))
        reply = flows.recv_json(ws, timeout=10)
        assert reply["type"] == "error" and reply["code"] == "unknown_type", reply


def test_rest_run_and_poll(embedded_platform, alice):
    thread_id = flows.create_thread(embedded_platform, alice)
    answer = flows.rest_turn(embedded_platform, alice, thread_id)
    assert answer["content_html"] and WITH_TOPIC_TITLE in answer["content_html"]
    # Another user cannot read the run.
    dave = flows.login_token(embedded_platform, "dave")
    with flows.http(embedded_platform, dave) as client:
        assert client.get(f"/api/v1/runs/{answer['run_id']}/").status_code == 404


def test_manage_ask_against_same_database(embedded_platform):
    result = embedded_platform.manage("ask", "--user", "alice", QUESTION, timeout=120, check=False)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    out = result.stdout
    assert "[tool] search_knowledge" in out, out
    assert WITH_TOPIC_TITLE in out and "with" in out.lower(), out
    assert any(line.startswith("> ") and "with" in line for line in out.splitlines()), out
    assert out.rstrip().endswith("[completed]"), out[-300:]
    # The thread it created is alice's and visible over the API with the same answer.
    token = flows.login_token(embedded_platform, "alice")
    with flows.http(embedded_platform, token) as client:
        threads = client.get("/api/v1/threads/", params={"search": "with statement"}).json()
    rows = threads["results"] if isinstance(threads, dict) else threads
    assert rows, threads
