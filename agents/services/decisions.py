"""Deciding a parked call: approve or deny under the rule it carries; the last needed
approval (or any deny) re-queues the run."""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext as _

from agents.approvals.expiry import approval_expire
from agents.approvals.policy import decider_check
from agents.approvals.requests import (
    CONNECT_RULE,
    DecisionRefused,
    approval_fields,
    decision_record,
    inbox_notify,
)
from agents.audit import audit_record
from agents.events import RunEmitter
from agents.locks import lock_user_then_thread
from agents.models import AuditEvent, Run, ToolCall
from agents.risk import COUNTDOWN_S
from agents.runs import executors, lifecycle

PARK_WAIT_S = 3.0  # a decision that raced the run's park waits this long for it (_await_park)
PARK_POLL_S = 0.02


def requeue_decided(run_id) -> None:
    """A decided (or expired) run goes on: ahead of new sends (``enqueue_run(requeued=True)``)."""
    executors.enqueue_run(run_id, requeued=True)


def tool_call_decide(*, tool_call: ToolCall, user, decision: str) -> ToolCall:
    """Approve or deny a call that waits for approval, under the approval rule it carries
    (:func:`approval_decide`: who may decide, two-person rule, expiry,
    countdown; 400/403/409 as ``ServiceError``). ``tool_call`` must come from
    ``tool_call_get_for_decider``."""
    return approval_decide(tool_call=tool_call, user=user, decision=decision)


def approval_decide(*, tool_call: ToolCall, user, decision: str) -> ToolCall:
    """Approve or deny a parked call under its rule; the last needed approval (or any deny)
    re-queues the run.

    Checked in this order: ``decision`` (400 ``invalid``); the call still waits (409
    ``not_pending``; past ``expires_at`` it is expired now and 409 ``expired``); the person
    decided it before (409 ``already_decided``); the rule allows them *now* (403
    ``not_allowed`` with the reason — a role removed since the request no longer counts, the
    requester never counts under the two-person rule); an approve of a dangerous call within
    ``COUNTDOWN_S`` of the request (409 ``countdown``). A refused decision is audited.
    """
    if decision not in ("approve", "deny"):
        raise DecisionRefused("invalid", _('decision must be "approve" or "deny".'), 400)
    run = tool_call.run
    if tool_call.status == ToolCall.Status.AWAITING_APPROVAL and run.status == Run.Status.RUNNING:
        _await_park(run)  # a decision sent the moment approval.requested arrived
    if tool_call.status == ToolCall.Status.AWAITING_APPROVAL and _past_expiry(tool_call):
        approval_expire(ledger=tool_call, requeue=requeue_decided)
        tool_call.refresh_from_db()
    if tool_call.status != ToolCall.Status.AWAITING_APPROVAL or run.status != Run.Status.AWAITING_APPROVAL:
        if tool_call.decision == "expired":
            raise DecisionRefused("expired", _("This approval request expired before anyone decided it."), 409)
        raise DecisionRefused("not_pending", _("This call is not waiting for a decision (it is %(status)s).") % {
            "status": tool_call.status}, 409)
    if tool_call.approvals.filter(user=user).exists():
        raise DecisionRefused("already_decided", _("You already decided this call; it needs another person."), 409)
    if decision == "approve" and (tool_call.approval or {}).get("rule") == CONNECT_RULE:
        # Only the consent callback settles a connect card (connection_settled): approving it
        # would run the tool without the person's account.
        raise DecisionRefused("connect_required", _("Connect %(server)s to continue: open the link on the card.")
                              % {"server": tool_call.approval.get("server_name", "")}, 409)
    check = decider_check(ledger=tool_call, run=run, user=user)
    if not check.allowed:
        audit_record(kind=AuditEvent.Kind.DECISION_REFUSED, user=user, run=run,
                     workspace_id=run.thread.workspace_id, thread_id=run.thread_id,
                     tool_name=tool_call.tool_name,
                     detail={"reason": check.reason, "role": check.role, "decision": decision,
                             "tool_call_id": str(tool_call.pk)})
        raise DecisionRefused("not_allowed", check.reason, 403)
    now = timezone.now()
    if decision == "approve" and tool_call.risk_level == "dangerous":
        ready_at = (tool_call.requested_at or now) + timedelta(seconds=COUNTDOWN_S)
        if now < ready_at:
            wait = (ready_at - now).total_seconds()
            raise DecisionRefused("countdown", _("Dangerous call: approve is possible in %(s)s s.") % {
                "s": number_format(wait, 1)}, 409)
    try:
        with transaction.atomic():
            lock_user_then_thread(thread_id=run.thread_id)  # a decision and a new message in the thread never interleave
            # Decisions on one thread are serialised by that lock: count what landed before it.
            fresh = ToolCall.objects.filter(pk=tool_call.pk).values("status", "approvals_so_far").first()
            if fresh is None or fresh["status"] != ToolCall.Status.AWAITING_APPROVAL:
                raise DecisionRefused("not_pending", _("This call was decided a moment ago."), 409)
            if tool_call.approvals.filter(user=user).exists():
                raise DecisionRefused("already_decided", _("You already decided this call; it needs another person."),
                                      409)
            so_far = fresh["approvals_so_far"]
            final = decision == "deny" or so_far + 1 >= tool_call.approvals_needed
            if final:
                if not lifecycle.tool_call_decide(ledger=tool_call, decision=decision, user=user, so_far=so_far):
                    raise DecisionRefused("not_pending", _("This call was decided a moment ago."), 409)
                if not lifecycle.run_requeue_decided(run_id=run.pk):
                    raise DecisionRefused("not_pending", _("This run is no longer waiting."), 409)
            elif not lifecycle.tool_call_count_approval(ledger=tool_call, so_far=so_far):
                raise DecisionRefused("not_pending", _("Someone else decided this call a moment ago."), 409)
            decision_record(tool_call, run, user=user, decision=decision, role=check.role, as_requester=check.as_requester,
                    so_far=so_far + (decision == "approve"))
            transaction.on_commit(lambda: _publish_decision(tool_call.pk, run.pk, user, decision, final))
    except IntegrityError as exc:  # the same person, twice at once: the unique row refused the second
        raise DecisionRefused("already_decided", _("You already decided this call; it needs another person."),
                              409) from exc
    tool_call.refresh_from_db()
    return tool_call


