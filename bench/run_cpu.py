"""CPU one run costs outside the token stream: the web side of a ``message.send`` and the
worker side of its turn, measured in one process against PostgreSQL and Redis.

At 50 chats started at once this set-up work is what the time to first token waits for
(bench/side_by_side): every run's queries, access checks and budget holds compete for the
same cores as the streams already running. This bench isolates it: a private database
(tests/e2e/harness.py, production settings), the fake upstream of ``side_by_side`` answering
5 tokens at once, and per run:

* ``web``: what the websocket consumer does for ``message.send`` — ``ws_actions.frame_act``:
  the access re-check and ``message_send`` (serializer, model and budget checks,
  ``run_create``) — with ``RUN_EXECUTOR=none`` (nothing enqueued);
* ``worker``: ``agents.runs.driver.run_turn`` — claim, context, grounding, budget hold,
  the model request (5 tokens), usage, the end — events published to Redis as in production;
  ``worker set-up`` is its part until the model request is opened (the SDK's ``post``): with
  the web's part, what a burst's time to first token waits for (the rest — metering, the
  end — comes when the answer has streamed).

Prints CPU ms per run (process time: every thread, the publisher loop's included) p50/mean
and the SQL statements (the heartbeat's own connection not counted) for both; the CPU the
PostgreSQL server spent meanwhile (its process tree, from /proc, mean per run: parse, plan,
execute, WAL — the third share of a run's set-up); and with ``--profile`` the functions of this
project by cumulative time.

Usage: ``.venv/bin/python bench/run_cpu.py [--runs 30] [--profile [--profile-out FILE]]``
(needs PostgreSQL and Redis as for the e2e tests). ``RUN_CPU_NO_BUDGETS=1`` deletes the demo's
budgets first: the difference is what usage metering costs a run (measured 2026-12-01 on
another box, the demo's two budgets, when a run took 42 worker and 23 web statements: 9 of the
worker's statements and about 6 of its 27 ms; 1 of the web's and about 2 of its 13 ms). With
``--profile``, metering's share of the worker's ``run_turn`` was 43 % on 2026-12-03 and 35 %
after 2026-12-04's change (``bench/side_by_side/results-2026-12-04-metering.md``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "side_by_side"))

from benchlib import pid_listening_on, tree_cpu_seconds  # noqa: E402  (bench/side_by_side/benchlib.py)
from run import BENCH_MODELS, start_upstream  # noqa: E402  (bench/side_by_side/run.py)

from tests.e2e.harness import PG_ADMIN_DSN, Platform  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--profile", action="store_true", help="print the top functions (cProfile)")
    parser.add_argument("--profile-out", metavar="FILE", help="with --profile: also write the pstats file "
                        "(python -m pstats FILE, or snakeviz) for callers, callees and library time")
    args = parser.parse_args()

    upstream, url = start_upstream(Path(tempfile.mkdtemp(prefix="run-cpu-")) / "upstream.jsonl")
    env = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": url, "OPENAI_MODEL": "bench-n5-r0",
           "MAX_ACTIVE_RUNS_PER_USER": "1000", "RUN_RATE_LIMIT": "100000/60", "LOG_LEVEL": "WARNING"}
    try:
        with Platform("services", extra_env=env) as platform:
            platform.manage("shell", "-c", BENCH_MODELS.format(models=["bench-n5-r0"]))
            if os.environ.get("RUN_CPU_NO_BUDGETS"):
                platform.manage("shell", "-c", "from usage.models import Budget; Budget.objects.all().delete()")
            os.environ.update({**platform.env, "RUN_EXECUTOR": "none"})
            measure(args)
    finally:
        upstream.terminate()
        upstream.wait(10)


def postgres_cpu_s() -> float | None:
    """CPU seconds (user + system, reaped backends included) of the PostgreSQL server's process
    tree: the postmaster found by its listening port (``E2E_PG_DSN``'s, 5432 by default), read
    from /proc by benchlib (None where the postmaster cannot be found)."""
    port = urlsplit(PG_ADMIN_DSN).port or 5432
    postmaster = pid_listening_on(port)
    return tree_cpu_seconds([postmaster]) if postmaster else None


def measure(args) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from agents.runs.driver import run_turn
    from chat import ws_actions
    from chat.models import Thread
    from chat.selectors import thread_get_for_user  # noqa: F401  (imported before timing)

    alice = get_user_model().objects.get(username="alice")
    token = Token.objects.get_or_create(user=alice)[0].key
    workspace = alice.memberships.first().workspace
    from agents.models import Provider

    provider = Provider.objects.get(slug="openai")

    from django.db import connection, connections
    from django.test.utils import CaptureQueriesContext

    queries: dict[str, list[int]] = {"web": [], "worker": [], "setup": []}
    opened: list[tuple[float, int]] = []  # (process time, statements so far) at the model request
    from llm.openai_compat import OpenAICompatAdapter

    open_request, aopen_request = OpenAICompatAdapter.open, OpenAICompatAdapter.aopen
    turn_connection = connections["default"]  # this thread's: the turn runs here

    def timed_open(self, body, request):
        opened.append((time.process_time(), len(turn_connection.queries)))
        return open_request(self, body, request)

    async def timed_aopen(self, body, request):  # the model read on the loop (PROVIDER_STREAM_ON_LOOP)
        opened.append((time.process_time(), len(turn_connection.queries)))
        return await aopen_request(self, body, request)

    OpenAICompatAdapter.open, OpenAICompatAdapter.aopen = timed_open, timed_aopen

    def one_run(i: int, profiler: cProfile.Profile | None) -> tuple[float, float, float]:
        thread = Thread.objects.create(workspace=workspace, owner=alice, title=f"cpu {i}",
                                       provider=provider, model="bench-n5-r0")
        user = get_user_model().objects.get(pk=alice.pk)  # as a socket's scope user is
        t0 = time.process_time()
        if profiler:
            profiler.enable()
        with CaptureQueriesContext(connection) as web_queries:
            assert ws_actions.frame_act(action=ws_actions.message_send, user=user, thread_id=str(thread.pk),
                                        frame={"content": f"Hello {i}"}, session_key=None, token=token) is not None
        if profiler:
            profiler.disable()
        t1 = time.process_time()
        run = thread.runs.get()
        if profiler:
            profiler.enable()
        opened.clear()
        with CaptureQueriesContext(connection) as worker_queries:  # the turn thread's connection
            start = len(connection.queries)
            run_turn(run_id=run.pk)
        if profiler:
            profiler.disable()
        t2 = time.process_time()
        if os.environ.get("RUN_CPU_SHOW_SQL") and i == 0:
            for label, captured in (("web", web_queries), ("worker", worker_queries)):
                for q in captured.captured_queries:
                    print(f"  {label} SQL: {q['sql'][:160]}")
        queries["web"].append(len(web_queries))
        queries["worker"].append(len(worker_queries))
        queries["setup"].append(opened[0][1] - start)
        run.refresh_from_db()
        if run.status != "completed":
            raise SystemExit(f"run {run.pk} ended {run.status}: {run.error}")
        return (t1 - t0) * 1000, (t2 - t1) * 1000, (opened[0][0] - t1) * 1000

    for i in range(3):  # warm-up: imports, connections, SDK client
        one_run(-i - 1, None)
    profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not wall time
    pg_before = postgres_cpu_s()
    web, worker, setup = zip(*(one_run(i, profiler) for i in range(args.runs)), strict=True)
    pg_after = postgres_cpu_s()
    print(f"{args.runs} runs, CPU ms per run (process time; 5-token answers; load average "
          f"{os.getloadavg()[0]:.2f}):")
    for label, cpu, key in (("web    (access re-check + message.send)", web, "web"), ("worker (run_turn)", worker, "worker"),
                            ("  of which set-up (until the model request)", setup, "setup")):
        print(f"  {label:40s} p50 {statistics.median(cpu):6.1f}  mean {statistics.mean(cpu):6.1f}   "
              f"SQL statements {statistics.median(queries[key]):.0f}")
    if pg_before is not None:
        print(f"  {'PostgreSQL (server process tree)':40s} mean {(pg_after - pg_before) * 1000 / args.runs:6.1f}"
              f"   (/proc, {os.sysconf('SC_CLK_TCK')} ticks/s)")
    if profiler:
        stats = pstats.Stats(profiler)
        if args.profile_out:
            stats.dump_stats(args.profile_out)
        stats.sort_stats("cumulative")
        rows = [(key, value) for key, value in stats.stats.items() if str(REPO) in key[0]
                and "/.venv/" not in key[0]]
        rows.sort(key=lambda kv: -kv[1][3])
        print("\n  cumulative CPU ms per run (with profiling overhead), this project's functions:")
        for (path, line, name), (_cc, calls, _tt, ct, _callers) in rows[:40]:
            print(f"  {ct * 1000 / args.runs:7.2f}  {calls / args.runs:5.1f}×  {Path(path).relative_to(REPO)}:{line} {name}")


if __name__ == "__main__":
    main()
