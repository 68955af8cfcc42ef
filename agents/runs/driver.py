"""``run_turn(run_id)``: claim → ``backend.advance(turn)`` → the lifecycle's end (DESIGN §5).

The driver is the same for every backend. It claims the run's lease (a run another live
worker holds is left alone), checks the user still belongs to the workspace, builds the
:class:`~agents.backends.Turn` (emitter, lease, tool scope), lets the provider's backend do
the work, and applies the :class:`~agents.backends.Outcome`:

=====================  ==========================================  ==========================
outcome                lifecycle                                   event
=====================  ==========================================  ==========================
completed              ``run_finish(completed)``                   ``run.completed``
failed                 ``run_finish(failed, error)``               ``run.failed``
awaiting_approval      ``run_park`` (the lease is released)        — (``approval.requested``
                                                                   was published by the
                                                                   backend)
cancelled              ``run_cancel_finished``                     ``run.cancelled``
=====================  ==========================================  ==========================

A cancel that lands between the backend's last check and the driver's transition wins: the
transition fails, the backend's ``cancel`` closes its work, and ``run.cancelled`` is
published. Never raises for provider or tool failures; a bug still ends the run ``failed``
with ``internal_error``. A worker that lost its lease stops without writing anything.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils.translation import gettext_noop

from agents.backends import Outcome, Turn, backend_for
from agents.events import RunEmitter
from agents.ledger import CANCELLED_RESULT, UNKNOWN_OUTCOME, close_open_calls, tool_call_close
from agents.metering import meter
from agents.models import Run, ToolCall
from agents.replay import fill_from_log
from agents.titles import title_after_first_answer
from agents.tools import ToolContext
from chat.models import Message
from chat.selectors import role_name_in
from chat.services import message_create
from chatplatform.dbconn import DATABASE_UNAVAILABLE, is_database_unavailable, unavailable_message

from . import control, lifecycle
from .gate import SetupSlot, setup_slot
from .lease import LeaseLost, RunLease, worker_identity

logger = logging.getLogger(__name__)
_claimed = threading.local()  # the run this thread's turn claimed (run_turn_or_fail)

FAIL_RECORD_ATTEMPTS = 3  # tries to record a database_unavailable failure before the reaper's turn


def run_turn(*, run_id) -> None:
    """Start, continue or recover run ``run_id``. Returns when the run is terminal or waits
    for a person's decision.

    The turn waits for a set-up slot (``agents.runs.gate``: a few at a time per process, first
    come first served) before it claims the run: a run waiting there stays ``queued`` and costs
    nothing yet. The backend gives the slot back once its first request is sent
    (``turn.dispatched()``), the turn's end at the latest."""
    with setup_slot() as slot:
        _run_turn(run_id, slot)


