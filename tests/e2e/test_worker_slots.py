"""A run queued while one Celery worker's threads are all busy goes to a worker with a free
thread (real Redis, PostgreSQL and two workers).

Turn tasks are acknowledged when a thread starts them, so with prefetch alone a worker whose
threads were all busy still reserved the next turns from the broker and held them until one
of its own turns ended — minutes, with another worker idle (seen in the side-by-side bench as
a 20 s claim wait at 50 chats). ``CELERY_WORKER_DISABLE_PREFETCH``: a worker takes a task only
while it has a free thread.
"""

from __future__ import annotations

import time

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started

pytestmark = pytest.mark.services

HOLD_S = 25.0  # each answer's first token: the first worker's two threads stay busy this long


@pytest.fixture(scope="module")
def platform(upstream):
    require_services(services_unreachable_reason())
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "MAX_ACTIVE_RUNS_PER_USER": "10"}
    p = Platform("services", extra_env=env, worker_concurrency=2)
    yield from started(p)


def test_a_run_queued_behind_a_busy_worker_is_taken_by_a_worker_with_a_free_thread(platform, upstream):
    upstream.first_token_delay_s = HOLD_S
    upstream.script(*(text_chunks(f"answer {i}") for i in range(3)))
    token = flows.login_token(platform, "alice")
    ids = []
    with flows.http(platform, token) as client:
        for i in range(3):  # three threads, one run each: one more than the worker's two threads
            thread_id = flows.create_thread(platform, token, provider="openai")
            r = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": f"question {i}"})
            assert r.status_code == 202, r.text
            ids.append(r.json()["run_id"])
            if i < 2:  # the first two are running on the first worker before the third is sent
                deadline = time.monotonic() + 30
                while flows.run_rows(platform, [ids[-1]], "status", "lease_owner")[ids[-1]][0] != "running":
                    assert time.monotonic() < deadline, "the first worker did not start the run"
                    time.sleep(0.2)
    second = platform.add_worker(concurrency=2)
    deadline = time.monotonic() + HOLD_S - 5  # well before the first worker has a free thread
    while True:
        rows = flows.run_rows(platform, ids, "status", "lease_owner")
        if rows[ids[2]][0] == "running":
            break
        assert time.monotonic() < deadline, f"the third run waited behind the busy worker: {rows}"
        time.sleep(0.2)
    first_pid, second_pid = platform.procs["celery"].pid, second.pid
    owners = [int(rows[i][1].split(":")[1]) for i in ids]
    assert owners == [first_pid, first_pid, second_pid], rows
    with flows.http(platform, token) as client:
        for run_id in ids:  # all three finish once the model answers
            deadline = time.monotonic() + HOLD_S + 30
            while (status := client.get(f"/api/v1/runs/{run_id}/").json()["status"]) in ("queued", "running"):
                assert time.monotonic() < deadline, f"run {run_id} still {status}"
                time.sleep(0.25)
            assert status == "completed"
