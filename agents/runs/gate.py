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
from collections import deque
from contextlib import contextmanager

from django.conf import settings


class FifoGate:
    """``size`` slots handed out strictly first come, first served.

    A released slot passes straight to the longest waiter; a thread that arrives meanwhile
    queues behind it. (``threading.Semaphore`` only wakes a waiter: a newcomer that calls
    ``acquire`` before the woken thread runs again takes the slot first. With thirty turn
    threads on one GIL that is the usual case, and a burst's first runs were set up last.)
    Over-release raises ``ValueError``, as ``threading.BoundedSemaphore`` does."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._free = size
        self._waiters: deque[threading.Lock] = deque()  # each held until its slot is handed over

    @property
    def waiting(self) -> int:
        """How many threads wait for a slot now."""
        return len(self._waiters)

    def acquire(self, timeout: float) -> bool:
        """Take a slot, waiting at most ``timeout`` seconds behind the threads that came
        first (0: only if one is free and nobody waits). True when a slot is held."""
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(timeout=max(timeout, 0)):
            return True  # release() handed this thread its slot
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                return False
        return True  # the slot was handed over between the timeout and the lock: it is ours

    def release(self) -> None:
        """Give a slot back: to the longest waiter if any, else to the free count."""
        with self._lock:
            if self._waiters:
                self._waiters.popleft().release()
            elif self._free >= self.size:
                raise ValueError("FifoGate released more often than acquired")
            else:
                self._free += 1


_lock = threading.Lock()
_gate: FifoGate | None = None
_size = 0


def process_gate() -> FifoGate | None:
    """This process's gate, sized from settings (rebuilt when the setting changes, as
    tests do); None when the gate is off (``RUN_SETUP_CONCURRENCY`` ≤ 0)."""
    global _gate, _size
    size = settings.RUN_SETUP_CONCURRENCY
    with _lock:
        if size != _size:
            _gate, _size = (FifoGate(size) if size > 0 else None), size
        return _gate


class SetupSlot:
    """One turn's place in the gate. :meth:`release` is idempotent: the backend calls it
    (through :meth:`Turn.dispatched`) once its first request is sent, the driver again at the
    end. ``held`` is False when the turn went ahead without a slot (the wait ran out, or
    the gate is off)."""

    def __init__(self, gate: FifoGate | None, held: bool) -> None:
        self._gate = gate
        self._held = held
        self._release_lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._held

    def release(self) -> None:
        with self._release_lock:
            if self._held:
                self._held = False
                self._gate.release()


@contextmanager
def setup_slot():
    """``with setup_slot() as slot:`` — wait (first come, first served; at most
    ``RUN_SETUP_WAIT_S`` seconds) for one of the process's ``RUN_SETUP_CONCURRENCY`` set-up
    slots; the slot is released by ``slot.release()`` or on leaving the block."""
    gate = process_gate()
    held = gate.acquire(timeout=settings.RUN_SETUP_WAIT_S) if gate is not None else False
    slot = SetupSlot(gate, held)
    try:
        yield slot
    finally:
        slot.release()
