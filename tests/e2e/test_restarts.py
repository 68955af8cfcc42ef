"""Redis restarts against real processes (issue 17): a Celery worker and a daphne process
keep working after the broker / channel layer restarts, without being restarted themselves.

Each test owns a PRIVATE ``redis-server`` (``tests.e2e.private_services``) — the machine's
shared Redis is never restarted — with PostgreSQL, daphne and a Celery worker started by the
harness.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started
from .private_services import PrivateRedis, missing_reason

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def redis_server():
    require_services(services_unreachable_reason() or missing_reason(redis=True))
    server = PrivateRedis(persistent=True).start()  # AOF, as README recommends for production
    yield server
    server.close()


@pytest.fixture(scope="module")
def platform(upstream, redis_server):
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "STREAM_PERSIST_INTERVAL_S": "0.5"}
    p = Platform("services", extra_env=env, redis_url=redis_server.url(0))
    yield from started(p)


def send(platform: Platform, token: str, thread_id: str, content: str) -> str:
    with flows.http(platform, token) as client:
        r = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": content})
    assert r.status_code == 202, r.text
    return r.json()["run_id"]


def wait_run(platform: Platform, token: str, run_id: str, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    with flows.http(platform, token) as client:
        while time.monotonic() < deadline:
            run = client.get(f"/api/v1/runs/{run_id}/").json()
            if run["status"] in ("completed", "failed", "cancelled"):
                return run
            time.sleep(0.2)
    raise AssertionError(f"run {run_id} not finished within {timeout} s: {run}")


def wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_celery_worker_survives_a_redis_restart(platform, upstream, redis_server):
    """A worker holding a run while Redis restarts keeps it (the run completes, one upstream
    call), and the same worker process takes new runs afterwards (no restart needed)."""
    worker = platform.procs["celery"]
    token = flows.login_token(platform, "alice")
    held_thread = flows.create_thread(platform, token, provider="openai")
    upstream.delay_s = 0.2
    upstream.script(text_chunks(" ".join(f"w{n}" for n in range(30)), pieces=30))  # ~6 s of streaming
    before = len(upstream.requests)
    try:
        held = send(platform, token, held_thread, "a long answer, please")
        wait_for(lambda: len(upstream.requests) > before, what="the held run's upstream call")
        time.sleep(1.0)
        redis_server.restart(down_s=3.0)
        run = wait_run(platform, token, held)
    finally:
        upstream.delay_s = 0.0
    assert worker.poll() is None, platform.log_tail()
    assert run["status"] == "completed", (run, platform.log_tail())
    assert len(upstream.requests) == before + 1  # the held run was not started again elsewhere
    held_msgs = flows.messages(platform, token, held_thread)
    assert held_msgs[-1]["content"] == " ".join(f"w{n}" for n in range(30))

    # New runs on the same worker process, once Redis is back (several: every pool thread's
    # broker connection must have recovered, not just one).
    for n in range(3):
        upstream.script(text_chunks(f"After the restart {n}."))
        thread_id = flows.create_thread(platform, token, provider="openai")
        run = wait_run(platform, token, send(platform, token, thread_id, f"still there {n}?"), timeout=60)
        assert run["status"] == "completed", (run, platform.log_tail())
        assert flows.messages(platform, token, thread_id)[-1]["content"] == f"After the restart {n}."
    assert worker.poll() is None and platform.procs["celery"] is worker
    log = platform.log_tail(400)
    assert "AttributeError" not in log and "Unrecoverable error" not in log, log
    assert platform.worker_tasks_run().get("agents.run_turn", 0) >= 4


def resume_like_the_browser(platform: Platform, token: str, thread_id: str, run_id: str, after_seq: int,
                            within_s: float = 60.0) -> list[dict]:
    """What ``stream.js`` does after a close: reconnect with backoff (to the same daphne
    process) and send ``run.resume`` after the last seq it handled; returns the run's events
    through its terminal event. A socket refused or closed again while Redis is still coming
    back is retried, as the browser would."""
    deadline = time.monotonic() + within_s
    events: list[dict] = []
    while True:
        assert time.monotonic() < deadline, f"no resume within {within_s} s\n{platform.log_tail()}"
        try:
            with flows.ws_connect(platform, thread_id, token=token) as ws:
                ws.send(json.dumps({"type": "run.resume", "run_id": run_id, "after_seq": after_seq}))
                while not events or events[-1].get("type") not in flows.TERMINAL:
                    frame = flows.recv_json(ws, timeout=max(0.1, deadline - time.monotonic()))
                    assert frame.get("type") != "error", frame
                    if frame.get("run_id") == run_id and frame["seq"] > after_seq:
                        events.append(frame)
                        after_seq = frame["seq"]
                return events
        except (ConnectionClosed, InvalidStatus, OSError):
            time.sleep(0.5)


def test_a_redis_restart_under_an_open_socket_loses_no_event(platform, upstream, redis_server):
    """A Redis restart under an open websocket never leaves it silent: either the channel
    layer reconnects and resubscribes by itself (the production pub/sub layer) and the same
    socket goes on — the cursor fills what was published while Redis was down from the event
    log — or the socket is closed with 4503 and the client reconnects to the same daphne
    process and sends ``run.resume``. Either way the client receives every event once, through
    the terminal event, and new runs stream on new sockets without restarting daphne."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    text = " ".join(f"v{n}" for n in range(40))
    upstream.delay_s = 0.2
    upstream.script(text_chunks(text, pieces=40))  # ~8 s of streaming
    seen: list[dict] = []
    try:
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            seen, _ = flows.send_and_read_deltas(ws, "long, please", 3)
            redis_server.restart(down_s=2.0)
            code = None
            try:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    seen.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd else None
            except TimeoutError:
                pass
        run_events = [e for e in seen if "seq" in e]
        if code is None:  # still open: it must have gone on to the terminal event by itself
            resumed = []
        else:
            assert code == 4503, f"closed with {code}, not for a reconnect; saw {[e.get('type') for e in seen]}" \
                                 f"\n{platform.log_tail()}"
            run_id = run_events[0]["run_id"]
            resumed = resume_like_the_browser(platform, token, thread_id, run_id, run_events[-1]["seq"])
    finally:
        upstream.delay_s = 0.0
    events = run_events + resumed
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # none lost, none twice
    assert events[-1]["type"] == "run.completed"
    assert "".join(e["delta"] for e in events if e["type"] == "text.delta") == text

    upstream.script(text_chunks("A new socket works."))
    with flows.ws_connect(platform, thread_id, token=token) as ws:
        turn = flows.ws_turn(ws, "and now?")
    assert turn.events[-1]["type"] == "run.completed" and turn.text == "A new socket works."
    assert platform.procs["daphne"].poll() is None


