"""The loop's side of approvals: park a call under the rule that fires for it
(``approval_request``), the rule's fields a viewer sees (``approval_fields``), the ledger and
audit row of one decision (``decision_record``) and the inbox notice (``inbox_notify``).
Deciding is a use case (``agents.services.decisions``); expiry is the reaper's
(``agents.approvals.expiry``)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _

from agents.audit import audit_record
from agents.event_types import check_event
from agents.models import ApprovalDecision, AuditEvent, Run, ToolCall
from agents.runs import lifecycle
from chat.selectors import memberships_in_workspace
from chatplatform.errors import ServiceError

from .policy import CONNECT, ApprovalRule, candidates, rule_for, waiting_text

logger = logging.getLogger(__name__)

INBOX_MESSAGE_TYPE = "inbox.changed"
CONNECT_RULE = CONNECT  # ToolCall.approval["rule"] of a call parked until its person connects


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
    data = ledger.approval or {}
    if data.get("rule") == CONNECT_RULE:
        # A "connect" card: only the requester can connect their own account.
        return {
            "rule": CONNECT_RULE, "approvers": requester, "approver_names": [requester] if with_names else [],
            "approvals_needed": 1, "approvals_so_far": 0, "approved_by": [],
            "expires_at": ledger.expires_at.isoformat() if ledger.expires_at else None, "requester": requester,
            "waiting_text": _("Connect %(server)s to continue.") % {"server": data.get("server_name", "")},
            "connect": {"server": data.get("server", ""), "name": data.get("server_name", ""),
                        "url": f"{data.get('url', '')}?tool_call={ledger.pk}"},
        }
    return {
        "rule": rule.rule,
        "approvers": approvers_phrase(rule, requester),
        "approver_names": names,
        "approvals_needed": ledger.approvals_needed or rule.approvals_needed,
        "approvals_so_far": ledger.approvals_so_far,
        "approved_by": list(ledger.approvals.filter(decision="approve").values_list("username", flat=True)),
        "expires_at": ledger.expires_at.isoformat() if ledger.expires_at else None,
        "requester": requester,
        "waiting_text": waiting_text(rule, requester),
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


def connect_request(*, ledger: ToolCall, run: Run, emitter, arguments_summary: str, assessment, needed) -> bool:
    """Park ``ledger`` until the run's person connects their account to ``needed.server``
    (``agents.tools.ConnectRequired``) and publish ``approval.requested`` with ``connect``
    ({server, name, url}). Only the requester may settle it (the consent callback, or deny);
    it expires after ``APPROVAL_DEFAULT_EXPIRES_S``. False when another attempt parked it first."""
    expires_s = int(settings.APPROVAL_DEFAULT_EXPIRES_S)
    rule = {"rule": CONNECT_RULE, "policy_id": None, "approver_kind": "requester", "role": "", "approvals_needed": 1,
            "requester_counts": True, "expires_s": expires_s, "server": needed.server,
            "server_name": needed.server_name, "url": needed.url}
    if not lifecycle.tool_call_park(ledger=ledger, approval=rule, approvals_needed=1, expires_s=expires_s):
        return False
    fields = approval_fields(ledger, run)
    fields.pop("approved_by")
    emitter.emit(
        "approval.requested", tool_call_id=str(ledger.pk), tool=ledger.tool_name,
        arguments_summary=arguments_summary, risk=assessment.risk, risk_level=assessment.risk_level,
        env_context=assessment.env_context, dangerous=False, countdown_s=0, **fields,
    )
    inbox_notify(ledger=ledger, run=run, state="pending")
    return True


def decision_record(ledger: ToolCall, run: Run, *, user, decision: str, role: str, as_requester: bool, so_far: int) -> None:
    """The ledger row and the audit event of one person's decision."""
    ApprovalDecision.objects.create(tool_call=ledger, user=user, username=user.get_username() if user else "",
                                    role=role, as_requester=as_requester, decision=decision)
    audit_record(
        kind=AuditEvent.Kind.APPROVAL_DECIDED if user else AuditEvent.Kind.APPROVAL_EXPIRED,
        user=user, workspace_id=run.thread.workspace_id, thread_id=run.thread_id, run=run,
        tool_name=ledger.tool_name,
        detail={"tool_call_id": str(ledger.pk), "decision": decision, "role": role, "as_requester": as_requester,
                "approvals_so_far": so_far, "approvals_needed": ledger.approvals_needed,
                "rule": (ledger.approval or {}).get("rule", "")},
    )


# -- notify ----------------------------------------------------------------------------------
def inbox_notify(*, ledger: ToolCall, run: Run, state: str) -> None:
    """``inbox.changed {tool_call_id, state}`` (``pending`` | ``progress`` | ``closed``) to the
    per-user channel group of every person who may decide the call, its requester and those
    who decided it already — after the transaction commits. Their sockets (the inbox, the
    rail badge, thread pages) re-read ``GET /api/v1/approvals/``."""
    user_ids = {u.pk for u in candidates(ledger=ledger, run=run)} if state != "closed" else set()
    if state == "closed":  # whoever could have decided it a moment ago: the rule's whole group
        rule = ApprovalRule.from_ledger(ledger)
        members = memberships_in_workspace(workspace_id=run.thread.workspace_id)
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
