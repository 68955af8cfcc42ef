"""Durability under load (issue 17): N runs whose model takes ``--first-token-s`` (20 s) to
its first token, while Redis restarts M times and the Celery worker is SIGKILLed K times.

The platform runs in services mode (tests/e2e/harness.py): PostgreSQL (a fresh database on
the shared server), a PRIVATE ``redis-server`` with an append-only file (as README
recommends for production; never the shared Redis), daphne and one Celery worker (thread
pool, 8 threads — fewer than N, so runs queue). The fake upstream answers each run's first
round with a call of the write tool ``slow_write`` (it appends a line to a ledger file: the
bench counts executions across processes) and the second round with a text; every response
waits ``--first-token-s`` before its first chunk.

Each run has a client that behaves like the browser (``stream.js``): a websocket that, when
closed or refused, reconnects after 0.5 s and sends ``run.resume`` after the last seq it saw.
The clients keep every frame they receive (no de-duplication on their side).

Prints, after every run ended (or ``--timeout-s``):

* runs completed (of N), and the other ends;
* duplicate upstream calls — a round asked again with no worker kill between the two calls;
  separately, rounds asked again after a kill that came while (or after) the earlier call
  was made — the killed worker's answer died with it, asking again is the recovery;
* duplicate side effects — ``slow_write`` executions beyond one per run;
* lost events — seqs up to the run's ``last_event_seq`` a client never received, and runs
  whose client never saw the terminal event; duplicated events — seqs a client received
  twice.

Usage: ``.venv/bin/python bench/durability.py [--runs 12] [--redis-restarts 2]
[--worker-kills 2] [--first-token-s 20]``. Needs PostgreSQL on 127.0.0.1:5432 and
``redis-server`` installed. Nothing is asserted; the figures go to stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from tests.e2e import flows  # noqa: E402
from tests.e2e.harness import Platform  # noqa: E402
from tests.e2e.private_services import PrivateRedis  # noqa: E402
from tests.fakes._loopback import ConnectionDropped  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, _Handler, _wrap, text_chunks, tool_call_chunks  # noqa: E402

TERMINAL = flows.TERMINAL


class _RoundHandler(_Handler):
    def _chat_completions(self, body):
        fake = self.fake
        marker, round_ = fake.classify(body)
        fake._local.body = body
        entry = {"marker": marker, "round": round_, "outcome": "started", "at": time.monotonic()}
        with fake.lock:
            fake.calls.append(entry)
        try:
            super()._chat_completions(body)
            entry["outcome"] = "answered"
        except ConnectionDropped:
            entry["outcome"] = "dropped"  # the asking worker died: its answer is lost
            raise


class RoundFake(FakeOpenAI):
    """Answers by conversation: a user turn ``bench <i>`` gets a ``slow_write`` call, the
    turn after the tool's result gets the final text. Records every call's round and whether
    its answer was written in full."""

    handler = _RoundHandler

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._local = threading.local()
        self.lock = threading.Lock()
        self.calls: list[dict] = []

    @staticmethod
    def classify(body) -> tuple[str, str]:
        msgs = body.get("messages") or [] if isinstance(body, dict) else []
        user = next((m.get("content") for m in reversed(msgs) if m.get("role") == "user"), "") or ""
        if isinstance(user, list):
            user = " ".join(p.get("text", "") for p in user if isinstance(p, dict))
        marker = user.strip().split()[-1] if user.strip() else "?"
        return marker, ("answer" if msgs and msgs[-1].get("role") == "tool" else "tool_call")

    def next_iteration(self):
        marker, round_ = self.classify(getattr(self._local, "body", {}) or {})
        with self._lock:
            self._served += 1
            n = self._served
        if round_ == "tool_call":
            item = tool_call_chunks([(f"call_{marker}", "slow_write", json.dumps({"text": marker, "seconds": 1}))])
        else:
            item = text_chunks(f"Done with {marker}.", pieces=4)
        return n, _wrap([item], raw=False)[0]


class Client(threading.Thread):
    """One run's browser-like websocket client (reconnect + ``run.resume``)."""

    def __init__(self, platform, token, thread_id, run_id, deadline):
        super().__init__(daemon=True)
        self.platform, self.token, self.thread_id, self.run_id, self.deadline = (
            platform, token, thread_id, run_id, deadline)
        self.seqs: list[int] = []
        self.terminal: str | None = None
        self.reconnects = 0
        self.missing_reported: list[tuple[int, int]] = []

    def run(self):
        after = 0
        while self.terminal is None and time.monotonic() < self.deadline:
            try:
                with flows.ws_connect(self.platform, self.thread_id, token=self.token) as ws:
                    ws.send(json.dumps({"type": "run.resume", "run_id": self.run_id, "after_seq": after}))
                    while self.terminal is None and time.monotonic() < self.deadline:
                        frame = json.loads(ws.recv(timeout=max(0.1, self.deadline - time.monotonic())))
                        if frame.get("type") == "error" and frame.get("code") == "events_missing":
                            self.missing_reported.append((frame["from_seq"], frame["to_seq"]))
                        if frame.get("run_id") != self.run_id or "seq" not in frame:
                            continue
                        self.seqs.append(frame["seq"])
                        after = max(after, frame["seq"])
                        if frame["type"] in TERMINAL:
                            self.terminal = frame["type"]
            except (ConnectionClosed, InvalidStatus, OSError, TimeoutError):
                self.reconnects += 1
                time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--redis-restarts", type=int, default=2)
    parser.add_argument("--worker-kills", type=int, default=2)
    parser.add_argument("--first-token-s", type=float, default=20.0)
    parser.add_argument("--redis-down-s", type=float, default=2.0)
    parser.add_argument("--gap-s", type=float, default=9.0, help="seconds between disruptions")
    parser.add_argument("--timeout-s", type=float, default=420.0)
    args = parser.parse_args()

    upstream = RoundFake(api_key="sk-bench").start()
    upstream.first_token_delay_s = args.first_token_s
    redis = PrivateRedis(persistent=True).start()
    ledger = Path(tempfile.mkdtemp(prefix="bench-durability-")) / "writes.txt"
    ledger.touch()
    env = {"EXTRA_TOOL_MODULES": "tests.e2e.kill_tools", "KILL_TEST_LEDGER": str(ledger),
           "OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "MAX_ACTIVE_RUNS_PER_USER": str(args.runs + 5)}
    platform = Platform("services", extra_env=env, redis_url=redis.url(0), startup_timeout=120)
    clients: list[Client] = []
    disruptions: list[str] = []
    kill_times: list[float] = []
    try:
        platform.start()
        token = flows.login_token(platform, "alice")
        started = time.monotonic()
        deadline = started + args.timeout_s
        with flows.http(platform, token) as http:
            for i in range(args.runs):
                thread_id = flows.create_thread(platform, token, provider="openai")
                r = http.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": f"please write bench{i}"})
                assert r.status_code == 202, r.text
                client = Client(platform, token, thread_id, r.json()["run_id"], deadline)
                client.start()
                clients.append(client)
        order = []  # interleaved: redis, kill, redis, kill, …
        r_left, k_left = args.redis_restarts, args.worker_kills
        while r_left or k_left:
            if r_left:
                order.append("redis")
                r_left -= 1
            if k_left:
                order.append("kill")
                k_left -= 1
        for kind in order:
            time.sleep(args.gap_s)
            at = time.monotonic() - started
            if kind == "redis":
                redis.restart(down_s=args.redis_down_s)
            else:
                old = platform.procs["celery"]
                kill_times.append(time.monotonic())
                os.killpg(old.pid, signal.SIGKILL)
                old.wait(timeout=10)
                platform._start_worker()
            disruptions.append(f"{kind}@{at:.0f}s")
        for client in clients:
            client.join(timeout=max(0.1, deadline - time.monotonic()))
        elapsed = time.monotonic() - started

        runs = {}
        with flows.http(platform, token) as http:
            for client in clients:
                runs[client.run_id] = http.get(f"/api/v1/runs/{client.run_id}/").json()
    finally:
        platform.stop()
        redis.close()
        upstream.stop()

    ends = collections.Counter(run["status"] for run in runs.values())
    by_round = collections.defaultdict(list)
    for call in upstream.calls:
        by_round[(call["marker"], call["round"])].append(call)
    duplicate_calls = repeated_after_kill = 0
    for calls in by_round.values():
        for earlier, repeat in zip(calls, calls[1:], strict=False):
            # A repeat is the recovery of a killed worker's round when a kill happened
            # between the two calls (its answer died with it); otherwise a true duplicate.
            if any(earlier["at"] <= killed <= repeat["at"] for killed in kill_times):
                repeated_after_kill += 1
            else:
                duplicate_calls += 1
    repeats = {f"{m}/{r}": [f"{c['at'] - started:.0f}s:{c['outcome']}" for c in calls]
               for (m, r), calls in sorted(by_round.items()) if len(calls) > 1}
    writes = collections.Counter(line.split(" ", 1)[1] for line in ledger.read_text().splitlines() if " " in line)
    duplicate_effects = sum(n - 1 for n in writes.values() if n > 1)
    lost = duplicated = no_terminal = 0
    for client in clients:
        last = runs[client.run_id].get("last_event_seq") or (max(client.seqs) if client.seqs else 0)
        got = collections.Counter(client.seqs)
        duplicated += sum(n - 1 for n in got.values() if n > 1)
        lost += len(set(range(1, last + 1)) - set(got))
        no_terminal += client.terminal is None
    print(f"BENCH durability runs={args.runs} first_token_s={args.first_token_s:g} "
          f"redis_restarts={args.redis_restarts} worker_kills={args.worker_kills} ({', '.join(disruptions)})")
    print(f"BENCH runs_completed={ends.get('completed', 0)}/{args.runs} ends={dict(ends)} elapsed_s={elapsed:.0f}")
    print(f"BENCH upstream_calls={len(upstream.calls)} duplicate_upstream_calls={duplicate_calls} "
          f"repeated_after_worker_kill={repeated_after_kill}")
    if repeats:
        print(f"BENCH rounds asked more than once (outcome of each call): {repeats}")
    print(f"BENCH write_tool_executions={sum(writes.values())} duplicate_side_effects={duplicate_effects}")
    print(f"BENCH lost_events={lost} duplicated_events={duplicated} runs_without_terminal_event={no_terminal} "
          f"client_reconnects={sum(c.reconnects for c in clients)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