def read_sse(platform: Platform, token: str, run_id: str, into: list[dict], timeout: float = 120.0) -> None:
    """Follow ``GET /api/v1/runs/{id}/events/`` to its end, appending each event to ``into``."""
    with flows.http(platform, token) as client, client.stream(
            "GET", f"/api/v1/runs/{run_id}/events/", timeout=httpx.Timeout(timeout)) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                into.append(json.loads(line[len("data: "):]))


def test_a_long_redis_outage_closes_the_socket_and_keeps_the_sse_stream(platform, upstream, redis_server):
    """Redis down longer than ``CHANNEL_LAYER_LOST_AFTER_S`` (5 s) under an open websocket and
    an SSE stream of the same run. The socket is closed with 4503 while Redis is still down —
    before, it stayed open and silent, and the page said "connected" while nothing arrived
    (found trying a Stop during a Redis outage from a fresh clone) — and a resume once Redis is
    back gives every event once. The SSE stream stays open through the outage (keep-alive
    comments) and delivers every event through ``run.completed``."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    text = " ".join(f"w{n}" for n in range(60))
    upstream.delay_s = 0.25
    upstream.script(text_chunks(text, pieces=60))  # ~15 s of streaming
    sse_events: list[dict] = []
    try:
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            seen, run_id = flows.send_and_read_deltas(ws, "long, please", 3)
            sse = threading.Thread(target=read_sse, args=(platform, token, run_id, sse_events), daemon=True)
            sse.start()
            wait_for(lambda: len(sse_events) >= 3, what="the SSE stream's first events")
            redis_server.stop()
            try:
                code = None
                while True:  # events may still come from before the outage; then the close
                    seen.append(flows.recv_json(ws, timeout=30))
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd else None
            assert redis_server.proc is None  # closed while Redis is down, not after it came back
            assert code == 4503, f"closed with {code}\n{platform.log_tail()}"
        redis_server.start()
        run_events = [e for e in seen if "seq" in e]
        resumed = resume_like_the_browser(platform, token, thread_id, run_id, run_events[-1]["seq"])
        sse.join(timeout=90)
        assert not sse.is_alive(), f"the SSE stream did not end\n{platform.log_tail()}"
    finally:
        upstream.delay_s = 0.0
        if redis_server.proc is None:
            redis_server.start()
    events = run_events + resumed
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # none lost, none twice
    assert events[-1]["type"] == "run.completed"
    assert "".join(e["delta"] for e in events if e["type"] == "text.delta") == text
    assert [e["seq"] for e in sse_events] == [e["seq"] for e in events]  # the SSE stream: the same events
    assert sse_events[-1]["type"] == "run.completed"
