"""The run lifecycle: every change of ``Run.status`` and ``ToolCall.status``, and nothing else.

Each transition is one named function and one conditional ``UPDATE … WHERE status IN (from)``:
it returns whether it happened, so two processes racing for the same change cannot both win
(the loser sees ``False`` and backs off). No other module writes either status field; other
fields (a message's text, a ledger row's arguments) are written where they are produced.

Run transitions (``Run.Status``)::

    function                from                                    to                   by
    run_claim               queued | running (lease expired/none)   running              a worker (driver)
    run_lease_renew         running (own lease)                     running              the heartbeat
    run_park                running (own lease)                     awaiting_approval    the backend waits for a person
    run_requeue_decided     awaiting_approval                       queued               an approval decision
    run_requeue_expired     running (this expired lease)            queued               the reaper (attempts + 1)
    run_requeue_stale       queued (unclaimed since this queued_at) queued               the reaper (attempts + 1)
    run_fail_unclaimed      queued (unclaimed since this queued_at) failed               the reaper, out of attempts
    run_take_for_failure    running (this expired lease)            running, reaper's    the reaper, before failing it
    run_finish              queued | running | awaiting_approval    completed | failed   the driver
    run_cancel_waiting      queued | awaiting_approval              cancelled            cancel, or a new message
    run_cancel_running      running                                 cancelled            cancel (its worker stops)
    run_take_abandoned_cancel cancelled, unclosed (this expired lease) cancelled, reaper's the reaper, before closing it

Besides the status: ``run_release`` clears a lease, ``run_seq_save`` keeps ``last_event_seq``
(the emitter calls it when it closes), ``run_seq_reserve`` / ``run_seq_release`` keep the
writer's seq reservation (``seq_reserved``, ``agents.events``), ``run_backend_state_save`` keeps a backend's own state.
``interrupted`` is never set by this code: a run whose workers keep dying ends ``failed``
with error code ``interrupted``.

ToolCall transitions (``ToolCall.Status``)::

    function                from                                    to
    tool_call_open          (no row)                                pending
    tool_call_park          pending                                 awaiting_approval (rule, expires_at)
    tool_call_count_approval awaiting_approval (n approvals)        awaiting_approval (n + 1): the first
                                                                    of two approvals
    tool_call_decide        awaiting_approval                       approved | denied
    tool_call_expire_request awaiting_approval (expires_at passed)  denied, decision "expired"
    tool_call_claim         pending | approved                      running
    tool_call_finish        pending | approved | running | denied   succeeded | failed | timeout |
                                                                    status_unknown | permission_denied | denied
    tool_call_mark_unknown  running                                 status_unknown   (its worker died)
    tool_call_expire        pending | awaiting_approval | approved  expired          (cancel, supersede)

A call that reached ``succeeded`` or ``status_unknown`` is never executed again (DESIGN §4).

A database blip: every function here except ``run_lease_renew`` is wrapped in
:func:`chatplatform.db.retry_transient` — a lost connection is retried for ``DB_RETRY_S``
seconds before the error reaches the driver (each is one conditional UPDATE, safe to
repeat). ``run_lease_renew`` is retried by the heartbeat itself at its next beat; a worker
that cannot renew for ``FENCE_FRACTION`` × ``RUN_LEASE_S`` fences itself (``lease.py``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from agents.models import Run, ToolCall
from chatplatform.db import db_now, retry_transient, update_rows

S = Run.Status
T = ToolCall.Status

ACTIVE = (S.QUEUED, S.RUNNING, S.AWAITING_APPROVAL)
"""A run in one of these states still owes its thread a terminal event."""


def _lease_deadline(using: str = "default"):
    """``RUN_LEASE_S`` from now by the database's clock (``db_now``): the reaper on another
    host compares it with that clock too, whatever the hosts' clocks say."""
    return db_now(using) + timedelta(seconds=settings.RUN_LEASE_S)