def _run_turn(run_id, slot: SetupSlot) -> None:
    owner = worker_identity()
    claimed_at = lifecycle.run_claim(run_id=run_id, owner=owner)
    if claimed_at is None:
        return
    _claimed.run_id = str(run_id)  # run_turn_or_fail: a failure after this is this claim's
    # No ``user`` join: a turn uses ``run.user_id`` only (approvals load the user when they need
    # a name); each join of this read costs about 0.3 ms of CPU to build (bench/run_cpu.py).
    run = Run.objects.select_related("thread__workspace", "provider", "user_message").get(pk=run_id)
    # True on the run's first claim (lifecycle.run_claim; never recovered: attempts 0): nothing
    # of its own is stored yet, so the backend and the grounding skip looking for an earlier
    # attempt's message and sources.
    run.first_claim = run.started_at == claimed_at and run.attempts == 0
    if run.budget_hold:  # an earlier attempt's worker died mid-round: give its hold back
        meter().recover(run_id=run.pk)
    emitter = RunEmitter.for_run(run)
    control.listen()  # a cancel elsewhere wakes this process's heartbeat (agents.runs.control)
    lease = RunLease(run_id=run.pk, owner=owner, seq_source=lambda: emitter.settled_seq).start()
    emitter.fence = lambda: lease.lost  # a worker that lost the run publishes nothing
    emitter.hold = lambda: lease.suspended  # one that cannot renew holds its events meanwhile
    turn = _turn(run, emitter, lease, slot)
    backend = backend_for(run.provider)
    try:
        with meter().run_scope(run=run):  # log context and the run's trace span (agents.metering)
            if not turn.role:
                outcome = Outcome.failed("forbidden", "you are no longer a member of this workspace")
            else:
                outcome = backend.advance(turn)
            # The answer's events reach the event log before the run ends in the database (under
            # a live lease): a worker cut off from Redis holds them until it is back (at most
            # EVENTS_LOG_RETRY_S), so a reader resuming a finished run finds them all instead
            # of a hole it is told events_missing for (tests/multihost: work1 cut off 20 s).
            # Without an outage the outbox is empty here within the publisher's gather window.
            emitter.drain(settings.EVENTS_LOG_RETRY_S)
            # Raises LeaseLost: a worker that lost the run never writes the end; one that cannot
            # renew right now (the database away) waits for a renewal first.
            lease.wait_owned()
            lease.tick()
            lease.stop()  # the end below is one transition; no renewal may race it
            _end(turn, backend, outcome, owner)
    except LeaseLost:
        logger.warning("run %s: lease lost (taken over, or not renewable); this worker stops here", run.pk)
        lease.stop()
        emitter.close(save_seq=False)
        return
    except Exception as exc:  # last line of defence: a bug still ends the run cleanly
        lease.stop()
        if lease.lost:  # the run may be another worker's now (the reaper's re-queue): no writes
            logger.warning("run %s: %s: %s after its lease was lost; this worker stops here", run.pk,
                           type(exc).__name__, exc)
            emitter.close(save_seq=False)
            return
        if is_database_unavailable(exc):
            logger.warning("run %s: no database connection (%s: %s)", run.pk, type(exc).__name__, exc)
            code, message = DATABASE_UNAVAILABLE, unavailable_message(exc)
        else:
            logger.exception("run %s crashed", run.pk)
            code, message = "internal_error", f"internal error: {type(exc).__name__}"
        # Its streaming message gets all the text the turn streamed (what the page showed), not
        # the heartbeat's last save (up to STREAM_PERSIST_INTERVAL_S older); run_turn_or_fail
        # writes it if this cannot.
        _claimed.latest = latest = lease.streamed_text()
        try:
            _close_streaming(run, emitter, code=code, message=message, latest=latest)
            _fail(run, emitter, code, message)
        except DatabaseError:
            emitter.close(save_seq=False)  # what was published is in the event log
            raise  # run_turn_or_fail records the failure once a connection is free
    emitter.close()
    lease.cleared = run.status in (Run.Status.COMPLETED, Run.Status.FAILED)  # run_finish cleared it
    lease.release()


def run_turn_or_fail(*, run_id) -> None:
    """:func:`run_turn` for the executors: a turn that cannot get a database connection (the
    pool stayed empty for ``DB_POOL_TIMEOUT_S``, or the server refused) fails visibly —
    ``run.failed`` with code ``database_unavailable``, the user's message kept — instead of
    staying queued or running with no event. If even that write finds no connection, the run
    is left to the reaper (``not_started`` / ``interrupted``), which needs the database too."""
    _claimed.run_id = _claimed.latest = None
    try:
        run_turn(run_id=run_id)
    except DatabaseError as exc:
        if not is_database_unavailable(exc):
            raise
        logger.warning("run %s: no database connection (%s: %s); failing it", run_id, type(exc).__name__, exc)
        connection.close()  # a broken connection must not be reused
        owner = worker_identity() if _claimed.run_id == str(run_id) else None
        latest = _claimed.latest if owner is not None else None
        for attempt in range(1, FAIL_RECORD_ATTEMPTS + 1):  # each waits up to DB_POOL_TIMEOUT_S
            try:
                if not run_fail_unavailable(run_id=run_id, message=unavailable_message(exc), owner=owner,
                                            latest=latest):
                    logger.info("run %s: already ended or another worker's when its database failure was "
                                "recorded", run_id)
                return
            except DatabaseError:
                connection.close()
                if attempt == FAIL_RECORD_ATTEMPTS:
                    logger.exception("run %s: no database connection to record its failure; left to the reaper",
                                     run_id)


