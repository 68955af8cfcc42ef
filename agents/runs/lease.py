"""Run leases: which worker owns a running turn, renewed by a heartbeat.

A worker claims a run (``lifecycle.run_claim``) and renews its lease every
``RUN_HEARTBEAT_S`` while it works. A worker that dies stops renewing; the reaper
(``agents.runs.reaper``) sees the expired lease within ``RUN_LEASE_S`` + ``RUN_REAPER_PERIOD_S``
seconds and re-queues the run, at most ``RUN_MAX_ATTEMPTS`` times (``Run.attempts`` counts
these recoveries). The heartbeat also reads the cancel flag, so a cancelled run stops within a
second.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from django.conf import settings

from agents.models import Run

from . import lifecycle


class LeaseLost(Exception):
    """Another worker took the run over (our lease had expired): stop without writing."""


def worker_identity() -> str:
    """``host:pid:thread`` — unique per worker thread, readable in the admin."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class RunLease:
    """The running worker's side: ``tick()`` renews the lease when due and reports a cancel."""

    def __init__(self, *, run_id, owner: str, seq_source: Callable[[], int] | None = None) -> None:
        self.run_id = run_id
        self.owner = owner
        self.seq_source = seq_source  # () -> int: the emitter's seq, saved with each renewal
        self._last = time.monotonic()
        self._cancelled = False
        self.interval = min(settings.RUN_HEARTBEAT_S, settings.STREAM_PERSIST_INTERVAL_S)

    def tick(self) -> bool:
        """Renew if due (at most every ``interval`` seconds); True when the run was cancelled.
        Raises :class:`LeaseLost` if another worker took the run over."""
        if self._cancelled:
            return True
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        seq = self.seq_source() if self.seq_source is not None else None
        if lifecycle.run_lease_renew(run_id=self.run_id, owner=self.owner, seq=seq):
            return False
        row = Run.objects.filter(pk=self.run_id).values("status", "lease_owner").first()
        if row is None or row["status"] == Run.Status.CANCELLED:
            self._cancelled = True
            return True
        if row["lease_owner"] != self.owner:
            raise LeaseLost(f"run {self.run_id} is now owned by {row['lease_owner']}")
        return False

    def release(self) -> None:
        lifecycle.run_release(run_id=self.run_id, owner=self.owner)