# -- Run -------------------------------------------------------------------------------------
@retry_transient
def run_claim(*, run_id, owner: str) -> datetime | None:
    """queued, or running with an expired (or no) lease → running, leased to ``owner`` for
    ``RUN_LEASE_S`` seconds. Returns the claim's time, or None when another live worker holds
    it or it is not runnable. ``Run.started_at`` is set to that time by the run's first claim
    only, so ``run.started_at == claimed_at`` tells a first claim (no worker has run the run
    before: it has no messages or sources of its own yet) from a resume, a recovery or an
    approval's continuation. (Crash recoveries are counted by the reaper in ``Run.attempts``.)"""
    now = db_now()
    claimed = (
        Run.objects.filter(pk=run_id)
        .filter(Q(status=S.QUEUED) | Q(status=S.RUNNING, lease_expires_at__lt=now)
                | Q(status=S.RUNNING, lease_expires_at__isnull=True))
        .update(status=S.RUNNING, lease_owner=owner, lease_expires_at=now + timedelta(seconds=settings.RUN_LEASE_S),
                started_at=Coalesce(F("started_at"), now))
    )
    return now if claimed else None


def run_lease_renew(*, run_id, owner: str, seq: int | None = None, using: str = "default") -> bool:
    """Extend ``owner``'s lease by ``RUN_LEASE_S`` seconds (and save the emitter's ``seq``).
    False when the run is no longer running under this owner (cancelled, or taken over).
    ``using``: the database alias (the heartbeat's own, ``LEASE_DB_ALIAS``)."""
    fields = {"lease_expires_at": _lease_deadline(using)}
    if seq is not None:
        fields["last_event_seq"] = Greatest(F("last_event_seq"), seq)
    return bool(Run.objects.using(using).filter(pk=run_id, status=S.RUNNING, lease_owner=owner).update(**fields))


def run_leases_renew(*, leases: list[tuple], using: str = "default") -> set[str]:
    """:func:`run_lease_renew` for many runs in one ``executemany`` (``chatplatform.db.update_rows``):
    ``leases`` is ``[(run_id, owner, seq or None), …]``. Returns the ids (str) renewed; the
    others are no longer running under that owner. One round trip per heartbeat instead of one
    per run: with 50 runs under load a serial pass outlasted the fence and healthy runs were
    stopped. ``last_event_seq`` only grows (a seq of None leaves it as it is)."""
    if not leases:
        return set()
    deadline = _lease_deadline(using)
    owners = {str(run_id): owner for run_id, owner, _seq in leases}
    with transaction.atomic(using=using, savepoint=False):  # the heartbeat's transaction, when in one
        updated = update_rows(
            Run, set_fields=["lease_expires_at", "last_event_seq"], where_fields=["id", "lease_owner", "status"],
            set_sql={"last_event_seq": "CASE WHEN %s > {col} THEN %s ELSE {col} END"},
            rows=[(deadline, seq, run_id, owner, S.RUNNING) for run_id, owner, seq in leases], using=using)
        if updated == len(leases):
            return set(owners)
        rows = Run.objects.using(using).filter(pk__in=list(owners), status=S.RUNNING,
                                               lease_expires_at=deadline).values_list("pk", "lease_owner")
        return {str(pk) for pk, owner in rows if owners.get(str(pk)) == owner}


@retry_transient
def run_park(*, run_id, owner: str) -> bool:
    """running → awaiting_approval: no worker waits for a person; the lease is released.
    False when the run was cancelled (or taken over) meanwhile."""
    return bool(Run.objects.filter(pk=run_id, status=S.RUNNING, lease_owner=owner).update(
        status=S.AWAITING_APPROVAL, lease_owner="", lease_expires_at=None))


@retry_transient
def run_requeue_decided(*, run_id) -> bool:
    """awaiting_approval → queued, after a decision (the caller enqueues the run)."""
    return bool(Run.objects.filter(pk=run_id, status=S.AWAITING_APPROVAL).update(
        status=S.QUEUED, queued_at=timezone.now()))


@retry_transient
def run_requeue_expired(*, run_id, expected_lease) -> bool:
    """running with exactly ``expected_lease`` (expired) → queued, ``attempts`` + 1. Many
    reapers may race; the lease timestamp lets exactly one win."""
    return bool(Run.objects.filter(pk=run_id, status=S.RUNNING, lease_expires_at=expected_lease).update(
        status=S.QUEUED, lease_owner="", lease_expires_at=None, attempts=F("attempts") + 1,
        queued_at=timezone.now()))


