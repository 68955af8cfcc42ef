"""Database connections killed again and again near the end of an answer (real web process,
Celery worker, PostgreSQL and Redis; the platform's own database, so nobody else's connections
are touched).

Found trying it from a fresh clone: ``pg_terminate_backend`` on every connection of the
platform every 0.3 s for about 4 s, starting half a second before the answer's end. The lease
heartbeat's pool backed off before re-opening its cut connections, so the worker could not
renew for 8 s and fenced itself; the reaper handed the run on and the model was asked again —
once with its own finished answer in the history (two answers stored), once while the first
worker failed the run under the second (the page "writing…" for good). The heartbeat now keeps
a connection of its own and opens it again at the next beat, a run whose answer is stored is
ended with it, and only the run's owner records a failure. The run completes, or — when the
turn's own pool stays empty past ``DB_POOL_TIMEOUT_S`` (psycopg's pool backs off after
connections killed while they were being opened) — fails visibly with ``database_unavailable``
and its text kept; either way the model is asked once and the thread takes the next message.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from websockets.exceptions import ConnectionClosed

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import PG_ADMIN_DSN, Platform, require_services, services_unreachable_reason, started

pytestmark = pytest.mark.services

KILLS, EVERY_S = 12, 0.3


@pytest.fixture(scope="module")
def platform(upstream):
    require_services(services_unreachable_reason())
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model"}
    p = Platform("services", extra_env=env)
    yield from started(p)


def kill_connections(db_name: str) -> int:
    """Terminate every connection to ``db_name`` ``KILLS`` times, ``EVERY_S`` apart; returns
    how many were terminated."""
    killed = 0
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as admin:
        for _ in range(KILLS):
            rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = %s AND pid <> pg_backend_pid()", (db_name,)).fetchall()
            killed += sum(1 for (ok,) in rows if ok)
            time.sleep(EVERY_S)
    return killed


def test_connections_killed_near_an_answers_end_ask_the_model_once(platform, upstream):
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    text = " ".join(f"k{n}" for n in range(12))
    upstream.delay_s = 0.25
    upstream.script(text_chunks(text, pieces=12))  # ~3 s
    before = len(upstream.requests)
    killed: list[int] = []
    try:
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            seen, run_id = flows.send_and_read_deltas(ws, "twelve words, please", 8)
            killer = threading.Thread(target=lambda: killed.append(kill_connections(platform.db_name)))
            killer.start()
            try:
                while seen[-1].get("type") not in flows.TERMINAL:
                    seen.append(flows.recv_json(ws, timeout=60))
            except ConnectionClosed:
                pass  # the web process lost its connections too: the run's end is read below
            killer.join()
    finally:
        upstream.delay_s = 0.0
    assert killed and killed[0] > 0
    with flows.http(platform, token) as client:
        deadline = time.monotonic() + 60
        while (run := client.get(f"/api/v1/runs/{run_id}/").json())["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline, f"run still {run['status']}\n{platform.log_tail()}"
            time.sleep(0.3)
    assert len(upstream.requests) - before == 1, f"the model was asked again\n{platform.log_tail()}"
    answers = [m for m in flows.messages(platform, token, thread_id) if m["role"] == "assistant"]
    if run["status"] == "completed":
        assert [(m["status"], m["content"]) for m in answers] == [("complete", text)]
    else:  # the pool stayed empty past DB_POOL_TIMEOUT_S: a visible failure, the text kept
        assert run["error"]["code"] == "database_unavailable", f"{run}\n{platform.log_tail()}"
        assert len(answers) == 1 and answers[0]["status"] in ("complete", "truncated")
        assert answers[0]["content"] and text.startswith(answers[0]["content"])

    upstream.script(text_chunks("Still here."))  # the thread takes the next message
    with flows.ws_connect(platform, thread_id, token=token) as ws:
        turn = flows.ws_turn(ws, "and now?")
    assert turn.events[-1]["type"] == "run.completed" and turn.text == "Still here."
