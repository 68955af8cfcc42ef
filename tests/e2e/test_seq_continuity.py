"""Seq continuity across a crash of the process that numbers a run's events.

Embedded mode keeps the event log in the web process's memory and saves the run's seq about
once a second; the web process SIGKILLed mid-answer took the log with it, and the new attempt
numbered its events from the saved seq again (security review: saved 7, clients had seen up to
12: the page showed doubled words, and an SSE client resuming with ``Last-Event-ID`` got the
new attempt's text under old numbers and no ``events_missing``). Now the numbering reserves
seqs ahead in the database (``Run.seq_reserved``, ``EVENTS_SEQ_RESERVE`` at a time) before
anything past the reservation is published, so a new attempt starts above anything a client
can have seen, and a client resuming across the gap gets ``events_missing``.

In production (services mode) the event log is in Redis and outlives the worker: a new
attempt numbers after the log's last seq; the same check runs there, killing the worker."""

from __future__ import annotations

import json
import os
import signal

import httpx
import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, started_with_fake_model

FIRST = " ".join(f"first{n}" for n in range(80))  # the answer the killed process was streaming
SECOND = " ".join(f"second{n}" for n in range(20))  # the new attempt's (the model asked again)


@pytest.fixture(scope="module", params=["embedded", "services"])
def platform(request, upstream):
    yield from started_with_fake_model(request.param, upstream, SSE_KEEPALIVE_S="1", RUN_LEASE_S="8", RUN_HEARTBEAT_S="3")


def kill_the_numbering_process(platform: Platform) -> None:
    """SIGKILL the process running the run (embedded: the web server; services: the worker)
    and start a new one."""
    name = "daphne" if platform.mode == "embedded" else "celery"
    old = platform.procs[name]
    os.killpg(old.pid, signal.SIGKILL)
    old.wait(timeout=10)
    if name == "daphne":
        platform._start_daphne()
        platform._wait_http()
    else:
        platform._start_worker()


def sse_events(platform: Platform, token: str, run_id: str, *, after: int = 0, stop=lambda events: False):
    """Read the run's SSE stream (resuming after ``after``) until it ends, the server goes
    away, or ``stop(events)``."""
    events: list[dict] = []
    headers = {"Last-Event-ID": str(after)} if after else {}
    try:
        with flows.http(platform, token) as client, client.stream(
                "GET", f"/api/v1/runs/{run_id}/events/", headers=headers, timeout=httpx.Timeout(90)) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
                    if stop(events):
                        break
    except (httpx.RemoteProtocolError, httpx.ReadError):
        pass
    return events


def test_a_new_attempt_never_reuses_a_seq_a_client_has_seen(platform, upstream):
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    upstream.delay_s = 0.15
    upstream.script(text_chunks(FIRST, pieces=80), text_chunks(SECOND, pieces=20))
    try:
        with flows.http(platform, token) as client:
            run_id = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": "talk"}).json()["run_id"]
        # Read well past the first saves of the seq (every RUN_HEARTBEAT_S), then kill.
        seen = sse_events(platform, token, run_id,
                          stop=lambda events: sum(e["type"] == "text.delta" for e in events) >= 25)
        kill_the_numbering_process(platform)
        last_seen = seen[-1]["seq"]
        seen_text = "".join(e["delta"] for e in seen if e["type"] == "text.delta")
        resumed = sse_events(platform, token, run_id, after=last_seen)
    finally:
        upstream.delay_s = 0.0
    types = [e["type"] for e in resumed]
    print(f"\n{platform.mode}: saw seq 1–{last_seen}; resumed: {[(e['type'], e.get('seq'), e.get('code')) for e in resumed[:3]]}"
          f" … {types[-1] if types else None}")
    assert resumed and types[-1] == "run.completed", types
    numbered = [e["seq"] for e in resumed if e.get("seq") is not None]
    assert all(seq > last_seen for seq in numbered), numbered  # never a seq the client has seen
    assert numbered == sorted(set(numbered))
    # Whatever the client was shown before the kill, it is told of what it missed before any
    # later text, or the text goes on exactly where it stopped — never another text under old numbers.
    first_text = next(i for i, e in enumerate(resumed) if e["type"] == "text.delta")
    missing = [i for i, e in enumerate(resumed) if e["type"] == "error" and e.get("code") == "events_missing"]
    if missing:
        assert missing[0] < first_text
        assert resumed[missing[0]]["from_seq"] == last_seen + 1
    else:  # no hole: the stream as the client has it must read right, message by message
        shown, current = [], ""
        for event in seen + resumed:
            if event["type"] == "text.delta":
                current += event["delta"]
            elif event["type"] == "message.completed":
                shown.append(current)
                current = ""
        shown += [current] if current else []
        assert FIRST.startswith(shown[0]) and shown[0], (seen_text[-40:], shown[0][-80:])
        assert shown[-1] == SECOND, shown[-1][:120]
    # The stored answer is the new attempt's, whole.
    stored = [m for m in flows.messages(platform, token, thread_id) if m["role"] == "assistant"]
    assert stored[-1]["content"] == SECOND