@retry_transient
def run_requeue_stale(*, run_id, expected_queued_at, count: bool = True) -> bool:
    """A queued run no worker claimed since ``expected_queued_at`` (its broker message was
    lost) stays queued with a fresh ``queued_at`` and ``attempts`` + 1; the caller enqueues it
    again. ``count=False``: only ``queued_at`` moves (the run waits for a busy worker; the
    reaper looks again ``RUN_QUEUED_DEADLINE_S`` later). Exactly one reaper wins."""
    changes = {"queued_at": timezone.now()}
    if count:
        changes["attempts"] = F("attempts") + 1
    return bool(Run.objects.filter(pk=run_id, status=S.QUEUED, queued_at=expected_queued_at).update(**changes))


@retry_transient
def run_fail_unclaimed(*, run_id, expected_queued_at, error: dict) -> bool:
    """queued, unclaimed since ``expected_queued_at`` → failed with ``error`` (no worker ever
    picked it up, ``RUN_MAX_ATTEMPTS`` enqueues). False when a worker claimed it meanwhile."""
    return bool(Run.objects.filter(pk=run_id, status=S.QUEUED, queued_at=expected_queued_at).update(
        status=S.FAILED, error=error, finished_at=timezone.now()))


@retry_transient
def run_take_for_failure(*, run_id, expected_lease) -> bool:
    """The reaper takes a run whose workers kept dying (lease ``expected_lease``) so that it
    alone writes the failure; the status stays running until :func:`run_finish`."""
    return bool(Run.objects.filter(pk=run_id, status=S.RUNNING, lease_expires_at=expected_lease).update(
        lease_owner="reaper"))


@retry_transient
def run_finish(*, run: Run, status: str, error: dict | None = None, iterations: int | None = None,
               last_event_seq: int | None = None, owner: str | None = None) -> bool:
    """queued | running | awaiting_approval → ``status`` (completed or failed), with
    ``error`` ``{code, message}`` for failures; the lease is cleared in the same write (a
    finished run holds none), and ``iterations`` / ``last_event_seq`` (it never moves back)
    are saved with it when given. ``owner``: only while that worker holds the run's lease
    (``""``: only while the run is queued, claimed by nobody). False when the run already ended
    — a cancel that came first wins — or is not ``owner``'s. Updates ``run.status`` in place
    when it happened."""
    if status not in (S.COMPLETED, S.FAILED):
        raise ValueError(f"run_finish ends a run completed or failed, not {status!r}")
    extra: dict = {}
    if iterations is not None:
        extra["iterations"] = iterations
    if last_event_seq is not None:
        extra["last_event_seq"] = Greatest(F("last_event_seq"), last_event_seq)
    rows = Run.objects.filter(pk=run.pk, status__in=ACTIVE)
    if owner is not None:
        rows = rows.filter(lease_owner=owner) if owner else rows.filter(status=S.QUEUED)
    updated = rows.update(
        status=status, error=error or {}, finished_at=timezone.now(), lease_owner="", lease_expires_at=None,
        **extra)
    if updated:
        run.status = status
    return bool(updated)


@retry_transient
def run_cancel_waiting(*, run_id, code: str, reason: str) -> bool:
    """queued | awaiting_approval → cancelled (no worker holds it, so the caller ends it)."""
    return bool(Run.objects.filter(pk=run_id, status__in=[S.QUEUED, S.AWAITING_APPROVAL]).update(
        status=S.CANCELLED, finished_at=timezone.now(), error={"code": code, "message": reason}))


@retry_transient
def run_cancel_running(*, run_id) -> bool:
    """running → cancelled. The worker sees it at once (``agents.runs.control``) or at its next
    heartbeat, keeps the partial text as ``cancelled`` and publishes ``run.cancelled``; a run
    whose worker is dead is closed so by the reaper (:func:`run_take_abandoned_cancel`)."""
    return bool(Run.objects.filter(pk=run_id, status=S.RUNNING).update(status=S.CANCELLED))


@retry_transient
def run_take_abandoned_cancel(*, run_id, expected_lease) -> bool:
    """The reaper takes a run cancelled while running that no worker closed (its lease
    ``expected_lease`` expired with ``finished_at`` still empty: the worker died), so that it
    alone closes it."""
    return bool(Run.objects.filter(pk=run_id, status=S.CANCELLED, finished_at__isnull=True,
                                   lease_expires_at=expected_lease).update(lease_owner="reaper"))


@retry_transient
def run_cancel_finished(*, run_id) -> None:
    """Stamp ``finished_at`` on a cancelled run whose worker has just closed it."""
    Run.objects.filter(pk=run_id, status=S.CANCELLED).update(finished_at=timezone.now())


