"""A Celery worker SIGKILLed while the real Hermes gateway streams a run (production mode:
PostgreSQL, Redis, daphne and a Celery worker as subprocesses, ``tests/e2e/harness.py``).

The run keeps its remote run id; the reaper of a new worker re-queues it; the new worker
re-attaches to the same remote run (the gateway is asked to start exactly one), and the final
answer equals the remote run's output. The recovery time is printed as ``BENCH``.
"""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import psycopg
import pytest

from tests.e2e import flows
from tests.e2e.harness import (
    PG_ADMIN_DSN,
    Platform,
    require_services,
    services_unreachable_reason,
    started,
)
from tests.fakes.openai_server import text_chunks

from .conftest import start_gateway

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def gateway(hermes_exe, agent_model, tmp_path_factory):
    gw = start_gateway(hermes_exe, agent_model, tmp_path_factory)
    yield gw
    gw.cleanup()


@pytest.fixture(scope="module")
def platform(gateway):
    require_services(services_unreachable_reason())
    p = Platform("services", extra_env={"HERMES_API_KEY": gateway.key, "HERMES_API_BASE": gateway.base_url,
                                        "STREAM_PERSIST_INTERVAL_S": "0.5"})
    yield from started(p)


def backend_state(platform: Platform, run_id: str) -> dict:
    with psycopg.connect(PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{platform.db_name}") as conn:
        row = conn.execute("SELECT backend_state FROM agents_run WHERE id = %s", (run_id,)).fetchone()
    return row[0]


def test_worker_killed_while_the_agent_streams_reattaches(platform, gateway, agent_model):
    words = "".join(f"word{n} " for n in range(120)).strip()
    streamed_before = len(agent_model.streamed_requests)
    agent_model.script(text_chunks(words, pieces=120))
    agent_model.delay_s = 0.1
    try:
        token = flows.login_token(platform, "admin")
        thread_id = flows.create_thread(platform, token, provider="hermes")
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            ws.send(json.dumps({"type": "message.send", "content": "count slowly"}))
            text: list[str] = []

            def past_word15(e):
                if e["type"] == "text.delta":
                    text.append(e["delta"])
                return "word15" in "".join(text)

            before = flows.events_until(ws, past_word15, timeout=90)
            time.sleep(0.8)  # the partial text is persisted every half second
            old = platform.procs["celery"]
            os.killpg(old.pid, signal.SIGKILL)
            old.wait(timeout=10)
            killed_at = time.monotonic()
            platform._start_worker()
            after = flows.events_until(ws, lambda e: e["type"] in flows.TERMINAL, timeout=120)
            recovered_s = time.monotonic() - killed_at
    finally:
        agent_model.delay_s = 0.0
    print(f"BENCH agent_reattach_recovery_s={recovered_s:.1f}")
    assert after[-1]["type"] == "run.completed", [e["type"] for e in after]
    run_id = after[-1]["run_id"]
    state = backend_state(platform, run_id)
    remote = httpx.get(f"{gateway.base_url}/runs/{state['remote_run_id']}",
                       headers={"Authorization": f"Bearer {gateway.key}"}, timeout=5).json()
    assert remote["status"] == "completed"
    msgs = flows.messages(platform, token, thread_id)
    answer = [m for m in msgs if m["role"] == "assistant"][-1]
    assert answer["status"] == "complete" and answer["content"] == remote["output"] == words
    # One remote run: the agent's model got exactly one streamed request for this turn.
    assert len(agent_model.streamed_requests) - streamed_before == 1
    seqs = [e["seq"] for e in before + after if "seq" in e]  # not run.queued, the send's reply
    assert seqs == sorted(set(seqs)), "no duplicate or out-of-order seq after recovery"
    assert "".join(e["delta"] for e in before + after if e["type"] == "text.delta").strip() == words
