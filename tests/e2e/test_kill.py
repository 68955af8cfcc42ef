"""A Celery worker SIGKILLed mid-run (real Redis, PostgreSQL and workers).

The run's lease stops being renewed; the reaper of a new worker re-queues it within
seconds; the resumed run never repeats the write tool (ledger: outcome unknown) and keeps
the partial text. The recovery time is printed as ``BENCH kill_recovery_s=``.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.fakes.openai_server import text_chunks, tool_call_chunks

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def platform(upstream, tmp_path_factory):
    require_services(services_unreachable_reason())
    ledger = tmp_path_factory.mktemp("kill") / "writes.txt"
    ledger.touch()
    env = {
        "EXTRA_TOOL_MODULES": "tests.e2e.kill_tools", "KILL_TEST_LEDGER": str(ledger),
        "OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
        "STREAM_PERSIST_INTERVAL_S": "0.5",
    }
    p = Platform("services", extra_env=env)
    p.ledger = ledger
    yield from started(p)


def kill_worker_and_start_another(platform: Platform) -> float:
    old = platform.procs["celery"]
    os.killpg(old.pid, signal.SIGKILL)
    old.wait(timeout=10)
    killed_at = time.monotonic()
    platform._start_worker()
    return killed_at


def test_worker_killed_during_a_write_tool(platform, upstream):
    upstream.script(
        tool_call_chunks([("call_w", "slow_write", json.dumps({"text": "exactly once", "seconds": 30}))]),
        text_chunks("I could not confirm the write; please check."),
    )
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    with flows.ws_connect(platform, thread_id, token=token) as ws:
        ws.send(json.dumps({"type": "message.send", "content": "write it"}))
        before = flows.events_until(ws, lambda e: e["type"] == "tool.started")
        deadline = time.monotonic() + 10
        while "exactly once" not in platform.ledger.read_text():
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.05)
        killed_at = kill_worker_and_start_another(platform)
        after = flows.events_until(ws, lambda e: e["type"] in flows.TERMINAL, timeout=90)
        recovered_s = time.monotonic() - killed_at
    print(f"BENCH kill_recovery_s={recovered_s:.1f} (tool phase)")
    assert after[-1]["type"] == "run.completed", [e["type"] for e in after]
    assert platform.ledger.read_text().count("exactly once") == 1  # never executed again
    completed = [e for e in after if e["type"] == "tool.completed"]
    assert completed and completed[0]["is_error"] and "unknown" in completed[0]["summary"].lower()
    seqs = [e["seq"] for e in before + after]
    assert seqs == sorted(set(seqs)), "no duplicate or out-of-order seq after recovery"
    msgs = flows.messages(platform, token, thread_id)
    assert msgs[-1]["content"] == "I could not confirm the write; please check."


def test_worker_killed_while_streaming_keeps_the_partial_text(platform, upstream):
    words = [f"word{n} " for n in range(80)]
    slow = text_chunks("".join(words), pieces=80)
    upstream.delay_s = 0.1
    upstream.script(slow, text_chunks("Picking up after the interruption."))
    try:
        token = flows.login_token(platform, "alice")
        thread_id = flows.create_thread(platform, token, provider="openai")
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            ws.send(json.dumps({"type": "message.send", "content": "talk"}))
            streamed: list[str] = []

            def past_word15(e):
                if e["type"] == "text.delta":
                    streamed.append(e["delta"])
                return "word15" in "".join(streamed)

            seen = flows.events_until(ws, past_word15)
            time.sleep(0.8)  # let the half-second persistence write the partial text
            killed_at = kill_worker_and_start_another(platform)
            upstream.delay_s = 0.0
            after = flows.events_until(ws, lambda e: e["type"] in flows.TERMINAL, timeout=90)
            recovered_s = time.monotonic() - killed_at
    finally:
        upstream.delay_s = 0.0
    print(f"BENCH kill_recovery_s={recovered_s:.1f} (streaming phase)")
    assert after[-1]["type"] == "run.completed"
    msgs = flows.messages(platform, token, thread_id)
    assistants = [m for m in msgs if m["role"] == "assistant"]
    partial = assistants[0]
    assert partial["status"] == "truncated"
    assert partial["content"].startswith("word0 word1 ") and "word15" in partial["content"]
    assert "".join(words).startswith(partial["content"])
    assert assistants[-1]["content"] == "Picking up after the interruption." and assistants[-1]["status"] == "complete"
    seqs = [e["seq"] for e in seen + after]
    assert seqs == sorted(set(seqs))
    # The socket was told where the half answer ended, before the new attempt's text.
    ended = next(i for i, e in enumerate(after) if e["type"] == "message.completed")
    assert (after[ended]["message_id"], after[ended]["status"]) == (partial["id"], "truncated")
    resumed = "".join(e["delta"] for e in after[ended:] if e["type"] == "text.delta")
    assert resumed == "Picking up after the interruption."
