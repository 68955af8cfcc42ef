"""``/v1/chat/completions`` streamed with the real ``openai`` SDK while the Celery worker
running the answer is SIGKILLed (real Redis, PostgreSQL and workers).

Found in a fresh-clone trial: the run is re-queued and the model asked again, and the stream
sent the dead attempt's half answer, a blank line, then the whole new answer ("… word15
\\n\\nword0 word1 …") with ``finish_reason: "stop"``, and remembered that doubled text as the
conversation. The fake upstream answers deterministically, so the new attempt repeats the
text already streamed: the client must get the answer once, seamlessly.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import openai
import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def platform(upstream):
    require_services(services_unreachable_reason())
    env = {
        "OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
        "STREAM_PERSIST_INTERVAL_S": "0.5",
    }
    yield from started(Platform("services", extra_env=env))


def test_a_worker_killed_mid_answer_is_continued_seamlessly_in_the_stream(platform, upstream):
    words = [f"word{n} " for n in range(80)]
    whole = "".join(words)
    upstream.delay_s = 0.1
    upstream.script(text_chunks(whole, pieces=80), text_chunks(whole, pieces=80))  # the model asked twice
    token = flows.login_token(platform, "alice")
    client = openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=token, max_retries=0, timeout=120)
    got: list[str] = []
    finishes: list[str | None] = []
    headers: dict = {}
    failures: list[BaseException] = []

    def read() -> None:
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="openai", stream=True, messages=[{"role": "user", "content": "talk"}])
            headers.update(raw.headers)
            for chunk in raw.parse():
                if chunk.choices:
                    got.append(chunk.choices[0].delta.content or "")
                    finishes.append(chunk.choices[0].finish_reason)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    try:
        reader.start()
        deadline = time.monotonic() + 30
        while "word15" not in "".join(got):
            assert time.monotonic() < deadline and not failures, (failures, got)
            time.sleep(0.02)
        time.sleep(0.8)  # the half answer is saved (STREAM_PERSIST_INTERVAL_S)
        old = platform.procs["celery"]
        os.killpg(old.pid, signal.SIGKILL)
        old.wait(timeout=10)
        shown_before_kill = "".join(got)
        upstream.delay_s = 0.0
        platform._start_worker()
        reader.join(timeout=120)
    finally:
        upstream.delay_s = 0.0
    assert not reader.is_alive() and not failures, failures
    assert "word15" in shown_before_kill and shown_before_kill != whole  # killed mid-answer
    assert "".join(got) == whole  # every word once, in order: no half answer, no blank line
    assert finishes[-1] == "stop"

    thread_id = headers["x-thread-id"]
    assistants = [m for m in flows.messages(platform, token, thread_id) if m["role"] == "assistant"]
    assert [m["status"] for m in assistants] == ["truncated", "complete"]  # a lost attempt, then the answer
    assert assistants[-1]["content"].strip() == whole.strip()
    # The conversation was remembered with the text the client has: resending it continues the thread.
    upstream.script(text_chunks("Done talking."))
    follow = client.chat.completions.with_raw_response.create(model="openai", messages=[
        {"role": "user", "content": "talk"}, {"role": "assistant", "content": "".join(got)},
        {"role": "user", "content": "stop"}])
    assert follow.headers["x-thread-id"] == thread_id
    assert follow.parse().choices[0].message.content == "Done talking."
