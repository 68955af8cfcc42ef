"""The reaper: finds runs whose worker died (expired lease) and re-queues or fails them —
or closes them, when they were cancelled before their worker could — and expires approval
requests nobody decided in time (the run goes on with a denied result) — and deletes the
temporary chats whose time to live has passed (``agents.temporary_chats``).

A daemon thread of every Celery worker and every web process. A pass (:func:`reaper_pass`)
acts on what is due and learns the earliest deadline still ahead — a running run's lease
expiry, a queued run's ``queued_at + RUN_QUEUED_DEADLINE_S``, a parked call's ``expires_at``
— and the next pass is due then (:func:`reaper_next_due`): at least ``RUN_REAPER_PERIOD_S``
after this one and at most ``RUN_LEASE_S`` (a run claimed after a pass has a lease at least
that long, so it is seen before it can expire). Leases are renewed every second, so with
runs streaming a deployment passes about once per ``RUN_LEASE_S`` rather than every period
— and idle, once per ``RUN_LEASE_S`` in all.

Processes share the schedule through the default cache (Redis in production): the passing
process stores the next due time (``run-reaper:next``); the others sleep until a period after
it, as a stand-in should the passing process die (a killed worker takes its reaper with
it), so a dead worker's run is re-queued within ``RUN_LEASE_S`` + ``RUN_REAPER_PERIOD_S`` of
its last renewal. Two processes due at once claim the period in the cache
(:func:`reaper_pass_claim`); the first passes. Safe with many reapers all the same (a cache
error lets every one pass): each run is taken by one conditional UPDATE
(``lifecycle.run_requeue_expired``). A run re-queued ``RUN_MAX_ATTEMPTS`` times is failed
with a notice instead.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import OperationalError, close_old_connections, connection
from django.db.models import Min, Q

from agents.approvals.expiry import approvals_earliest_expiry as earliest_expiry
from agents.approvals.expiry import approvals_expire_due as expire_due
from agents.models import Run
from agents.temporary_chats import temporary_chats_delete_expired, temporary_chats_earliest_expiry
from chatplatform.db import db_now, error_line
from chatplatform.dbconn import is_database_unavailable

from . import executors, lifecycle
from .driver import run_close_abandoned_cancel, run_fail_interrupted, run_fail_not_started
from .executors import enqueue_run
from .lease import unrenewed_key


def approvals_expire_due() -> list[str]:
    """Expire approval requests past their ``expires_at`` (``agents.approvals.expiry``); each
    run that goes on is re-queued ahead of new sends."""
    return expire_due(requeue=lambda run_id: executors.enqueue_run(run_id, requeued=True))


def approvals_earliest_expiry() -> datetime | None:
    """The earliest ``expires_at`` of a parked call (``agents.approvals.expiry``)."""
    return earliest_expiry()


logger = logging.getLogger(__name__)

_started = False
_lock = threading.Lock()


def _abandoned_cancels():
    """Runs cancelled while running that no worker closed: ``finished_at`` empty and a lease
    (``lease_expires_at``) — expired ones are the reaper's. Served by the partial index
    ``run_cancel_unclosed`` (only such rows: a live worker closes its cancel at once)."""
    return Run.objects.filter(status=Run.Status.CANCELLED, finished_at__isnull=True, lease_expires_at__isnull=False)


def reap_expired_runs() -> list[str]:
    """Re-queue (or fail) every queued run no worker claimed within ``RUN_QUEUED_DEADLINE_S``
    and every running run whose lease expired (found in one query, the queued ones first);
    close every run cancelled while running whose worker died before closing it
    (``driver.run_close_abandoned_cancel``). A run whose worker said it is alive but could not
    renew (:func:`_held_by_live_workers`) is left to it. Returns the run ids acted on."""
    acted = []
    now = db_now()  # the leases' clock (lifecycle._lease_deadline), not this host's
    abandoned = list(_abandoned_cancels().filter(lease_expires_at__lt=now).values_list("pk", "lease_expires_at"))
    alive = _held_by_live_workers([run_id for run_id, _lease in abandoned])
    for run_id, lease in abandoned:
        if str(run_id) in alive:  # its worker closes it once the database answers it again
            continue
        if run_close_abandoned_cancel(run_id=run_id, expected_lease=lease):
            acted.append(str(run_id))
    stale = now - timedelta(seconds=settings.RUN_QUEUED_DEADLINE_S)
    due = list(Run.objects.filter(Q(status=Run.Status.QUEUED, queued_at__lt=stale)
                                  | Q(status=Run.Status.RUNNING, lease_expires_at__lt=now))
               .only("pk", "status", "attempts", "queued_at", "created_at", "lease_expires_at")
               .order_by("status", "created_at"))
    stale_queued = [run.pk for run in due if run.status == Run.Status.QUEUED]
    in_executor = _waiting_turns(stale_queued)
    busy = bool(in_executor) and _workers_busy(now)
    held = _held_by_live_workers([run.pk for run in due if run.status == Run.Status.RUNNING])
    for run in due:
        if str(run.pk) in held:  # its worker is alive, waiting for the database: it renews next
            logger.info("run %s: lease expired, but its worker (%s) is alive and could not renew; left to it",
                        run.pk, held[str(run.pk)])
            continue
        if run.status == Run.Status.QUEUED and busy and str(run.pk) in in_executor:
            # Every worker is busy and the broker still holds its turn: not lost, waiting.
            if now - run.created_at > timedelta(seconds=settings.RUN_QUEUE_MAX_WAIT_S):
                if run_fail_not_started(run_id=run.pk, expected_queued_at=run.queued_at, busy=True):
                    acted.append(str(run.pk))
            else:
                lifecycle.run_requeue_stale(run_id=run.pk, expected_queued_at=run.queued_at, count=False)
            continue
        if run.status == Run.Status.QUEUED:
            if run.attempts >= settings.RUN_MAX_ATTEMPTS:
                if run_fail_not_started(run_id=run.pk, expected_queued_at=run.queued_at):
                    acted.append(str(run.pk))
                continue
            if lifecycle.run_requeue_stale(run_id=run.pk, expected_queued_at=run.queued_at):
                if str(run.pk) in in_executor:  # no worker is working at all: counted, not sent twice
                    logger.warning("run %s: queued %s s and no worker is working; still in the queue",
                                   run.pk, settings.RUN_QUEUED_DEADLINE_S)
                else:
                    logger.warning("run %s: queued %s s without a worker; enqueued again", run.pk,
                                   settings.RUN_QUEUED_DEADLINE_S)
                    enqueue_run(run.pk, requeued=True)
                acted.append(str(run.pk))
            continue
        if run.attempts >= settings.RUN_MAX_ATTEMPTS:
            if run_fail_interrupted(run_id=run.pk, expected_lease=run.lease_expires_at):
                acted.append(str(run.pk))
            continue
        if lifecycle.run_requeue_expired(run_id=run.pk, expected_lease=run.lease_expires_at):
            logger.warning("run %s: worker lost (lease expired); re-queued (attempt %s)", run.pk, run.attempts + 1)
            enqueue_run(run.pk, requeued=True)
            acted.append(str(run.pk))
    return acted


def _held_by_live_workers(run_ids: list) -> dict[str, str]:
    """Of the running ``run_ids`` whose lease expired, those whose worker said within the last
    ``RUN_LEASE_S`` that it is alive but could not renew (``lease.report_unrenewed``: its
    beats found no database): ``{run id: worker}``. The reaper leaves them to it — after a
    PostgreSQL outage the worker's next beat renews the lease and the answer goes on, instead of
    the run being handed on and the model asked again. One cache read, only for expired leases;
    a cache error reads as none (the runs are then handed on, as a dead worker's)."""
    if not run_ids:
        return {}
    try:
        found = cache.get_many([unrenewed_key(run_id) for run_id in run_ids])
    except Exception:  # noqa: BLE001 - the cache is down: treat the workers as dead
        logger.debug("reaper: cache unavailable; expired leases are handed on", exc_info=True)
        return {}
    return {str(run_id): found[unrenewed_key(run_id)] for run_id in run_ids if unrenewed_key(run_id) in found}


def _waiting_turns(run_ids: list) -> set[str]:
    """Of the queued ``run_ids`` past ``RUN_QUEUED_DEADLINE_S``, those whose turn the executor
    still holds (``executors.waiting_turns``: its message is in the broker). The others lost it
    (a Redis restart) and are enqueued again. Unknown (the broker unreachable): none."""
    if not run_ids:
        return set()
    return executors.waiting_turns(run_ids) or set()


def _workers_busy(now) -> bool:
    """Whether a worker is working: at least one holds a live lease. Then a run whose turn
    waits in the broker waits for a free thread, and is failed only after
    ``RUN_QUEUE_MAX_WAIT_S`` (a healthy but busy worker pool used to fail its waiting runs after
    about two minutes). With no worker working at all its message stays in the broker too, but
    nobody will take it: the run is counted each deadline, not sent again, and fails as never
    started after ``RUN_MAX_ATTEMPTS``."""
    return Run.objects.filter(status=Run.Status.RUNNING, lease_expires_at__gt=now).exists()


NEXT_KEY = "run-reaper:next"  # the default cache's key for the deployment's next pass (Unix s)
SLACK_S = 0.05  # a pass due at a deadline wakes this much after it, so the deadline has passed


def run_earliest_deadline() -> datetime | None:
    """The earliest moment a queued or running run becomes the reaper's: the earliest running
    lease expiry or queued ``queued_at + RUN_QUEUED_DEADLINE_S``, or an unclosed cancel's
    lease expiry (None: no such run). Two aggregate queries, served by partial indexes (the
    unique index of active runs, one per thread; ``run_cancel_unclosed``) however many runs
    have finished."""
    earliest = Run.objects.filter(status__in=[Run.Status.QUEUED, Run.Status.RUNNING]).aggregate(
        lease=Min("lease_expires_at", filter=Q(status=Run.Status.RUNNING)),
        queued=Min("queued_at", filter=Q(status=Run.Status.QUEUED)))
    deadlines = [earliest["lease"], _abandoned_cancels().aggregate(lease=Min("lease_expires_at"))["lease"]]
    if earliest["queued"] is not None:
        deadlines.append(earliest["queued"] + timedelta(seconds=settings.RUN_QUEUED_DEADLINE_S))
    return min((d for d in deadlines if d is not None), default=None)


def reaper_pass() -> float:
    """One pass: re-queue or fail the runs that are due (:func:`reap_expired_runs`), expire
    the parked calls that are due (:func:`approvals_expire_due`) and delete the temporary chats
    whose time to live has passed (``agents.temporary_chats``) — each only when its earliest
    deadline has come, so a pass with nothing due is three aggregate queries. Returns when the
    next pass is due (Unix seconds, :func:`reaper_next_due`); after acting, a period on (the
    rest of the deadlines are read again then)."""
    now = db_now()  # deadlines are the database's times: compare with its clock, not this host's
    earliest = []
    for deadline, act in ((run_earliest_deadline(), reap_expired_runs),
                          (approvals_earliest_expiry(), approvals_expire_due),
                          (temporary_chats_earliest_expiry(), temporary_chats_delete_expired)):
        if deadline is not None and deadline <= now:
            act()
            deadline = now
        earliest.append(deadline)
    first = min((d for d in earliest if d is not None), default=None)
    due = reaper_next_due(None if first is None else first.timestamp(), now.timestamp())
    # The caller sleeps on this host's clock: when it is off the database's by a second or
    # more, the same delay from now on it (below that, a pass a little early or late is harmless).
    skew = now.timestamp() - time.time()
    return due - skew if abs(skew) >= 1.0 else due


def reaper_next_due(earliest: float | None, now: float) -> float:
    """When the pass after one at ``now`` is due (Unix seconds): at the ``earliest`` deadline
    it saw (+ ``SLACK_S``), but at least ``RUN_REAPER_PERIOD_S`` and at most
    ``min(RUN_LEASE_S, RUN_QUEUED_DEADLINE_S)`` after ``now`` (a run claimed or queued after
    the pass has a deadline at least that far ahead; an approval request with a shorter
    expiry than that can be expired up to that late). ``earliest`` None: nothing to wait for."""
    period = settings.RUN_REAPER_PERIOD_S
    longest = max(period, min(settings.RUN_LEASE_S, settings.RUN_QUEUED_DEADLINE_S))
    due = now + longest if earliest is None else earliest + SLACK_S
    return min(max(due, now + period), now + longest)


def reaper_pass_claim(now: float | None = None) -> bool:
    """Whether this process does a pass due now: the period is ``now`` (Unix seconds;
    default: the clock) // ``RUN_REAPER_PERIOD_S``, and the first process to add its key to
    the default cache (Redis in production: ``SET NX``, expiring after two periods, at least
    1 s) takes it; the others skip it. True when the cache fails: more reapers than needed
    are safe, none is not."""
    period = settings.RUN_REAPER_PERIOD_S
    now = time.time() if now is None else now
    try:
        return bool(cache.add(f"run-reaper:pass:{int(now // period)}", f"{os.getpid()}",
                              timeout=max(1, math.ceil(2 * period))))
    except Exception:  # noqa: BLE001 - the cache is down: reap anyway
        logger.debug("reaper: cache unavailable; passing without a claim", exc_info=True)
        return True


def reaper_wake(now: float | None = None) -> float:
    """One wake-up of a process's reaper thread; returns when to wake next (Unix seconds).

    If another process has passed since and stored a next pass later than ``now`` (``NEXT_KEY``),
    this one stands in a period after that. Otherwise it claims the pass
    (:func:`reaper_pass_claim`; lost: a period on), passes, and stores the next due time,
    expiring a little after it (the cache down: the process keeps its own schedule). A failed
    pass is logged and tried again a period on."""
    period = settings.RUN_REAPER_PERIOD_S
    now = time.time() if now is None else now
    try:
        shared = cache.get(NEXT_KEY)
    except Exception:  # noqa: BLE001 - the cache is down: keep our own schedule
        shared = None
    if shared is not None and shared > now:
        return shared + period
    if not reaper_pass_claim(now):
        return now + period
    try:
        close_old_connections()
        try:
            due = reaper_pass()
        except OperationalError:  # a connection the server dropped while idle: one fresh try
            connection.close()
            due = reaper_pass()
    except Exception as exc:
        if is_database_unavailable(exc):  # an outage: one line per pass, not a traceback each time
            logger.warning("reaper pass skipped: no database connection (%s)", error_line(exc))
        else:
            logger.exception("reaper pass failed")
        return now + period
    finally:
        close_old_connections()
    try:
        cache.set(NEXT_KEY, due, timeout=max(1, math.ceil(due - now + 2 * period)))
    except Exception:  # noqa: BLE001
        logger.debug("reaper: cache unavailable; the next pass is this process's alone", exc_info=True)
    return due


def _loop() -> None:
    wake_at = time.time() + settings.RUN_REAPER_PERIOD_S
    while True:
        while (left := wake_at - time.time()) > 0:
            time.sleep(left)
        wake_at = reaper_wake()


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
