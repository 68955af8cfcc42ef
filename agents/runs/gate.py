"""The set-up gate: a process starts at most ``RUN_SETUP_CONCURRENCY`` turns at once, in order.

A turn's set-up — claim, membership, context, grounding, budget hold, up to the moment its
first model request (or remote agent run) is on its way — is CPU and database work, about
40 ms of a worker's CPU (``bench/run_cpu.py``). Fifty sends at the same instant used to run
fifty set-ups side by side: they shared the cores (and the GIL) evenly, so every run's first
token came at the end of all of them (2.5 s at 50 chats on two cores, ``bench/side_by_side``).
Through the gate they run a few at a time, strictly first come first served: the first run
streams after its own set-up, the median run after half of them, and the streams already
running wait behind at most ``RUN_SETUP_CONCURRENCY`` busy threads instead of fifty. The total
work is the same; only its order changes.

The gate never blocks the queue forever: a slot held for ``RUN_SETUP_WAIT_S`` (a set-up stuck
on a slow database, or a backend that never calls :meth:`Turn.dispatched`) stops counting, and
the next turn in line takes its place. The bound is on how long one holder can keep the others
waiting, not on each waiter: with per-waiter timeouts, a queue longer than the timeout would
go ahead all at once when the timeouts ran out — every set-up at once on one GIL, what the
gate exists to prevent. A slot is given back when the turn ends however it ends.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager

from django.conf import settings


class FifoGate:
    """``size`` slots handed out strictly first come, first served; a slot held for more than
    ``hold_s`` seconds stops counting.

    A released slot passes straight to the longest waiter; a thread that arrives meanwhile
    queues behind it. (``threading.Semaphore`` only wakes a waiter: a newcomer that calls
    ``acquire`` before the woken thread runs again takes the slot first. With thirty turn
    threads on one GIL that is the usual case, and a burst's first runs were set up last.)
    :meth:`acquire` returns a token for :meth:`release`; releasing an expired or unknown
    token changes nothing."""

    def __init__(self, size: int, hold_s: float) -> None:
        self.size = size
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._holders: dict[object, float] = {}  # token -> time.monotonic() deadline
        self._waiters: deque[tuple[object, threading.Lock]] = deque()  # lock held until handed a slot

    @property
    def waiting(self) -> int:
        """How many threads wait for a slot now."""
        return len(self._waiters)

    @property
    def holding(self) -> int:
        """How many slots count as held now (expired ones are dropped on the next look)."""
        return len(self._holders)

    def acquire(self) -> object:
        """Wait (behind every thread that came first) for a slot; returns its token. Never
        fails: the wait ends when the turns ahead give their slots back or held them longer
        than ``hold_s``."""
        token = object()
        with self._lock:
            self._expire()
            if len(self._holders) < self.size and not self._waiters:
                self._holders[token] = time.monotonic() + self.hold_s
                return token
            handed = threading.Lock()
            handed.acquire()
            self._waiters.append((token, handed))
            wait = self._until_next_expiry()
        while not handed.acquire(timeout=wait):
            with self._lock:
                self._expire()  # may hand this thread (or one ahead of it) a slot
                wait = self._until_next_expiry()
        return token

    def release(self, token: object) -> None:
        """Give the slot of ``token`` back: to the longest waiter if any."""
        with self._lock:
            if self._holders.pop(token, None) is not None:
                self._hand_over()

    def _expire(self) -> None:
        now = time.monotonic()
        for token in [t for t, deadline in self._holders.items() if deadline <= now]:
            del self._holders[token]  # held too long: it stops counting; its release is a no-op
        self._hand_over()

    def _hand_over(self) -> None:
        while self._waiters and len(self._holders) < self.size:
            token, handed = self._waiters.popleft()
            self._holders[token] = time.monotonic() + self.hold_s
            handed.release()

    def _until_next_expiry(self) -> float:
        # A thread only waits while every slot is held (_hand_over fills free ones first).
        return max(min(self._holders.values()) - time.monotonic(), 0.001)


_lock = threading.Lock()
_gate: FifoGate | None = None
_config: tuple[int, float] = (0, 0.0)


def process_gate() -> FifoGate | None:
    """This process's gate, sized from settings (rebuilt when the settings change, as tests
    do); None when the gate is off (``RUN_SETUP_CONCURRENCY`` ≤ 0)."""
    global _gate, _config
    config = (settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S)
    with _lock:
        if config != _config:
            _gate, _config = (FifoGate(*config) if config[0] > 0 else None), config
        return _gate


class SetupSlot:
    """One turn's place in the gate. :meth:`release` is idempotent: the backend calls it
    (through :meth:`Turn.dispatched`) once its first request is sent, the driver again at the
    end. ``held`` is False once released, and when the gate is off."""

    def __init__(self, gate: FifoGate | None, token: object | None) -> None:
        self._gate = gate
        self._token = token

    @property
    def held(self) -> bool:
        return self._token is not None

    def release(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            self._gate.release(token)  # idempotent per token, so a racing second call is harmless


@contextmanager
def setup_slot():
    """``with setup_slot() as slot:`` — wait (first come, first served) for one of the
    process's ``RUN_SETUP_CONCURRENCY`` set-up slots; the slot is released by
    ``slot.release()`` or on leaving the block, and stops counting after
    ``RUN_SETUP_WAIT_S`` seconds."""
    gate = process_gate()
    slot = SetupSlot(gate, gate.acquire() if gate is not None else None)
    try:
        yield slot
    finally:
        slot.release()
