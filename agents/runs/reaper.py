"""The reaper: finds runs whose worker died (expired lease) and re-queues or fails them, and
expires approval requests nobody decided in time (the run goes on with a denied result).

Runs every ``RUN_REAPER_PERIOD_S`` seconds in a daemon thread of each Celery worker and of
the embedded web process. Safe with many reapers: each run is taken by one conditional
UPDATE (``lifecycle.run_requeue_expired``). A run re-queued ``RUN_MAX_ATTEMPTS`` times is
failed with a notice instead.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from agents.models import Run

from . import lifecycle
from .driver import run_fail_interrupted, run_fail_not_started
from .executors import enqueue_run


def approvals_expire_due() -> list[str]:
    """Expire approval requests past their ``expires_at`` (``agents.approvals.services``)."""
    from agents.approvals.services import approvals_expire_due as expire

    return expire()

logger = logging.getLogger(__name__)

_started = False
_lock = threading.Lock()


def reap_expired_runs() -> list[str]:
    """Re-queue (or fail) every running run whose lease expired, and every queued run no
    worker claimed within ``RUN_QUEUED_DEADLINE_S``. Returns the run ids acted on."""
    acted = []
    now = timezone.now()
    stale = now - timedelta(seconds=settings.RUN_QUEUED_DEADLINE_S)
    for run in Run.objects.filter(status=Run.Status.QUEUED, queued_at__lt=stale).only("pk", "attempts", "queued_at"):
        if run.attempts >= settings.RUN_MAX_ATTEMPTS:
            if run_fail_not_started(run_id=run.pk, expected_queued_at=run.queued_at):
                acted.append(str(run.pk))
            continue
        if lifecycle.run_requeue_stale(run_id=run.pk, expected_queued_at=run.queued_at):
            logger.warning("run %s: queued %s s without a worker; enqueued again", run.pk,
                           settings.RUN_QUEUED_DEADLINE_S)
            enqueue_run(run.pk)
            acted.append(str(run.pk))
    for run in Run.objects.filter(status=Run.Status.RUNNING, lease_expires_at__lt=now).only(
        "pk", "attempts", "lease_expires_at"
    ):
        if run.attempts >= settings.RUN_MAX_ATTEMPTS:
            if run_fail_interrupted(run_id=run.pk, expected_lease=run.lease_expires_at):
                acted.append(str(run.pk))
            continue
        if lifecycle.run_requeue_expired(run_id=run.pk, expected_lease=run.lease_expires_at):
            logger.warning("run %s: worker lost (lease expired); re-queued (attempt %s)", run.pk, run.attempts + 1)
            enqueue_run(run.pk)
            acted.append(str(run.pk))
    return acted


def _loop() -> None:
    while True:
        time.sleep(settings.RUN_REAPER_PERIOD_S)
        try:
            close_old_connections()
            reap_expired_runs()
            approvals_expire_due()
        except Exception:
            logger.exception("reaper pass failed")
        finally:
            close_old_connections()


def start_reaper(**_signal_kwargs) -> None:
    """Start the process's reaper thread once (idempotent). Also a Celery ``worker_ready``
    receiver (connected in ``AgentsConfig.ready``)."""
    global _started
    if not settings.RUN_REAPER_ENABLED:
        return
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_loop, name="run-reaper", daemon=True).start()