@retry_transient
def run_is_cancelled(*, run_id) -> bool:
    return Run.objects.filter(pk=run_id, status=S.CANCELLED).exists()


@retry_transient
def run_release(*, run_id, owner: str) -> None:
    """Clear ``owner``'s lease (the run ended, or was handed to a person)."""
    Run.objects.filter(pk=run_id, lease_owner=owner).update(lease_owner="", lease_expires_at=None)


@retry_transient
def run_seq_save(*, run_id, seq: int) -> None:
    """Remember the last event seq published for the run (it never moves back)."""
    Run.objects.filter(pk=run_id).update(last_event_seq=Greatest(F("last_event_seq"), seq))


@retry_transient
def run_seq_reserve(*, run_id, upto: int) -> None:
    """Reserve the run's seqs up to ``upto`` (``seq_reserved`` never moves back here): its writer
    publishes nothing above before this is saved, so a later writer starts above it."""
    Run.objects.filter(pk=run_id).update(seq_reserved=Greatest(F("seq_reserved"), upto))


@retry_transient
def run_seq_release(*, run_id, reserved: int, seq: int) -> bool:
    """A writer that reserved up to ``reserved`` and numbered up to ``seq`` closes cleanly: the
    reservation comes back down to ``seq`` (and ``last_event_seq`` up to it), so the next
    writer — an approval's decision, the continuation — numbers right after, without a gap.
    Only while the reservation is still this writer's (another writer reserved since: kept)."""
    released = Run.objects.filter(pk=run_id, seq_reserved=reserved).update(
        seq_reserved=seq, last_event_seq=Greatest(F("last_event_seq"), seq))
    if not released:
        run_seq_save(run_id=run_id, seq=seq)
    return bool(released)


@retry_transient
def run_backend_state_save(*, run_id, state: dict) -> None:
    """Persist a backend's own state, e.g. ``{"remote_run_id", "last_event_id"}``."""
    Run.objects.filter(pk=run_id).update(backend_state=state)


# -- ToolCall --------------------------------------------------------------------------------
@retry_transient
def tool_call_open(*, run: Run, message, call_id: str, tool_name: str, raw_arguments: str) -> tuple[ToolCall, bool]:
    """The ledger row of call ``call_id`` of assistant ``message``: created ``pending``, or
    the existing one (``created`` False) — a redelivered turn finds what already happened."""
    return ToolCall.objects.get_or_create(
        message=message, call_id=call_id,
        defaults={"run": run, "tool_name": tool_name, "raw_arguments": raw_arguments or ""},
    )


@retry_transient
def tool_call_park(*, ledger: ToolCall, approval: dict | None = None, approvals_needed: int = 1,
                   expires_s: int = 0) -> bool:
    """pending → awaiting_approval, stamping ``requested_at`` (the countdown's start), the
    approval rule that fired (``approval``: ``ApprovalRule.as_dict()``), ``approvals_needed``
    (1 or 2) and ``expires_at`` (``expires_s`` seconds later; 0: never)."""
    now = timezone.now()
    expires_at = now + timedelta(seconds=expires_s) if expires_s else None
    fields = {"status": T.AWAITING_APPROVAL, "requested_at": now, "updated_at": now, "approval": approval or {},
              "approvals_needed": approvals_needed, "approvals_so_far": 0, "expires_at": expires_at}
    if ToolCall.objects.filter(pk=ledger.pk, status=T.PENDING).update(**fields):
        for key, value in fields.items():
            setattr(ledger, key, value)
        return True
    return False


@retry_transient
def tool_call_unpark(*, ledger: ToolCall) -> bool:
    """awaiting_approval → pending: a call parked on a "connect" card whose person connected;
    it goes through every check again (approval included) when the run resumes."""
    now = timezone.now()
    fields = {"status": T.PENDING, "approval": {}, "requested_at": None, "expires_at": None, "updated_at": now}
    if ToolCall.objects.filter(pk=ledger.pk, status=T.AWAITING_APPROVAL).update(**fields):
        for key, value in fields.items():
            setattr(ledger, key, value)
        return True
    return False


