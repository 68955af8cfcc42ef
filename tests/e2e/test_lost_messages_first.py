"""A run whose broker message a Redis restart lost is enqueued again and served before the
sends that came after the restart (real uvicorn, Celery worker of one thread, PostgreSQL and
a PRIVATE ``redis-server`` restarted empty).

Found in a fresh-clone trial: with every worker thread busy, the reaper counted the broker's
backlog — the newer sends' messages — as if it held the lost runs' turns, moved their deadline
on and enqueued them only a deadline later: the runs sent first were served last, the workers
idle meanwhile. The reaper now looks for each stale run's own message
(``executors.waiting_turns``).
"""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, started
from .test_chat_ui import reset
from .test_requeued_first import asked

pytestmark = pytest.mark.services

DEADLINE_S = 4  # RUN_QUEUED_DEADLINE_S: a run unclaimed this long is looked at by the reaper


@pytest.fixture(scope="module")
def platform(upstream, redis_server):
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "MAX_ACTIVE_RUNS_PER_USER": "10", "RUN_QUEUED_DEADLINE_S": str(DEADLINE_S), "RUN_REAPER_PERIOD_S": "1"}
    p = Platform("services", extra_env=env, worker_concurrency=1, redis_url=redis_server.url(0))
    yield from started(p)


def test_runs_whose_messages_a_redis_restart_lost_go_before_the_sends_after_it(platform, upstream, redis_server):
    reset(upstream, text_chunks(" ".join(f"word{n}" for n in range(60)), pieces=60),
          delay_s=0.25)  # the first answer holds the worker's only thread for 15 s
    since = len(upstream.requests)
    token = flows.login_token(platform, "alice")
    threads = [flows.create_thread(platform, token, provider="openai") for _ in range(5)]
    ids = []
    try:
        with flows.http(platform, token) as client:
            def send(n: int, content: str) -> None:
                r = client.post(f"/api/v1/threads/{threads[n]}/runs/", json={"content": content})
                assert r.status_code == 202, r.text
                ids.append(r.json()["run_id"])

            send(0, "long")
            flows.wait_for(lambda: asked(upstream, since) == ["long"], "the worker never asked the model")
            send(1, "lost one")
            send(2, "lost two")
            redis_server.restart(down_s=1.0)  # their messages are gone; the worker reconnects
            send(3, "after one")
            send(4, "after two")
            # The reaper sees the two lost runs past the deadline while the worker is still busy
            # and the broker holds two messages — the newer sends'.
            flows.wait_for(lambda: all(a == 1 for _s, a in flows.run_rows(platform, ids[1:3], "status", "attempts").values()),
                     "the lost runs were not enqueued again while the worker was busy", timeout=DEADLINE_S + 8)
            assert flows.run_rows(platform, [ids[0]])[ids[0]] == ["running"]  # still answering "long"
            upstream.delay_s = 0.0
            for run_id in ids:
                flows.wait_for(lambda run_id=run_id: client.get(f"/api/v1/runs/{run_id}/").json()["status"] == "completed",
                         f"run {run_id} did not complete", timeout=60)
    finally:
        upstream.delay_s = 0.0
    assert asked(upstream, since) == ["long", "lost one", "lost two", "after one", "after two"]