def run_fail_unavailable(*, run_id, message: str, owner: str | None = None,
                         latest: tuple | None = None) -> bool:
    """Fail a run with ``database_unavailable`` and publish ``run.failed`` after the last seq
    in the event log (the turn may have published past the saved seq): a run this worker
    claimed (``owner``) only while it still holds its lease; one it never claimed only while
    it is still queued. False when the run had already ended (a cancel came first) or is
    another worker's (the reaper re-queued it after this worker's lease expired, and another
    took it up: failing it would end that worker's answer under it).

    The run's messages still ``streaming`` are closed ``truncated`` with the error (a
    ``message.completed`` each; ``latest`` — ``(message_id, fields)`` from
    ``RunLease.streamed_text`` — gives that message all the text the turn streamed); a run
    with no assistant message gets an empty one, status ``error``, so a reload shows how the
    turn ended."""
    run = Run.objects.select_related("thread").get(pk=run_id)
    error = {"code": DATABASE_UNAVAILABLE, "message": message}
    if not lifecycle.run_finish(run=run, status=Run.Status.FAILED, error=error,
                                owner=owner if owner is not None else ""):
        return False
    lifecycle.run_release(run_id=run.pk, owner=run.lease_owner or "")
    emitter = RunEmitter.for_run(run, from_log=True)
    _close_streaming(run, emitter, code=DATABASE_UNAVAILABLE, message=message, latest=latest)
    mark_unanswered(run, Message.Status.ERROR, error=error)
    emitter.emit("run.failed", status=Run.Status.FAILED, error=error, retryable=True)
    emitter.close()
    return True


def _turn(run: Run, emitter: RunEmitter, lease: RunLease, slot: SetupSlot | None = None) -> Turn:
    thread = run.thread
    role = role_name_in(user=run.user_id, workspace_id=thread.workspace_id)
    tools = ToolContext(
        workspace_id=thread.workspace_id,
        thread_id=str(thread.pk),
        user_id=run.user_id,
        run_id=str(run.pk),
        role=role,
        include_private=run.include_private,
        allow_model_save=thread.allow_model_save,
        env_id=run.env_id,
        ui_context=dict(run.ui_context or {}),
    )
    return Turn(run=run, emitter=emitter, lease=lease, role=role, tools=tools, slot=slot)


def _end(turn: Turn, backend, outcome: Outcome, owner: str) -> None:
    run, emitter = turn.run, turn.emitter
    if outcome.kind == "awaiting_approval":
        # The seq first: a cancel or decision right after the park numbers its events after
        # ours (and no reservation of ours is left for it to number above).
        emitter.save_seq()
        if lifecycle.run_park(run_id=run.pk, owner=owner):
            return
        backend.cancel(turn)  # cancelled while the backend asked for a decision
        outcome = Outcome.cancelled()
    if outcome.kind == "completed":
        emitter.flush()  # so run.completed is the next seq, saved with the end (one write)
        final = emitter.seq + 1
        if lifecycle.run_finish(run=run, status=Run.Status.COMPLETED, iterations=run.iterations,
                                last_event_seq=final):
            if emitter.emit("run.completed", status=Run.Status.COMPLETED,
                            truncated=outcome.truncated)["seq"] == final:
                emitter.seq_saved(final)
            # The answer is out and the run closed; a first answer's chat gets its title now
            # (one small request; never raises).
            title_after_first_answer(run_id=run.pk)
            return
        outcome = Outcome.cancelled()  # cancelled after the last check: the cancel wins
    if outcome.kind == "failed":
        _fail(run, emitter, outcome.code, outcome.message, retryable=outcome.retryable)
        return
    lifecycle.run_cancel_finished(run_id=run.pk)
    emitter.emit("run.cancelled", status=Run.Status.CANCELLED)


def _fail(run: Run, emitter: RunEmitter, code: str, message: str, *, retryable: bool = False) -> None:
    """Fail ``run`` with ``{code, message}`` and publish ``run.failed`` — or ``run.cancelled``
    when a cancel came first. A run it fails that wrote no assistant message (no longer a
    member, no database at set-up) gets an empty one with the error (:func:`mark_unanswered`)."""
    error = {"code": code, "message": message}
    finished = lifecycle.run_finish(run=run, status=Run.Status.FAILED, error=error)
    if finished or not lifecycle.run_is_cancelled(run_id=run.pk):
        if finished:
            mark_unanswered(run, Message.Status.ERROR, error=error)
        emitter.emit("run.failed", status=Run.Status.FAILED, error=error, retryable=retryable)
    else:  # a cancel came first and wins
        lifecycle.run_cancel_finished(run_id=run.pk)
        emitter.emit("run.cancelled", status=Run.Status.CANCELLED)


