"""What one lease heartbeat costs a process: ``agents.runs.lease._Heartbeat._beat`` for N
streaming runs, against PostgreSQL (a private database, production settings, as
``bench/run_cpu.py``).

Every ``RUN_HEARTBEAT_S`` / ``STREAM_PERSIST_INTERVAL_S`` (1 s) the heartbeat thread renews
every lease of the process and saves each streaming message's text so far. Its Python runs
beside the process's streams: while it holds the GIL, the event loop that reads the model's
tokens and writes them to the sockets waits (the loop can take the GIL back only every
``sys.getswitchinterval()``, 5 ms). Measured 2026-12-04 at 50 chats in one process: the loop
fell 10–30 ms behind once a second, at each beat.

Per beat, with every message's text grown by one token since the last: CPU ms of the calling
thread (the heartbeat's Python, the driver's included) and wall ms (with the database's round
trips), p50 and max over ``--beats``, and the statements sent.

Usage: ``.venv/bin/python bench/heartbeat.py [--runs 50] [--beats 30]`` (needs PostgreSQL as for
the e2e tests).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.harness import Platform  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--beats", type=int, default=30)
    args = parser.parse_args()
    env = {"MAX_ACTIVE_RUNS_PER_USER": "100000", "RUN_RATE_LIMIT": "100000/60", "LOG_LEVEL": "WARNING"}
    with Platform("services", extra_env=env) as platform:
        os.environ.update({**platform.env, "RUN_EXECUTOR": "none"})
        measure(args)


def measure(args) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from agents.runs import lifecycle
    from agents.runs.lease import RunLease, _alias, _Heartbeat
    from agents.services import run_create
    from chat.models import Message, Thread
    from chat.services import message_create

    alice = get_user_model().objects.get(username="alice")
    workspace = alice.memberships.first().workspace
    leases, texts = [], []
    for i in range(args.runs):
        thread = Thread.objects.create(workspace=workspace, owner=alice, title=f"beat {i}")
        run = run_create(thread=thread, user=alice, content=f"question {i}").run
        owner = f"bench:{i}"
        assert lifecycle.run_claim(run_id=run.pk, owner=owner)
        message = message_create(thread_id=thread.pk, run=run, role=Message.Role.ASSISTANT,
                                 status=Message.Status.STREAMING)
        text = ["t00000 " * 400]  # about 20 s of a 50 tokens/s answer
        lease = RunLease(run_id=run.pk, owner=owner)
        lease.persist_stream(message.pk, lambda text=text: {"content": "".join(text)})
        leases.append(lease)
        texts.append(text)

    cpu_ms, wall_ms, statements = [], [], []
    for beat in range(args.beats):
        for text in texts:
            text.append(f"t{beat:05d} ")
        with CaptureQueriesContext(connections[_alias()]) as queries:
            c0, w0 = time.thread_time(), time.perf_counter()
            _Heartbeat._beat(leases)
            cpu_ms.append((time.thread_time() - c0) * 1e3)
            wall_ms.append((time.perf_counter() - w0) * 1e3)
        statements.append(len(queries))
    assert not any(lease.lost for lease in leases), "a lease was lost: the figures would not be a beat's"
    print(f"heartbeat of {args.runs} streaming runs, {args.beats} beats (PostgreSQL):")
    print(f"  CPU ms per beat:  p50 {statistics.median(cpu_ms):.2f}  max {max(cpu_ms):.2f}")
    print(f"  wall ms per beat: p50 {statistics.median(wall_ms):.2f}  max {max(wall_ms):.2f}")
    print(f"  statements per beat: {statistics.median(statements):g} (an executemany counts once)")
    print(f"load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
