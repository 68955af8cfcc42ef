"""A run handed on from a dead worker goes before the runs sent after it (real Redis broker,
PostgreSQL, Celery workers of one thread each, the reaper of the web process).

Found in a fresh-clone trial: with every worker thread busy, a run whose worker was killed
mid-answer was re-queued *behind* the sends that came after it (the broker's list is first in,
first out), so the person whose answer broke waited longest. The reaper now sends it at the
broker's first priority (``executors.PRIORITY_REQUEUED``).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started

pytestmark = pytest.mark.services

RUN_ROWS = """
import json
from agents.models import Run
print(json.dumps({{str(r.pk): [r.status, r.attempts] for r in Run.objects.filter(pk__in={ids!r})}}))
"""


@pytest.fixture(scope="module")
def platform(upstream):
    require_services(services_unreachable_reason())
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "MAX_ACTIVE_RUNS_PER_USER": "10", "RUN_LEASE_S": "4", "RUN_HEARTBEAT_S": "1",
           "RUN_REAPER_PERIOD_S": "1"}
    p = Platform("services", extra_env=env, worker_concurrency=1)
    yield from started(p)


def run_rows(platform: Platform, ids: list[str]) -> dict[str, list]:
    out = platform.manage("shell", "-c", RUN_ROWS.format(ids=ids)).stdout
    return json.loads(out.strip().splitlines()[-1])


def asked(upstream) -> list[str]:
    """The last user message of each request the model got, in order."""
    return [[m for m in body["messages"] if m["role"] == "user"][-1]["content"] for body in upstream.requests]


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return result


def test_a_run_requeued_after_its_worker_died_is_taken_before_later_sends(platform, upstream):
    upstream.delay_s = 0.2  # the first answer streams for 16 s: the worker's one thread stays busy
    upstream.script(text_chunks(" ".join(f"word{n}" for n in range(80)), pieces=80))
    token = flows.login_token(platform, "alice")
    ids = []
    try:
        with flows.http(platform, token) as client:
            for content in ("first", "second", "third"):
                thread_id = flows.create_thread(platform, token, provider="openai")
                r = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": content})
                assert r.status_code == 202, r.text
                ids.append(r.json()["run_id"])
                if content == "first":  # streaming on the worker's only thread before the others are sent
                    wait_for(lambda: asked(upstream) == ["first"], "the worker never asked the model")
            time.sleep(1.0)
            assert run_rows(platform, ids[1:]) == {ids[1]: ["queued", 0], ids[2]: ["queued", 0]}
            old = platform.procs["celery"]
            os.killpg(old.pid, signal.SIGKILL)
            old.wait(timeout=10)
            upstream.delay_s = 0.0
            # The web process's reaper hands the first run on once its lease has expired.
            wait_for(lambda: run_rows(platform, ids[:1])[ids[0]] == ["queued", 1], "the reaper never re-queued it",
                     timeout=30)
            platform._start_worker()
            for run_id in ids:
                wait_for(lambda run_id=run_id: client.get(f"/api/v1/runs/{run_id}/").json()["status"] == "completed",
                         f"run {run_id} did not complete", timeout=60)
    finally:
        upstream.delay_s = 0.0
    # The model was asked for "first" again before the sends that came after it.
    assert asked(upstream) == ["first", "first", "second", "third"]
