"""Run leases: which worker owns a running turn, renewed by a heartbeat.

A worker claims a run with one conditional UPDATE (queued, or running with an expired lease)
and renews the lease every ``RUN_HEARTBEAT_S`` while it works. A worker that dies stops
renewing; the reaper (``agents.reaper``) sees the expired lease within ``RUN_LEASE_S`` +
``RUN_REAPER_PERIOD_S`` seconds and re-queues the run, at most ``RUN_MAX_ATTEMPTS`` times
(``Run.attempts`` counts these recoveries).
The heartbeat also reads the cancel flag, so a cancelled run stops within a second.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import Run


class LeaseLost(Exception):
    """Another worker took the run over (our lease had expired): stop without writing."""


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def run_claim(*, run_id, owner: str) -> bool:
    """Take run ``run_id`` for ``owner``: queued, or running with an expired (or no) lease.
    Returns False when another worker holds it or it is not runnable. (Recoveries are
    counted by the reaper in ``Run.attempts``; a re-queue after an approval is not one.)"""
    now = timezone.now()
    return bool(
        Run.objects.filter(pk=run_id)
        .filter(
            Q(status=Run.Status.QUEUED)
            | Q(status=Run.Status.RUNNING, lease_expires_at__lt=now)
            | Q(status=Run.Status.RUNNING, lease_expires_at__isnull=True)
        )
        .update(
            status=Run.Status.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=settings.RUN_LEASE_S),
            started_at=Coalesce(F("started_at"), now),
        )
    )


class RunLease:
    """The running worker's side: ``tick()`` renews the lease when due and reports a cancel."""

    def __init__(self, *, run_id, owner: str, seq_source=None) -> None:
        self.run_id = run_id
        self.owner = owner
        self.seq_source = seq_source  # () -> int: the emitter's seq, saved with each renewal
        self._last = time.monotonic()
        self._cancelled = False
        self.interval = min(settings.RUN_HEARTBEAT_S, settings.STREAM_PERSIST_INTERVAL_S)

    def tick(self) -> bool:
        """Renew if due; True when the run was cancelled. Raises LeaseLost if taken over."""
        if self._cancelled:
            return True
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        fields = {"lease_expires_at": timezone.now() + timedelta(seconds=settings.RUN_LEASE_S)}
        if self.seq_source is not None:
            fields["last_event_seq"] = self.seq_source()
        renewed = Run.objects.filter(pk=self.run_id, status=Run.Status.RUNNING, lease_owner=self.owner).update(**fields)
        if renewed:
            return False
        row = Run.objects.filter(pk=self.run_id).values("status", "lease_owner").first()
        if row is None or row["status"] == Run.Status.CANCELLED:
            self._cancelled = True
            return True
        if row["lease_owner"] != self.owner:
            raise LeaseLost(f"run {self.run_id} is now owned by {row['lease_owner']}")
        return False

    def release(self) -> None:
        Run.objects.filter(pk=self.run_id, lease_owner=self.owner).update(lease_owner="", lease_expires_at=None)
