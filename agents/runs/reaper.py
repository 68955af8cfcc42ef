"""The reaper: finds runs whose worker died (expired lease) and re-queues or fails them, and
expires approval requests nobody decided in time (the run goes on with a denied result).

A daemon thread of every Celery worker and every web process wakes every
``RUN_REAPER_PERIOD_S`` seconds; of all those that wake within one period, the first to
claim it in the shared cache does the pass (:func:`reaper_pass_claim`), so a deployment
queries for dead runs once a period, not once per process. Safe with many reapers all the
same (a cache error lets every one pass): each run is taken by one conditional UPDATE
(``lifecycle.run_requeue_expired``). A run re-queued ``RUN_MAX_ATTEMPTS`` times is failed
with a notice instead.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections
from django.db.models import Q
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
    """Re-queue (or fail) every queued run no worker claimed within ``RUN_QUEUED_DEADLINE_S``
    and every running run whose lease expired (found in one query, the queued ones first).
    Returns the run ids acted on."""
    acted = []
    now = timezone.now()
    stale = now - timedelta(seconds=settings.RUN_QUEUED_DEADLINE_S)
    due = Run.objects.filter(Q(status=Run.Status.QUEUED, queued_at__lt=stale)
                             | Q(status=Run.Status.RUNNING, lease_expires_at__lt=now))
    for run in due.only("pk", "status", "attempts", "queued_at", "lease_expires_at").order_by("status"):
        if run.status == Run.Status.QUEUED:
            if run.attempts >= settings.RUN_MAX_ATTEMPTS:
                if run_fail_not_started(run_id=run.pk, expected_queued_at=run.queued_at):
                    acted.append(str(run.pk))
                continue
            if lifecycle.run_requeue_stale(run_id=run.pk, expected_queued_at=run.queued_at):
                logger.warning("run %s: queued %s s without a worker; enqueued again", run.pk,
                               settings.RUN_QUEUED_DEADLINE_S)
                enqueue_run(run.pk)
                acted.append(str(run.pk))
            continue
        if run.attempts >= settings.RUN_MAX_ATTEMPTS:
            if run_fail_interrupted(run_id=run.pk, expected_lease=run.lease_expires_at):
                acted.append(str(run.pk))
            continue
        if lifecycle.run_requeue_expired(run_id=run.pk, expected_lease=run.lease_expires_at):
            logger.warning("run %s: worker lost (lease expired); re-queued (attempt %s)", run.pk, run.attempts + 1)
            enqueue_run(run.pk)
            acted.append(str(run.pk))
    return acted


def reaper_pass_claim(now: float | None = None) -> bool:
    """Whether this process does the reaper pass of the current period: the period is
    ``now`` (Unix seconds; default: the clock) // ``RUN_REAPER_PERIOD_S``, and the first
    process to add its key to the default cache (Redis in production: ``SET NX``, expiring
    after two periods, at least 1 s) takes it; the others skip it. A process alone always
    takes its passes (it wakes once per period). True when the cache fails: more reapers
    than needed are safe, none is not."""
    period = settings.RUN_REAPER_PERIOD_S
    now = time.time() if now is None else now
    try:
        return bool(cache.add(f"run-reaper:pass:{int(now // period)}", f"{os.getpid()}",
                              timeout=max(1, math.ceil(2 * period))))
    except Exception:  # noqa: BLE001 - the cache is down: reap anyway
        logger.debug("reaper: cache unavailable; passing without a claim", exc_info=True)
        return True


def _loop() -> None:
    while True:
        time.sleep(settings.RUN_REAPER_PERIOD_S)
        if not reaper_pass_claim():
            continue  # another process reaps this period
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