@retry_transient
def tool_call_count_approval(*, ledger: ToolCall, so_far: int) -> bool:
    """awaiting_approval with exactly ``so_far`` approvals → awaiting_approval with ``so_far``
    + 1: an approval that is not yet the last one needed (two-person rule). Of two approvals
    counting from the same ``so_far`` exactly one wins (the decision service serialises them
    per thread and re-reads the count under that lock)."""
    if ToolCall.objects.filter(pk=ledger.pk, status=T.AWAITING_APPROVAL, approvals_so_far=so_far).update(
        approvals_so_far=so_far + 1, updated_at=timezone.now()
    ):
        ledger.approvals_so_far = so_far + 1
        return True
    return False


@retry_transient
def tool_call_decide(*, ledger: ToolCall, decision: str, user, so_far: int | None = None) -> bool:
    """awaiting_approval → approved (``decision`` "approve") or denied ("deny"). Exactly one
    decision wins. ``so_far``: the approvals counted before this one (an approval is the
    deciding one only while nobody else counted meanwhile); an approve stores ``so_far`` + 1."""
    status = T.APPROVED if decision == "approve" else T.DENIED
    now = timezone.now()
    rows = ToolCall.objects.filter(pk=ledger.pk, status=T.AWAITING_APPROVAL)
    fields = {"status": status, "decision": decision, "decided_by": user, "decided_at": now, "updated_at": now}
    if so_far is not None:
        rows = rows.filter(approvals_so_far=so_far)
        if decision == "approve":
            fields["approvals_so_far"] = so_far + 1
    return bool(rows.update(**fields))


@retry_transient
def tool_call_expire_request(*, ledger: ToolCall, summary: str) -> bool:
    """awaiting_approval whose ``expires_at`` has passed → denied with decision ``expired``
    (nobody decided in time; the run goes on with a denied result). The reaper, or a decision
    that arrives late, calls it; exactly one wins."""
    now = timezone.now()
    if ToolCall.objects.filter(pk=ledger.pk, status=T.AWAITING_APPROVAL, expires_at__lte=now).update(
        status=T.DENIED, decision="expired", decided_at=now, summary=summary, updated_at=now
    ):
        ledger.status, ledger.decision, ledger.decided_at, ledger.summary = T.DENIED, "expired", now, summary
        return True
    return False


@retry_transient
def tool_call_claim(*, ledger: ToolCall) -> bool:
    """pending | approved → running, just before the tool executes: a call runs at most once."""
    if ToolCall.objects.filter(pk=ledger.pk, status__in=[T.PENDING, T.APPROVED]).update(
        status=T.RUNNING, updated_at=timezone.now()
    ):
        ledger.status = T.RUNNING
        return True
    return False


FINISH_FROM = (T.PENDING, T.APPROVED, T.RUNNING, T.DENIED)


@retry_transient
def tool_call_finish(*, ledger: ToolCall, status: str, result, summary: str, is_error: bool,
                     duration_ms: int | None = None) -> bool:
    """pending | approved | running | denied → ``status``, storing the result in the ledger.
    Updates ``ledger`` in place when it happened."""
    fields = {"status": status, "result": result, "summary": summary, "is_error": is_error,
              "updated_at": timezone.now()}
    if duration_ms is not None:
        fields["duration_ms"] = duration_ms
    if not ToolCall.objects.filter(pk=ledger.pk, status__in=FINISH_FROM).update(**fields):
        return False
    for key, value in fields.items():
        setattr(ledger, key, value)
    return True


@retry_transient
def tool_call_mark_unknown(*, ledger: ToolCall, summary: str) -> bool:
    """running → status_unknown: the worker died while the tool ran; never re-executed."""
    if ToolCall.objects.filter(pk=ledger.pk, status=T.RUNNING).update(
        status=T.STATUS_UNKNOWN, is_error=True, summary=summary, updated_at=timezone.now()
    ):
        ledger.status, ledger.is_error, ledger.summary = T.STATUS_UNKNOWN, True, summary
        return True
    return False


@retry_transient
def tool_call_expire(*, ledger: ToolCall, reason: str) -> bool:
    """pending | awaiting_approval | approved → expired: the run was cancelled, or a new
    message superseded a call waiting for approval."""
    return bool(ToolCall.objects.filter(
        pk=ledger.pk, status__in=[T.PENDING, T.AWAITING_APPROVAL, T.APPROVED]
    ).update(status=T.EXPIRED, is_error=True, summary=reason, updated_at=timezone.now()))