def _await_park(run: Run) -> None:
    """Wait (at most ``PARK_WAIT_S``, polling) while ``run`` is still ``running``: its backend
    published ``approval.requested`` and the driver parks the run right after (once the other
    calls of the same message are done), so a person who decides at once — the embedded
    mode delivers the event in a millisecond — is not refused ``not_pending``. Refreshes
    ``run.status``."""
    deadline = time.monotonic() + PARK_WAIT_S
    while run.status == Run.Status.RUNNING and time.monotonic() < deadline:
        time.sleep(PARK_POLL_S)
        run.refresh_from_db(fields=["status"])


def _past_expiry(ledger: ToolCall) -> bool:
    return ledger.expires_at is not None and ledger.expires_at <= timezone.now()


def _publish_decision(ledger_id, run_id, user, decision: str, final: bool) -> None:
    ledger = ToolCall.objects.select_related("run__thread", "run__user").get(pk=ledger_id)
    run = Run.objects.select_related("thread", "user").get(pk=run_id)
    emitter = RunEmitter.for_run(run)
    if final:
        emitter.emit("approval.resolved", tool_call_id=str(ledger.pk), decision=decision,
                     decided_by=user.get_username())
    else:
        fields = approval_fields(ledger, run, with_names=False)
        emitter.emit("approval.progress", tool_call_id=str(ledger.pk), approvals_so_far=fields["approvals_so_far"],
                     approvals_needed=fields["approvals_needed"], approved_by=fields["approved_by"],
                     waiting_text=fields["waiting_text"])
    emitter.close()
    inbox_notify(ledger=ledger, run=run, state="closed" if final else "progress")
    if final:
        requeue_decided(run.pk)


def connection_settled(*, tool_call_id, user, connected: bool, reason: str = "") -> bool:
    """The person whose call is parked on a "connect" card finished the consent.
    ``connected``: the call goes back to ``pending`` and the run resumes — the call passes every
    check again (approval included) and runs with the new token; the model is not asked again.
    Otherwise the call ends denied with ``reason`` as its result (the model is told why) and the
    run goes on. Only the run's own person settles their call: anyone else's id, a call not
    parked on a connect card, or one already settled or expired is ignored (False)."""
    ledger = (ToolCall.objects.select_related("run__thread", "run__user")
              .filter(pk=tool_call_id, run__user=user, status=ToolCall.Status.AWAITING_APPROVAL,
                      approval__rule=CONNECT_RULE).first())
    if ledger is None or _past_expiry(ledger):
        return False
    run = ledger.run
    _await_park(run)
    with transaction.atomic():
        lock_user_then_thread(thread_id=run.thread_id)
        if connected:
            moved = lifecycle.tool_call_unpark(ledger=ledger)
        else:
            moved = lifecycle.tool_call_decide(ledger=ledger, decision="deny", user=user)
            if moved:
                ToolCall.objects.filter(pk=ledger.pk).update(summary=reason[:500])
        if not moved or not lifecycle.run_requeue_decided(run_id=run.pk):
            transaction.set_rollback(True)
            return False
        decision = "approve" if connected else "deny"
        transaction.on_commit(lambda: _publish_decision(ledger.pk, run.pk, user, decision, True))
    return True