def run_fail_interrupted(*, run_id, expected_lease) -> bool:
    """The reaper's end for a run whose workers kept dying: its streaming messages are kept
    as ``truncated`` and the run fails with code ``interrupted``. False when another reaper
    (or a revived worker) got there first."""
    if not lifecycle.run_take_for_failure(run_id=run_id, expected_lease=expected_lease):
        return False
    run = Run.objects.get(pk=run_id)
    emitter = RunEmitter.for_run(run)
    _close_lost_round(run, emitter)
    _fail(run, emitter, "interrupted", "The run was interrupted: its worker stopped repeatedly.")
    emitter.close()
    lifecycle.run_release(run_id=run.pk, owner="reaper")
    return True


def run_close_abandoned_cancel(*, run_id, expected_lease) -> bool:
    """The reaper's end for a run cancelled while running that its worker never closed (the
    worker died before or just after the cancel; the lease ``expected_lease`` expired): it is
    closed as its worker would have closed it (:func:`close_round_cancelled`, unanswered calls
    get :data:`CANCELLED_RESULT`, the last assistant message is ``cancelled``), ``run.cancelled``
    is published and ``finished_at`` stamped. False when another reaper got there first.
    A live worker cannot race it: one whose renewals fail fences itself at 0.8 × ``RUN_LEASE_S``,
    before the lease expires."""
    if not lifecycle.run_take_abandoned_cancel(run_id=run_id, expected_lease=expected_lease):
        return False
    run = Run.objects.get(pk=run_id)
    emitter = RunEmitter.for_run(run, from_log=True)  # the dead worker may have published past the saved seq
    closed_messages = close_round_cancelled(run, emitter)
    for ledger_id in close_open_calls(run=run, reason=CANCELLED_RESULT):
        emitter.emit("approval.resolved", tool_call_id=ledger_id, decision="cancelled", decided_by=None)
    if not closed_messages:  # as a worker does: the run's last assistant message says cancelled
        final = message_create(thread_id=run.thread_id, run=run, role=Message.Role.ASSISTANT,
                               status=Message.Status.CANCELLED, provider=run.provider.slug if run.provider else "",
                               model=run.model)
        emitter.emit("message.completed", message_id=str(final.pk), status=final.status)
    lifecycle.run_cancel_finished(run_id=run.pk)
    emitter.emit("run.cancelled", status=Run.Status.CANCELLED)
    emitter.close()
    lifecycle.run_release(run_id=run.pk, owner="reaper")
    logger.warning("run %s: cancelled while its worker was lost; closed by the reaper", run.pk)
    return True


def close_round_cancelled(run: Run, emitter: RunEmitter) -> int:
    """What a lost worker left open in ``run``, closed for a cancel with no worker to do it
    (the reaper's :func:`run_close_abandoned_cancel`, or a cancel of a run re-queued after its
    worker died): the round's budget hold given back (``Meter.recover``, once); a tool call
    that was running marked ``status_unknown`` (never run again) with that as its result and a
    ``tool.completed``; messages still ``streaming`` kept ``cancelled`` — the last with all the
    text live clients were shown (:func:`_shown_latest`) — a ``message.completed`` each.
    Returns how many messages it closed."""
    if run.budget_hold:
        meter().recover(run_id=run.pk)
    for ledger in ToolCall.objects.filter(run=run, status=ToolCall.Status.RUNNING):
        tool_call_close(ledger=ledger, run=run, emitter=emitter, status=ToolCall.Status.STATUS_UNKNOWN,
                        summary=UNKNOWN_OUTCOME)
    return _close_streaming(run, emitter, status=Message.Status.CANCELLED, latest=_shown_latest(run))


def _shown_latest(run: Run) -> tuple[Any, dict[str, str]] | None:
    """``(message id, {"content": …})`` for ``run``'s last ``streaming`` message, with all the
    text live clients were shown (``agents.replay.fill_from_log``: a lost worker may have
    streamed on after its last save); None when no message is streaming."""
    last = Message.objects.filter(run=run, status=Message.Status.STREAMING).order_by("-position").first()
    return (last.pk, {"content": fill_from_log(run.pk, last.content)}) if last is not None else None


