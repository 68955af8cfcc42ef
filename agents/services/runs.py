"""Stopping a run: a queued or parked one is ended here, a running one by its worker."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _

from agents.backends import abandon_waiting
from agents.events import RunEmitter
from agents.ledger import CANCELLED_RESULT, close_open_calls
from agents.models import Run
from agents.runs import lifecycle
from agents.runs.control import run_check_now
from agents.runs.driver import close_round_cancelled, mark_unanswered
from chat.models import Message
from chat.selectors import membership_get

from .results import RunRejected


def end_waiting_run(run: Run, *, reason: str, decision: str, run_message: str = "") -> bool:
    """Cancel a run that waits for approval, or is queued: what a lost worker left open is
    closed (``driver.close_round_cancelled``: a run re-queued after its worker died), its
    open calls get ``reason`` as an error result (history stays valid for every provider),
    ``approval.resolved`` and ``run.cancelled`` are published; the run's ``error`` is
    ``{decision, run_message or reason}``. Returns False if the run was no longer waiting."""
    if not lifecycle.run_cancel_waiting(run_id=run.pk, code=decision, reason=run_message or reason):
        return False
    run.refresh_from_db()
    emitter = RunEmitter.for_run(run)
    # A run re-queued after its worker died still holds that worker's round: close it too.
    close_round_cancelled(run, emitter)
    mark_unanswered(run, Message.Status.CANCELLED)  # cancelled while it waited for a worker
    closed = close_open_calls(run=run, reason=reason)
    for ledger_id in closed:
        emitter.emit("approval.resolved", tool_call_id=ledger_id, decision=decision, decided_by=None)
    emitter.emit("run.cancelled", status=Run.Status.CANCELLED)
    emitter.close()
    transaction.on_commit(lambda: abandon_waiting(run))  # a remote agent: deny and stop it there
    return True


def _may_manage(run: Run, user) -> bool:
    """The run's own user, or an admin of its workspace."""
    if run.user_id == user.pk:
        return True
    membership = membership_get(user=user, workspace_id=run.thread.workspace_id)
    return membership is not None and membership.role.is_admin


def run_cancel(*, run: Run, user) -> Run:
    """Cancel a queued, running or awaiting run.

    Only the run's user or an admin of its workspace may cancel (others: ``not_allowed``,
    403). A queued or awaiting run is ended here: open tool calls get a "cancelled by the
    user" result and ``run.cancelled`` is published now. A running one is stopped by its
    worker, which closes the upstream stream and keeps the partial text with status
    ``cancelled``: at its next token or check once the commit woke its heartbeat
    (``agents.runs.control``), else at its next heartbeat (within a second). A finished run →
    ``run_finished`` (409; the message says "already cancelled" when a cancel came first).
    """
    if not _may_manage(run, user):
        raise RunRejected("not_allowed", _("Only the person who started this run or an admin of its workspace can "
                                           "cancel it."), 403)
    # The calls were not executed; the run may have written text (a lost attempt's).
    if end_waiting_run(run, reason=CANCELLED_RESULT, decision="cancelled", run_message="Cancelled by the user."):
        return run
    if not lifecycle.run_cancel_running(run_id=run.pk):
        # A Stop that lost a race with another Stop says so, not "finished" (four Stops at once
        # across two web processes: three were told the cancelled run had finished).
        status = Run.objects.filter(pk=run.pk).values_list("status", flat=True).first()
        message = (_("This run was already cancelled.") if status == Run.Status.CANCELLED
                   else _("This run has already finished."))
        raise RunRejected("run_finished", message, 409)
    run_id = run.pk
    transaction.on_commit(lambda: run_check_now(run_id))
    run.status = Run.Status.CANCELLED
    return run



