"""The set-up gate: a process starts at most ``RUN_SETUP_CONCURRENCY`` turns at once, in order.

A turn's set-up — claim, membership, context, grounding, budget hold, up to the moment its
first model request (or remote agent run) is on its way — is CPU and database work, about
40 ms of a worker's CPU (``bench/run_cpu.py``). Fifty sends at the same instant used to run
fifty set-ups side by side: they shared the cores (and the GIL) evenly, so every run's first
token came at the end of all of them (2.5 s at 50 chats on two cores, ``bench/side_by_side``).
Through the gate they run a few at a time, first come first served: the first run streams
after its own set-up, the median run after half of them, and the streams already running wait
behind at most ``RUN_SETUP_CONCURRENCY`` busy threads instead of fifty. The total work is the
same; only its order changes.

The gate never holds a run forever: a turn that waited ``RUN_SETUP_WAIT_S`` goes ahead without
a slot (a backend that forgot to call :meth:`Turn.dispatched` would otherwise hold one for the
whole run), and a slot is given back when the turn ends however it ends.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from django.conf import settings

_lock = threading.Lock()
_gate: threading.BoundedSemaphore | None = None
_size = 0


def _semaphore() -> threading.BoundedSemaphore | None:
    """This process's semaphore, sized from settings (rebuilt when the setting changes, as
    tests do); None when the gate is off (``RUN_SETUP_CONCURRENCY`` ≤ 0)."""
    global _gate, _size
    size = settings.RUN_SETUP_CONCURRENCY
    with _lock:
        if size != _size:
            _gate, _size = (threading.BoundedSemaphore(size) if size > 0 else None), size
        return _gate


class SetupSlot:
    """One turn's place in the gate. :meth:`release` is idempotent: the backend calls it
    (through :meth:`Turn.dispatched`) once its first request is sent, the driver again at the
    end. ``held`` is False when the turn went ahead without a slot (the wait ran out, or
    the gate is off)."""

    def __init__(self, semaphore: threading.BoundedSemaphore | None, held: bool) -> None:
        self._semaphore = semaphore
        self._held = held
        self._release_lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._held

    def release(self) -> None:
        with self._release_lock:
            if self._held:
                self._held = False
                self._semaphore.release()


@contextmanager
def setup_slot():
    """``with setup_slot() as slot:`` — wait (first come, first served; at most
    ``RUN_SETUP_WAIT_S`` seconds) for one of the process's ``RUN_SETUP_CONCURRENCY`` set-up
    slots; the slot is released by ``slot.release()`` or on leaving the block."""
    semaphore = _semaphore()
    held = semaphore.acquire(timeout=settings.RUN_SETUP_WAIT_S) if semaphore is not None else False
    slot = SetupSlot(semaphore, held)
    try:
        yield slot
    finally:
        slot.release()
