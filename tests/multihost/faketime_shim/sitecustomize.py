"""Loaded (``PYTHONPATH``) only into the processes of a host whose clock the multi-host tests
set ahead with libfaketime (``FAKETIME=+3s``, ``FAKETIME_DONT_FAKE_MONOTONIC=1``: the wall
clock moves, the monotonic one does not). libfaketime 0.9.10 answers Python's
``time.sleep`` — ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` — with EINVAL in that
mode, and faking the monotonic clock instead makes timed waits (``threading.Event.wait``)
hang. Sleeping through ``select()`` (a relative timeout, which libfaketime leaves alone) is
the same sleep without the wrapper's bug; nothing else changes."""

import select
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
