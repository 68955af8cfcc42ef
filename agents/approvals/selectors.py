"""Reads for approvals, scoped to the caller: the inbox and the decider's fetch."""

from __future__ import annotations

from django.http import Http404

from agents.models import ToolCall
from chat.selectors import memberships_for_user, thread_get_for_user

from .policy import ApprovalRule, K, decider_check


def tool_call_get_for_decider(*, user, tool_call_id) -> ToolCall:
    """The call if ``user`` may see its thread, or is a member of its workspace and the call
    carries a rule for a group of approvers (a named role, workspace admins) — whether they
    may decide is the decision's business (403 with the reason). Http404 otherwise, also for
    malformed ids."""
    try:
        tool_call = ToolCall.objects.select_related("run__thread", "run__user", "decided_by").get(pk=tool_call_id)
    except Exception as exc:  # unknown or malformed: one answer for all
        raise Http404("No such tool call.") from exc
    try:
        # Metadata is enough to reach the call: whether they may decide is the decision's business.
        thread_get_for_user(user=user, thread_id=tool_call.run.thread_id, metadata=True)
        return tool_call
    except Http404:
        pass
    rule = ApprovalRule.from_ledger(tool_call)
    if (tool_call.approval and rule.approver_kind != K.REQUESTER
            and memberships_for_user(user=user, workspace_id=tool_call.run.thread.workspace_id).exists()):
        return tool_call
    raise Http404("No such tool call.")


def inbox_for_user(*, user) -> list[ToolCall]:
    """Every call waiting for approval that ``user`` may decide now and has not decided yet,
    across their workspaces, oldest request first."""
    workspaces = memberships_for_user(user=user).values("workspace_id")
    rows = (ToolCall.objects.filter(status=ToolCall.Status.AWAITING_APPROVAL, run__status="awaiting_approval",
                                    run__thread__workspace_id__in=workspaces)
            .exclude(approvals__user=user)
            .select_related("run__thread__workspace", "run__user", "decided_by")
            .order_by("requested_at", "created_at"))
    return [row for row in rows if decider_check(ledger=row, run=row.run, user=user).allowed]
