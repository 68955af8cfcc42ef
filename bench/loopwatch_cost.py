"""CPU the event-loop stall watch (``chatplatform.loopwatch``) costs an idle process.

An idle loop is where the watch costs most: every beat wakes it from ``epoll`` and every look
wakes the watching thread. Runs a loop in a thread, watched as configured, for ``--seconds``
and prints the process's CPU per second of wall time for: no watch, the watch as it ships
(``EVENT_LOOP_STALL_S`` / 2 between beats), and a beat plus a look every 50 ms (the first
version). Usage: ``DJANGO_SETTINGS_MODULE=config.settings.test python bench/loopwatch_cost.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")


def cpu_per_s(seconds: float, interval_s: float | None, stall_s: float, every_50ms: bool) -> float:
    """ms of this process's CPU per s while one idle loop runs, watched with ``interval_s``
    (None: not watched)."""
    from chatplatform.loopwatch import LoopWatch

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    watch = None
    if interval_s is not None:
        watch = LoopWatch(loop, name="bench", stall_s=stall_s, interval_s=interval_s)
        if every_50ms:  # the first version: the thread looked every interval, stall or not
            watch._watch = lambda: _look_every_interval(watch)
        watch.start()
    time.sleep(1.0)
    start = time.process_time()
    time.sleep(seconds)
    used = time.process_time() - start
    if watch:
        watch.stop()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()
    return used / seconds * 1000


def _look_every_interval(watch) -> None:
    while not watch._stopped.wait(watch.interval_s):
        watch.late_s()


def main() -> None:
    import django

    django.setup()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--stall-s", type=float, default=0.25)
    args = parser.parse_args()
    runs = (("no watch", None, False),
            ("ships: a beat every stall/2, a look when due", args.stall_s / 2, False),
            ("first version: a beat and a look every 50 ms", 0.05, True))
    for label, interval, first_version in runs:
        figure = cpu_per_s(args.seconds, interval, args.stall_s, first_version)
        print(f"{label:46s} {figure:6.2f} ms CPU per s")


if __name__ == "__main__":
    main()
