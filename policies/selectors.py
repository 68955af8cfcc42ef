"""Reads of simulations, drafts and versions, scoped to the caller (``policies.services``
decides who is a policy admin of which workspace)."""

from __future__ import annotations

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from agents.approvals.policy import ApprovalRule, waiting_text
from chat.models import Membership
from chatplatform.errors import ServiceError

from .models import PolicyDraft, PolicySimulation, PolicyVersion
from .services import _an_id, policy_admin_workspace
from .simulation import APPROVAL, CHANGES, NO_ENV, RULE_KEYS, calls_for_groups, summary


def simulation_get_for_user(*, user, simulation_id) -> PolicySimulation:
    """A simulation of a workspace ``user`` is a policy admin of; 404 otherwise."""
    sim = PolicySimulation.objects.filter(pk=simulation_id).first() if _an_id(simulation_id) else None
    if sim is None:
        raise ServiceError("not_found", _("No such simulation."), 404)
    try:
        policy_admin_workspace(user=user, workspace_id=sim.workspace_id)
    except ServiceError as exc:
        raise ServiceError("not_found", _("No such simulation."), 404) from exc
    return sim


def _admin_workspace_ids(user) -> list[int] | None:
    """Workspaces whose drafts ``user`` may read (None: all, for a superuser)."""
    if user.is_superuser:
        return None
    return list(Membership.objects.filter(user=user, role__is_admin=True).values_list("workspace_id", flat=True))


def drafts_for_user(*, user) -> QuerySet:
    ids = _admin_workspace_ids(user)
    rows = PolicyDraft.objects.select_related("workspace", "created_by", "approved_by", "last_simulation")
    return rows if ids is None else rows.filter(workspace_id__in=ids)


def versions_for_user(*, user) -> QuerySet:
    """Versions are platform wide: any policy admin of some workspace reads them all."""
    if not user.is_superuser and not (user.has_perms(("agents.change_toolpolicy", "agents.change_approvalpolicy"))
                                      and Membership.objects.filter(user=user, role__is_admin=True).exists()):
        return PolicyVersion.objects.none()
    return PolicyVersion.objects.select_related("created_by", "approved_by", "applied_by", "draft")


def simulation_summary(sim: PolicySimulation) -> dict:
    return summary(sim.groups)


def _group_key(tool, role, env, recorded, agent, rule: dict | None) -> tuple:
    return (tool, role, env, recorded, agent, tuple(rule.get(k) for k in RULE_KEYS) if rule else None)


def _rule_from(data: dict) -> ApprovalRule:
    return ApprovalRule(rule=data["rule"], policy_id=None, approver_kind=data["approver_kind"], role=data["role"],
                        approvals_needed=int(data["approvals_needed"]), requester_counts=bool(data["requester_counts"]),
                        expires_s=0)


def _decision_for(decision: dict, requester: str) -> dict:
    out = {"outcome": decision["outcome"], "reason": decision.get("reason", "")}
    rule = decision.get("rule")
    if rule:
        out["rule"] = rule["rule"]
        try:
            out["approvers"] = waiting_text(_rule_from(rule), requester)
        except (KeyError, TypeError, ValueError):  # a recorded rule from before all fields were kept
            out["approvers"] = decision.get("approvers", "")
    return out


def simulation_calls_page(*, sim: PolicySimulation, change: str = "", page: int = 1,
                          page_size: int | None = None) -> dict:
    """One page of the calls whose decision changes (or of one ``change`` kind), newest
    first: ``{"count", "page", "pages", "results": [{"id", "created_at", "tool", "requester",
    "role", "env", "argument_keys", "thread_id", "run_id", "change", "recorded",
    "current", "simulated"}]}``; each decision is ``{"outcome", "reason", "rule"?, "approvers"?}`` with
    the approval card's words for that call's requester. 400 for an unknown ``change``."""
    if change and change not in CHANGES:
        raise ServiceError("invalid", _("change must be one of %(kinds)s.") % {"kinds": ", ".join(CHANGES)}, 400,
                           field="change")
    groups = [g for g in sim.groups if (g["change"] == change if change else g["change"] in CHANGES)]
    by_key = {_group_key(g["tool"], g["role"], g["env"], g["recorded"]["outcome"], g["agent_call"],
                         g["recorded"].get("rule")): g for g in groups}
    rows = calls_for_groups(workspace_id=sim.workspace_id, since=sim.covered_from, until=sim.until, groups=groups)
    paginator = Paginator(rows, page_size or settings.POLICY_SIM_PAGE_SIZE)
    current = paginator.get_page(page)
    results = []
    for call in current.object_list:
        env = call.env_context or NO_ENV
        rule = ({k: (call.approval or {}).get(k) for k in RULE_KEYS} if call.recorded == APPROVAL else None)
        group = by_key.get(_group_key(call.tool_name, call.role_now, env, call.recorded, bool(call.agent_call), rule))
        if group is None:  # a membership changed since the simulation: the call is in no group now
            continue
        requester = call.run.user.get_username()
        results.append({
            "id": str(call.pk), "created_at": call.created_at, "tool": call.tool_name, "requester": requester,
            "role": call.role_now, "env": env, "argument_keys": sorted((call.arguments or {}).keys())[:20],
            "thread_id": str(call.run.thread_id), "run_id": str(call.run_id), "change": group["change"],
            "recorded": _decision_for(group["recorded"], requester),
            "current": _decision_for(group["current"], requester),
            "simulated": _decision_for(group["simulated"], requester),
        })
    return {"count": paginator.count, "page": current.number, "pages": paginator.num_pages, "results": results}
