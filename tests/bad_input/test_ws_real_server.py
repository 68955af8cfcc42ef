"""Issue 17, bad input against the real server (daphne), in both modes: a frame over the hard
limit (daphne's 1 MiB) closes the socket with 1009 as documented; a deeply nested frame or a
NUL character under it is an ``error`` event on a socket that stays usable; hostile REST
bodies and parameters answer 4xx. Embedded: SQLite + in-memory layer; services: PostgreSQL +
Redis + Celery."""

from __future__ import annotations

import json

import pytest

from tests.e2e import flows
from tests.e2e.conftest import embedded_platform, services_platform  # noqa: F401 - fixtures

HARD_LIMIT = 1024 * 1024  # daphne's websocket_max_message_size (docs/design.md, Websocket)

MODES = [
    pytest.param("embedded_platform", id="embedded"),
    pytest.param("services_platform", id="services", marks=pytest.mark.services),
]


@pytest.fixture(params=MODES)
def platform(request):
    return request.getfixturevalue(request.param)


def test_bad_input_on_the_real_server(platform):
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token)

    with flows.ws_connect(platform, thread_id, token=token) as ws:
        for raw, code in (("[" * 20_000 + "]" * 20_000, "nested_too_deeply"),
                          (json.dumps({"type": "message.send", "content": "a\x00b"}), "invalid_text"),
                          (json.dumps({"type": "run.resume", "run_id": thread_id, "after_seq": 2**64}),
                           "invalid_frame")):
            ws.send(raw)
            reply = flows.recv_json(ws, timeout=10)
            assert reply["type"] == "error" and reply["code"] == code, reply
        # Still open and working: a whole turn runs.
        turn = flows.ws_turn(ws, flows.QUESTION)
        assert turn.events[-1]["type"] == "run.completed"

    with flows.ws_connect(platform, thread_id, token=token) as ws:
        ws.send(json.dumps({"type": "message.send", "content": "x" * HARD_LIMIT}))
        assert flows.close_code(ws) == 1009

    with flows.http(platform, token) as client:
        deep = "[" * 100_000 + "]" * 100_000
        assert client.post("/api/v1/threads/", content=deep,
                           headers={"Content-Type": "application/json"}).status_code == 400
        assert client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": "a\x00b"}).status_code == 400
        assert client.get("/api/v1/threads/", params={"search": "a\x00b"}).status_code == 400
        assert client.get("/api/v1/threads/", params={"offset": str(10**30)}).status_code == 400
        assert client.get("/api/v1/knowledge/search/", params={"q": "x", "top_k": str(10**30)}).status_code == 400
        run_id = flows.messages(platform, token, thread_id)[-1]["run_id"]
        events = client.get(f"/api/v1/runs/{run_id}/events/", headers={"Last-Event-ID": str(10**30)})
        assert events.status_code == 400 and events.json()["error"]["code"] == "invalid_parameter"
