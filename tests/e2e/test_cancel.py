"""Stop, across real processes: the cancel is made in the web process, the turn streams in a
Celery worker (PostgreSQL, Redis). The heartbeat's interval is set to half a minute, so only
the cancel's wake through the channel layer (``agents.runs.control``) can stop the model
before its 15-s answer ends. Prints ``BENCH cancel_to_cancelled_s=`` and the tokens that
still arrived after the cancel was sent.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started

pytestmark = pytest.mark.services

WORDS = [f"word{n} " for n in range(300)]


@pytest.fixture(scope="module")
def platform(upstream):
    require_services(services_unreachable_reason())
    env = {
        "OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
        "RUN_HEARTBEAT_S": "30", "STREAM_PERSIST_INTERVAL_S": "30", "RUN_LEASE_S": "120",
    }
    yield from started(Platform("services", extra_env=env))


def test_stop_reaches_the_worker_at_once(platform, upstream):
    upstream.delay_s = 0.05  # 300 tokens: 15 s of answer
    upstream.script(text_chunks("".join(WORDS), pieces=300))
    try:
        token = flows.login_token(platform, "alice")
        thread_id = flows.create_thread(platform, token, provider="openai")
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            ws.send(json.dumps({"type": "message.send", "content": "talk"}))
            before = flows.events_until(ws, lambda e: e["type"] == "text.delta" and "word10" in e["delta"])
            run_id = before[0]["run_id"]
            ws.send(json.dumps({"type": "run.cancel", "run_id": run_id}))
            sent_at = time.monotonic()
            after = flows.events_until(ws, lambda e: e["type"] in flows.TERMINAL, timeout=60)
            took_s = time.monotonic() - sent_at
    finally:
        upstream.delay_s = 0.0
    late = sum(1 for e in after if e["type"] == "text.delta")
    print(f"BENCH cancel_to_cancelled_s={took_s:.2f} tokens_after_cancel={late}")
    assert after[-1]["type"] == "run.cancelled"
    streamed = "".join(e["delta"] for e in before + after if e["type"] == "text.delta")
    msgs = flows.messages(platform, token, thread_id)
    answer = next(m for m in msgs if m["role"] == "assistant")
    # Stopped mid-answer (the heartbeat alone would have let all 300 words through), and what
    # the socket showed is what is kept.
    assert answer["status"] == "cancelled" and answer["content"] == streamed
    assert "word10 " in streamed and "word150 " not in streamed
