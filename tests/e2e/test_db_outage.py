"""PostgreSQL stopped for longer than the lease's fence in the middle of an answer (real web
process, Celery worker, Redis; a PRIVATE cluster, ``initdb`` + ``pg_ctl`` on a free port).

Found trying it from a fresh clone (issue 18): 25 s and 60 s outages mid-answer fenced the
worker at 0.8 × ``RUN_LEASE_S`` (8 s); once the database was back the reaper re-queued the
run and the whole answer was asked of the model again. Now the worker holds its events while
it cannot renew and tells the reaper it is alive; its first beat after the restart renews the
lease, what it held goes out in order, and the answer goes on: the model is asked once, the
socket gets every word once, and the stored answer is the whole text.
"""

from __future__ import annotations

import time

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, started

pytestmark = pytest.mark.services

OUTAGE_S = 15.0  # past the fence (8 s) and the lease (10 s)
WORDS, DELAY_S = 100, 0.25  # a 25 s answer


@pytest.fixture(scope="module")
def postgres(private_postgres):
    return private_postgres


@pytest.fixture(scope="module")
def platform(upstream, postgres):
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model"}
    p = Platform("services", extra_env=env, pg_admin_dsn=postgres.admin_dsn, asgi_server="uvicorn",
                 pg_url_base=f"postgres://postgres@127.0.0.1:{postgres.port}")
    yield from started(p)


def answer_through_outage(platform, upstream, postgres, *, words: int, prefix: str, deltas_before: int):
    """Ask for a ``words``-word answer streamed at ``DELAY_S`` per word; after ``deltas_before``
    deltas stop PostgreSQL for ``OUTAGE_S`` (reading the socket meanwhile), start it, read to
    the run's end. Asserts what every outage must keep: ``run.completed``, the model asked
    once, every seq once and in order, the socket's text and the stored answer the whole text.
    Returns ``(events, run_id, platform logs)``."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    text = " ".join(f"{prefix}{n}" for n in range(words))
    upstream.delay_s = DELAY_S
    upstream.script(text_chunks(text, pieces=words))
    before = len(upstream.requests)
    try:
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            events, run_id = flows.send_and_read_deltas(ws, f"{words} words, please", deltas_before)
            postgres.stop()
            stopped = time.monotonic()
            try:
                while (left := OUTAGE_S - (time.monotonic() - stopped)) > 0:  # the socket stays open
                    try:
                        events.append(flows.recv_json(ws, timeout=max(0.1, left)))
                    except TimeoutError:
                        pass
            finally:
                postgres.start()
            while events[-1].get("type") not in flows.TERMINAL:
                events.append(flows.recv_json(ws, timeout=60))
    finally:
        upstream.delay_s = 0.0
    logs = platform.log_tail(400)
    assert events[-1]["type"] == "run.completed", ([e.get("type") for e in events[-5:]], logs)
    assert len(upstream.requests) - before == 1, f"the model was asked again\n{logs}"
    run_events = [e for e in events if e.get("run_id") == run_id and "seq" in e]
    assert [e["seq"] for e in run_events] == list(range(1, len(run_events) + 1))  # none lost, none twice
    assert "".join(e["delta"] for e in run_events if e["type"] == "text.delta") == text
    answers = [m for m in flows.messages(platform, token, thread_id) if m["role"] == "assistant"]
    assert [(m["status"], m["content"]) for m in answers] == [("complete", text)]
    with flows.http(platform, token) as client:
        run = client.get(f"/api/v1/runs/{run_id}/").json()
    assert (run["status"], run["last_event_seq"]) == ("completed", run_events[-1]["seq"]), run
    return events, run_id, logs


def test_an_outage_longer_than_the_lease_under_an_answer_asks_the_model_once(platform, upstream, postgres):
    _events, run_id, logs = answer_through_outage(platform, upstream, postgres, words=WORDS, prefix="w",
                                                  deltas_before=4)
    assert f"run {run_id}: lease not renewed" in logs and "holding its events" in logs  # it outlasted the fence
    assert f"run {run_id}: worker lost" not in logs  # the reaper left the run to its worker


def test_an_answer_that_ends_during_the_outage_is_stored_once_the_database_is_back(platform, upstream, postgres):
    """The model finishes (~6 s) while PostgreSQL is down: the turn waits for a renewal before
    its writes (the message's close, usage) instead of failing them after ``DB_POOL_TIMEOUT_S``."""
    answer_through_outage(platform, upstream, postgres, words=24, prefix="s", deltas_before=2)
