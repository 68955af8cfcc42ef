"""Writes for approvals: parking a call under its rule, deciding (one or two approvers),
expiring, and telling every person who may decide (their per-user channel group).

Status changes go through ``agents.runs.lifecycle`` only; this module adds the decision
ledger (``ApprovalDecision``), the audit trail (``AuditEvent`` ``approval_decided`` /
``approval_expired``), the run events (``approval.requested``, ``approval.progress``,
``approval.resolved``) and the inbox notices (``inbox.changed``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Min
from django.utils import timezone

from agents.event_types import check_event
from agents.models import ApprovalDecision, AuditEvent, Run, ToolCall
from agents.risk import COUNTDOWN_S
from agents.runs import lifecycle
from chatplatform.errors import ServiceError

from .policy import ApprovalRule, candidates, decider_check, rule_for, waiting_text

logger = logging.getLogger(__name__)

INBOX_MESSAGE_TYPE = "inbox.changed"
PARK_WAIT_S = 3.0  # a decision that raced the run's park waits this long for it (_await_park)
PARK_POLL_S = 0.02


class DecisionRefused(ServiceError):
    """A decision the server refuses: 400 ``invalid``, 403 ``not_allowed``, 409
    ``not_pending`` / ``expired`` / ``already_decided`` / ``countdown``."""


# -- shown fields ----------------------------------------------------------------------------
def approval_fields(ledger: ToolCall, run: Run, *, with_names: bool = True) -> dict:
    """The approval part of a parked (or decided) call, for events, REST and the inbox:
    ``{"rule", "approvers" (plain words), "approver_names" (usernames who may decide now,
    up to 20), "approvals_needed", "approvals_so_far", "approved_by" ([username]), "expires_at"
    (ISO 8601 or None), "requester", "waiting_text"}``."""
    rule = ApprovalRule.from_ledger(ledger)
    requester = run.user.get_username()
    from .policy import approvers_phrase

    names = [u.get_username() for u in candidates(ledger=ledger, run=run)[:20]] if with_names else []
    return {
        "rule": rule.rule,
        "approvers": approvers_phrase(rule, requester),
        "approver_names": names,
        "approvals_needed": ledger.approvals_needed or rule.approvals_needed,
        "approvals_so_far": ledger.approvals_so_far,
        "approved_by": list(ledger.approvals.filter(decision="approve").values_list("username", flat=True)),
        "expires_at": ledger.expires_at.isoformat() if ledger.expires_at else None,
        "requester": requester,
        "waiting_text": waiting_text(rule, requester, ledger.approvals_so_far),
    }


# -- park ------------------------------------------------------------------------------------
def approval_request(*, ledger: ToolCall, run: Run, emitter, risk: str, tier: str | None, arguments_summary: str,
                     assessment, mcp_server_slug: str = "", provider_id=None, **extra) -> bool:
    """Park ``ledger`` under the rule that fires for it and publish ``approval.requested``
    (with the rule's fields and ``extra``: ``description``/``reason``), then notify every
    person who may decide. False when another attempt parked (or decided) it first."""
    rule = rule_for(tool_name=ledger.tool_name, risk=risk, tier=tier, mcp_server_slug=mcp_server_slug,
                    provider_id=provider_id)
    if not lifecycle.tool_call_park(ledger=ledger, approval=rule.as_dict(), approvals_needed=rule.approvals_needed,
                                    expires_s=rule.expires_s):
        return False
    fields = approval_fields(ledger, run)
    fields.pop("approved_by")
    emitter.emit(
        "approval.requested", tool_call_id=str(ledger.pk), tool=ledger.tool_name,
        arguments_summary=arguments_summary, risk=assessment.risk, risk_level=assessment.risk_level,
        env_context=assessment.env_context, dangerous=assessment.dangerous, countdown_s=assessment.countdown_s,
        **fields, **extra,
    )
    inbox_notify(ledger=ledger, run=run, state="pending")
    return True


# -- decide ----------------------------------------------------------------------------------
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
    from agents.services import _lock  # the send path's locks (user → thread)

    if decision not in ("approve", "deny"):
        raise DecisionRefused("invalid", 'decision must be "approve" or "deny".', 400)
    run = tool_call.run
    if tool_call.status == ToolCall.Status.AWAITING_APPROVAL and run.status == Run.Status.RUNNING:
        _await_park(run)  # a decision sent the moment approval.requested arrived
    if tool_call.status == ToolCall.Status.AWAITING_APPROVAL and _past_expiry(tool_call):
        approval_expire(ledger=tool_call)
        tool_call.refresh_from_db()
    if tool_call.status != ToolCall.Status.AWAITING_APPROVAL or run.status != Run.Status.AWAITING_APPROVAL:
        if tool_call.decision == "expired":
            raise DecisionRefused("expired", "This approval request expired before anyone decided it.", 409)
        raise DecisionRefused("not_pending", f"This call is not waiting for a decision (it is {tool_call.status}).", 409)
    if tool_call.approvals.filter(user=user).exists():
        raise DecisionRefused("already_decided", "You already decided this call; it needs another person.", 409)
    check = decider_check(ledger=tool_call, run=run, user=user)
    if not check.allowed:
        AuditEvent.objects.create(kind=AuditEvent.Kind.DECISION_REFUSED, user=user, run=run,
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
            raise DecisionRefused("countdown", f"Dangerous call: approve is possible in {wait:.1f} s.", 409)
    try:
        with transaction.atomic():
            _lock(thread_id=run.thread_id)  # a decision and a new message in the thread never interleave
            # Decisions on one thread are serialised by that lock: count what landed before it.
            fresh = ToolCall.objects.filter(pk=tool_call.pk).values("status", "approvals_so_far").first()
            if fresh is None or fresh["status"] != ToolCall.Status.AWAITING_APPROVAL:
                raise DecisionRefused("not_pending", "This call was decided a moment ago.", 409)
            if tool_call.approvals.filter(user=user).exists():
                raise DecisionRefused("already_decided", "You already decided this call; it needs another person.",
                                      409)
            so_far = fresh["approvals_so_far"]
            final = decision == "deny" or so_far + 1 >= tool_call.approvals_needed
            if final:
                if not lifecycle.tool_call_decide(ledger=tool_call, decision=decision, user=user, so_far=so_far):
                    raise DecisionRefused("not_pending", "This call was decided a moment ago.", 409)
                if not lifecycle.run_requeue_decided(run_id=run.pk):
                    raise DecisionRefused("not_pending", "This run is no longer waiting.", 409)
            elif not lifecycle.tool_call_count_approval(ledger=tool_call, so_far=so_far):
                raise DecisionRefused("not_pending", "Someone else decided this call a moment ago.", 409)
            _record(tool_call, run, user=user, decision=decision, role=check.role, as_requester=check.as_requester,
                    so_far=so_far + (decision == "approve"))
            transaction.on_commit(lambda: _publish_decision(tool_call.pk, run.pk, user, decision, final))
    except IntegrityError as exc:  # the same person, twice at once: the unique row refused the second
        raise DecisionRefused("already_decided", "You already decided this call; it needs another person.", 409) from exc
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


def _record(ledger: ToolCall, run: Run, *, user, decision: str, role: str, as_requester: bool, so_far: int) -> None:
    """The ledger row and the audit event of one person's decision."""
    ApprovalDecision.objects.create(tool_call=ledger, user=user, username=user.get_username() if user else "",
                                    role=role, as_requester=as_requester, decision=decision)
    AuditEvent.objects.create(
        kind=AuditEvent.Kind.APPROVAL_DECIDED if user else AuditEvent.Kind.APPROVAL_EXPIRED,
        user=user, workspace_id=run.thread.workspace_id, thread_id=run.thread_id, run=run,
        tool_name=ledger.tool_name,
        detail={"tool_call_id": str(ledger.pk), "decision": decision, "role": role, "as_requester": as_requester,
                "approvals_so_far": so_far, "approvals_needed": ledger.approvals_needed,
                "rule": (ledger.approval or {}).get("rule", "")},
    )


def _publish_decision(ledger_id, run_id, user, decision: str, final: bool) -> None:
    from agents.events import RunEmitter
    from agents.runs.executors import enqueue_run

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
        enqueue_run(run.pk, requeued=True)


# -- expire ----------------------------------------------------------------------------------
def approval_expire(*, ledger: ToolCall) -> bool:
    """A parked call past its ``expires_at``: denied with decision ``expired`` (the model gets
    an "expired" error result), the run re-queued so it goes on, ``approval.resolved``
    (decision ``expired``) published and the inbox told. False when it was decided (or
    expired) meanwhile."""
    from agents.events import RunEmitter
    from agents.runs.executors import enqueue_run

    run = Run.objects.select_related("thread", "user").get(pk=ledger.run_id)
    waited = int((ledger.expires_at - ledger.requested_at).total_seconds()) if ledger.requested_at else 0
    summary = (f"Not executed: the approval request expired after {waited} s without a decision "
               f"({(ledger.approval or {}).get('rule', 'approval')}). Nothing was changed.")
    with transaction.atomic():
        if not lifecycle.tool_call_expire_request(ledger=ledger, summary=summary):
            return False
        _record(ledger, run, user=None, decision="expired", role="", as_requester=False, so_far=ledger.approvals_so_far)
        requeued = lifecycle.run_requeue_decided(run_id=run.pk)

        def publish() -> None:
            emitter = RunEmitter.for_run(Run.objects.get(pk=run.pk))
            emitter.emit("approval.resolved", tool_call_id=str(ledger.pk), decision="expired", decided_by=None)
            emitter.close()
            inbox_notify(ledger=ledger, run=run, state="closed")
            if requeued:
                enqueue_run(run.pk, requeued=True)

        transaction.on_commit(publish)
    return True


def approvals_expire_due() -> list[str]:
    """Expire every parked call whose ``expires_at`` has passed (the reaper calls this each
    pass). Returns the ledger ids expired."""
    due = ToolCall.objects.filter(status=ToolCall.Status.AWAITING_APPROVAL, expires_at__lte=timezone.now())
    return [str(row.pk) for row in due if approval_expire(ledger=row)]


def approvals_earliest_expiry() -> datetime | None:
    """The earliest ``expires_at`` of a call awaiting approval (None: none expires), so the
    reaper passes when it comes. One aggregate query on the ``(status, expires_at)`` index."""
    return ToolCall.objects.filter(status=ToolCall.Status.AWAITING_APPROVAL, expires_at__isnull=False).aggregate(
        first=Min("expires_at"))["first"]


# -- notify ----------------------------------------------------------------------------------
def inbox_notify(*, ledger: ToolCall, run: Run, state: str) -> None:
    """``inbox.changed {tool_call_id, state}`` (``pending`` | ``progress`` | ``closed``) to the
    per-user channel group of every person who may decide the call, its requester and those
    who decided it already — after the transaction commits. Their sockets (the inbox, the
    rail badge, thread pages) re-read ``GET /api/v1/approvals/``."""
    user_ids = {u.pk for u in candidates(ledger=ledger, run=run)} if state != "closed" else set()
    if state == "closed":  # whoever could have decided it a moment ago: the rule's whole group
        from chat.models import Membership

        rule = ApprovalRule.from_ledger(ledger)
        members = Membership.objects.filter(workspace_id=run.thread.workspace_id)
        members = members.filter(role__name=rule.role) if rule.approver_kind == "role" else members.filter(
            role__is_admin=True)
        user_ids |= set(members.values_list("user_id", flat=True))
    user_ids.add(run.user_id)
    user_ids |= set(ledger.approvals.exclude(user=None).values_list("user_id", flat=True))
    fields = {"tool_call_id": str(ledger.pk), "state": state}
    check_event(INBOX_MESSAGE_TYPE, fields)
    event = {"type": INBOX_MESSAGE_TYPE, **fields}

    def send() -> None:
        from channels.layers import get_channel_layer

        from chat.access import user_group
        from chatplatform.loops import run_coroutine

        layer = get_channel_layer()
        if layer is None:
            return
        for uid in user_ids:
            try:
                run_coroutine(layer.group_send(user_group(uid), {"type": INBOX_MESSAGE_TYPE, "event": event}),
                              timeout=5)
            except Exception:  # a notice is best effort: the inbox page also re-reads on open
                logger.exception("could not notify user %s of approval %s", uid, ledger.pk)

    transaction.on_commit(send)