def _close_lost_round(run: Run, emitter: RunEmitter) -> None:
    """The round a lost worker was in, when the reaper fails its run: the budget hold recorded
    for it is given back (``Meter.recover``, once) and its streaming messages are kept as
    ``truncated`` — the last with all the text live clients were shown (``fill_from_log``)."""
    if run.budget_hold:
        meter().recover(run_id=run.pk)
    _close_streaming(run, emitter, code="interrupted", message="the worker stopped while writing this",
                     latest=_shown_latest(run))


def _close_streaming(run: Run, emitter: RunEmitter, *, status: str = Message.Status.TRUNCATED, code: str = "",
                     message: str = "", latest: tuple | None = None) -> int:
    """Close ``run``'s messages still ``streaming`` as ``status`` (their text as last saved, or
    for ``latest``'s message — ``(message_id, {"content": str, "reasoning": str?})`` — that
    text), with ``error`` ``{code, message}`` when ``code`` is given, and a
    ``message.completed`` each. Returns how many it closed."""
    streaming = list(Message.objects.filter(run=run, status=Message.Status.STREAMING))
    for msg in streaming:
        msg.status = status
        fields = ["status", "updated_at"]
        if latest is not None and str(latest[0]) == str(msg.pk):
            for name, value in latest[1].items():
                if value is not None:
                    setattr(msg, name, value)
                    fields.append(name)
        if code:
            msg.error = {"code": code, "message": message}
            fields.append("error")
        msg.save(update_fields=fields)
        emitter.emit("message.completed", message_id=str(msg.pk), status=msg.status)
    return len(streaming)


def mark_unanswered(run: Run, status: str, *, error: dict | None = None) -> None:
    """A run that ends before it wrote an assistant message (never started, or cancelled while
    it waited for a worker) gets an empty one with ``status`` (and ``error``), so the thread
    shows how the turn ended after a reload too. An empty message is never sent to a model
    (``agents.loop.prompt``)."""
    if Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exists():
        return
    with transaction.atomic():  # message_create locks the thread's row
        message_create(thread_id=run.thread_id, run=run, role=Message.Role.ASSISTANT, status=status,
                       error=error or {})


def busy_message() -> str:
    minutes = settings.RUN_QUEUE_MAX_WAIT_S / 60
    return (f"Every worker stayed busy for {minutes:g} minute{'s' if minutes != 1 else ''}, so this run never "
            "started; try again, or ask an admin to add workers.")


def run_fail_not_started(*, run_id, expected_queued_at, busy: bool = False) -> bool:
    """The reaper's end for a run no worker picked up after ``RUN_MAX_ATTEMPTS`` enqueues: it
    fails visibly (``run.failed`` with code ``not_started``; the user's message is kept, and
    an empty assistant message ``error`` with that error shows it in the thread). A
    run that had started before its worker was lost (re-queued, then never taken up again)
    fails ``interrupted`` instead: its streaming messages are kept as ``truncated`` and the
    budget hold of its lost round is given back, as when its workers keep dying. False when
    a worker claimed it meanwhile. ``busy``: every worker stayed busy for
    ``RUN_QUEUE_MAX_WAIT_S`` while the broker held the run's turn (the message says so)."""
    run = Run.objects.get(pk=run_id)  # still current if the update below takes it: nobody writes a queued run
    # The platform's own words, in English here; translated for each reader
    # (agents.presentation.own_words).
    error = ({"code": "interrupted", "message": gettext_noop(
                "The run was interrupted: its worker stopped and no worker took it up again; try again, or ask "
                "an admin to check the workers.")}
             if run.started_at is not None else
             {"code": "not_started", "message": busy_message()} if busy else
             {"code": "not_started", "message": gettext_noop(
                 "No worker picked this run up; try again, or ask an admin to check the workers and the broker.")})
    if not lifecycle.run_fail_unclaimed(run_id=run_id, expected_queued_at=expected_queued_at, error=error):
        return False
    emitter = RunEmitter.for_run(run)
    _close_lost_round(run, emitter)
    mark_unanswered(run, Message.Status.ERROR, error=error)  # shown after a reload, with Retry
    emitter.emit("run.failed", status=Run.Status.FAILED, error=error, retryable=True)
    emitter.close()
    return True
