"""What the production platform costs while nobody chats: CPU per second of each process.

Most of a team's day is idle, and a self-hosted platform shares its box with other things.
This bench starts the production layout on a private database (tests/e2e/harness.py: one
web process, ``python -m config.serve``; ``--workers`` Celery workers with the README's
flags; PostgreSQL and Redis as for the e2e tests — the harness's start-up request starts the
web process's reaper and loop watch, which wait for a first connection), lets everything
settle for ``--settle`` seconds and then reads each process tree's CPU time (user + system,
from /proc, 10 ms ticks) over ``--seconds``. The database and Redis servers are counted too: the reaper's queries and
claims cost them CPU as well (their whole process trees, so anything else using them on the
box is counted with it).

Prints ms of CPU per second for each process and in all; ``--repeat`` runs the window again
and prints every window (medians are the figures to quote).

Usage: ``.venv/bin/python bench/idle_cpu.py [--seconds 60] [--settle 15] [--workers 1] [--repeat 1]``
(needs PostgreSQL and Redis as for the e2e tests).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "side_by_side"))

from benchlib import pid_listening_on, tree_cpu_seconds  # noqa: E402  (bench/side_by_side/benchlib.py)

from tests.e2e.harness import PG_ADMIN_DSN, REDIS_BASE, Platform  # noqa: E402


def servers() -> dict[str, int]:
    """The PostgreSQL postmaster and the Redis server, found by their listening ports."""
    found = {}
    for name, url, default in (("postgres", PG_ADMIN_DSN, 5432), ("redis", REDIS_BASE, 6379)):
        pid = pid_listening_on(urlsplit(url).port or default)
        if pid:
            found[name] = pid
    return found


def window(roots: dict[str, int], seconds: float) -> dict[str, float]:
    """ms of CPU per second of each process tree in ``roots`` over ``seconds``."""
    start = {name: tree_cpu_seconds([pid]) for name, pid in roots.items()}
    began = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    return {name: 1000 * (tree_cpu_seconds([pid]) - start[name]) / elapsed for name, pid in roots.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of a measured window")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after start-up before measuring")
    parser.add_argument("--workers", type=int, default=1, help="Celery workers (8 turn threads each)")
    parser.add_argument("--repeat", type=int, default=1, help="windows to measure, one after another")
    args = parser.parse_args()

    with Platform("services", asgi_server="uvicorn", extra_env={"LOG_LEVEL": "WARNING"}) as platform:
        for _ in range(args.workers - 1):
            platform.add_worker(8)
        roots = {name.replace("daphne", "web"): proc.pid for name, proc in platform.procs.items()}
        roots.update(servers())
        time.sleep(args.settle)
        windows = []
        for n in range(args.repeat):
            figures = window(roots, args.seconds)
            figures["total"] = sum(figures.values())
            windows.append(figures)
            print(f"window {n + 1} ({args.seconds:.0f} s): "
                  + ", ".join(f"{name} {value:.2f}" for name, value in figures.items()) + " ms CPU/s", flush=True)
        if args.repeat > 1:
            print("median: " + ", ".join(f"{name} {statistics.median(w[name] for w in windows):.2f}"
                                         for name in windows[0]) + " ms CPU/s")


if __name__ == "__main__":
    main()
