"""How long Stop takes: from a ``run.cancel`` frame on the websocket to ``run.cancelled`` on the
same socket, and the tokens that still arrived in between.

A cancel is a database write; the process that runs the turn used to find it only at its
heartbeat's next renewal (every ``min(RUN_HEARTBEAT_S, STREAM_PERSIST_INTERVAL_S)``, 1 s by
default), so a person pressing Stop watched up to a second more text arrive (a fresh-clone
trial counted 23 tokens). ``agents.runs.control`` wakes that heartbeat at once. This bench
starts the platform as real processes (``tests/e2e/harness.py``: production = PostgreSQL,
Redis, ``python -m config.serve`` and a Celery worker; embedded = one process on SQLite)
with the fake upstream of the e2e tests streaming 50 tokens/s, and per cancel: a new thread, a
send, a cancel after a random 5–40 tokens (a person does not press Stop in step with the
heartbeat), then the answer as stored (it must be exactly what the socket showed).

Prints, per mode, the cancel → ``run.cancelled`` seconds and the tokens after the cancel was
sent (p50, max over ``--cancels``), with the heartbeat interval in force.

Usage: ``.venv/bin/python bench/cancel_latency.py [--modes production embedded] [--cancels 12]``
(production needs PostgreSQL and Redis as for the e2e tests).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e import flows  # noqa: E402
from tests.e2e.harness import Platform  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, text_chunks  # noqa: E402

WORDS = "".join(f"word{n} " for n in range(400))


def one_cancel(platform: Platform, upstream: FakeOpenAI, token: str, rng: random.Random) -> tuple[float, int]:
    upstream.script(text_chunks(WORDS, pieces=400))
    thread_id = flows.create_thread(platform, token, provider="openai")
    stop_after = rng.randint(5, 40)
    with flows.ws_connect(platform, thread_id, token=token) as ws:
        ws.send(json.dumps({"type": "message.send", "content": "talk"}))
        deltas = 0

        def enough(event: dict) -> bool:
            nonlocal deltas
            deltas += event["type"] == "text.delta"
            return deltas >= stop_after

        before = flows.events_until(ws, enough)
        ws.send(json.dumps({"type": "run.cancel", "run_id": before[0]["run_id"]}))
        sent = time.monotonic()
        after = flows.events_until(ws, lambda e: e["type"] in flows.TERMINAL, timeout=60)
        took = time.monotonic() - sent
    if after[-1]["type"] != "run.cancelled":
        raise SystemExit(f"the run ended {after[-1]['type']}, not cancelled")
    shown = "".join(e["delta"] for e in before + after if e["type"] == "text.delta")
    stored = next(m for m in flows.messages(platform, token, thread_id) if m["role"] == "assistant")
    if (stored["status"], stored["content"]) != ("cancelled", shown):
        raise SystemExit(f"stored {stored['status']} answer differs from what the socket showed")
    return took, sum(1 for e in after if e["type"] == "text.delta")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=["production", "embedded"], choices=["production", "embedded"])
    parser.add_argument("--cancels", type=int, default=12)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    upstream = FakeOpenAI(api_key="sk-bench").start()
    upstream.delay_s = 0.02  # 50 tokens/s
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "LOG_LEVEL": "WARNING"}
    try:
        for mode in args.modes:
            rng = random.Random(args.seed)
            with Platform("services" if mode == "production" else "embedded", extra_env=env) as platform:
                token = flows.login_token(platform, "alice")
                one_cancel(platform, upstream, token, rng)  # warm-up: imports, connections, the SDK client
                results = [one_cancel(platform, upstream, token, rng) for _ in range(args.cancels)]
            seconds, tokens = zip(*results, strict=True)
            print(f"{mode:10s} {args.cancels} cancels: run.cancelled after p50 {statistics.median(seconds):.3f} s, "
                  f"max {max(seconds):.3f} s; tokens after the cancel p50 {statistics.median(tokens):.0f}, "
                  f"max {max(tokens)}")
    finally:
        upstream.stop()


if __name__ == "__main__":
    main()
