"""A policy set and the decision it makes for one call, as pure functions.

The live path decides a call in three steps, each a pure function of the policy and the
call's facts: the invocation guard (:func:`agents.pipeline.guard_verdict`), the risk
assessment (:func:`agents.risk.risk_assess`) and the approval rule
(:func:`agents.approvals.policy.rule_pick`). :func:`call_decide` composes exactly these, so
a simulation of a draft (``policies.simulation``) and the live loop cannot drift apart.

A :class:`PolicySet` is built from a *snapshot* (:func:`policy_snapshot`: the tool policy
rows and approval rules as plain JSON) — the live one, or the live one with a draft's changes
applied — through the same door the live path reads its rows
(:func:`agents.pipeline.policy_views_from_rows`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from agents.approvals.policy import ApprovalRule, RuleView, rule_pick
from agents.models import ApprovalPolicy, ToolPolicy
from agents.pipeline import PolicyView, guard_verdict, policy_views_from_rows
from agents.risk import risk_assess
from agents.tools import tool_sources

# Outcomes of one decision (a simulation counts calls by these).
REFUSED = "refused"
APPROVAL = "approval"
AUTO = "auto"


@dataclass(frozen=True)
class PolicySet:
    """``tools``: tool name → effective policy; ``rules``: approval rules, oldest first."""

    tools: Mapping[str, PolicyView]
    rules: tuple[RuleView, ...]
    default_expires_s: int


@dataclass(frozen=True)
class CallFacts:
    """What a decision depends on. ``role``: the caller's role name ("" no membership);
    ``tier``: ``prod|staging|dev`` or None; ``agent_call``: an agent provider's own approval
    request (agent_runs: always dangerous, not governed by tool policies)."""

    tool_name: str
    role: str
    tier: str | None
    mcp_server_slug: str = ""
    provider_id: int | None = None
    agent_call: bool = False


@dataclass(frozen=True)
class CallDecision:
    """``outcome``: ``refused | approval | auto``; ``reason``: the guard verdict when refused
    (``unknown | unavailable | disabled | permission_denied``); ``rule``: when approval."""

    outcome: str
    reason: str = ""
    risk: str = ""
    rule: ApprovalRule | None = None


def call_decide(policy_set: PolicySet, facts: CallFacts) -> CallDecision:
    """The live path's decision for ``facts`` under ``policy_set`` (see the module docstring).
    Per-tool call limits (usage) and a tool's own precheck are not policy and are not decided here."""
    if facts.agent_call:  # agents.agent_runs.backend._approval
        assessment = risk_assess(risk="dangerous", approval_mode="always", tier=facts.tier, permission_granted=True)
        rule = rule_pick(rules=policy_set.rules, tool_name=facts.tool_name, risk=assessment.risk, tier=facts.tier,
                         provider_id=facts.provider_id, default_expires_s=policy_set.default_expires_s)
        return CallDecision(APPROVAL, risk=assessment.risk, rule=rule)
    policy = policy_set.tools.get(facts.tool_name)
    spec = tool_sources.get(facts.tool_name)
    verdict = guard_verdict(policy=policy, role_name=facts.role, unavailable=spec.unavailable if spec else "")
    if verdict != "ok":
        return CallDecision(REFUSED, reason=verdict, risk=policy.risk if policy else "")
    assert policy is not None
    assessment = risk_assess(risk=policy.risk, approval_mode=policy.approval_mode, tier=facts.tier,
                             permission_granted=True)
    if not assessment.needs_approval:
        return CallDecision(AUTO, risk=assessment.risk)
    rule = rule_pick(rules=policy_set.rules, tool_name=facts.tool_name, risk=assessment.risk, tier=facts.tier,
                     mcp_server_slug=facts.mcp_server_slug, default_expires_s=policy_set.default_expires_s)
    return CallDecision(APPROVAL, risk=assessment.risk, rule=rule)


def mcp_server_slug_of(tool_name: str) -> str:
    """The MCP server a registered tool comes from ("" for other or unknown tools)."""
    spec = tool_sources.get(tool_name)
    return spec.source[4:] if spec is not None and spec.source.startswith("mcp:") else ""


# -- snapshots -------------------------------------------------------------------------------
def policy_snapshot() -> dict:
    """The live policy set as plain JSON: ``{"tool_policies": {tool: {"enabled", "risk",
    "approval_mode", "allowed_roles" (sorted names), "timeout_s", "affinity_object_types"}},
    "approval_rules": {name: {"enabled", "tool", "mcp_server", "provider_id", "risk",
    "env_tier", "approver_kind", "role", "approvals_needed", "requester_counts", "expires_s",
    "order"}}}``. ``order``: the rule's rank by age (the tie-break of ``rule_pick``)."""
    tools: dict[str, dict] = {}
    for row in ToolPolicy.objects.prefetch_related("allowed_roles").order_by("tool_name"):
        tools[row.tool_name] = {
            "enabled": row.enabled, "risk": row.risk, "approval_mode": row.approval_mode,
            "allowed_roles": sorted(r.name for r in row.allowed_roles.all()), "timeout_s": row.timeout_s,
            "affinity_object_types": list(row.affinity_object_types or []),
        }
    rules: dict[str, dict] = {}
    rows = ApprovalPolicy.objects.select_related("tool_policy", "mcp_server", "approver_role").order_by(
        "created_at", "pk")
    for order, row in enumerate(rows):
        view = RuleView.from_row(row)
        rules[row.name] = {
            "enabled": view.enabled, "tool": view.tool_name, "mcp_server": view.mcp_server_slug,
            "provider_id": view.provider_id, "risk": view.risk, "env_tier": view.env_tier,
            "approver_kind": view.approver_kind, "role": view.role, "approvals_needed": view.approvals_needed,
            "requester_counts": view.requester_counts, "expires_s": view.expires_s, "order": order,
            "pk": row.pk,
        }
    return {"tool_policies": tools, "approval_rules": rules}


def snapshot_fingerprint(snapshot: dict) -> str:
    """A short hash of a snapshot's decision-relevant content (rule ids left out: a rule
    re-created with the same fields decides the same)."""
    rules = {name: {k: v for k, v in rule.items() if k != "pk"} for name, rule in snapshot["approval_rules"].items()}
    text = json.dumps({"t": snapshot["tool_policies"], "r": rules}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def policy_set_from_snapshot(snapshot: dict) -> PolicySet:
    """The :class:`PolicySet` a snapshot stands for (tool defaults for registered tools
    without a row, as live)."""
    rows = {
        name: ((name, p["enabled"], p["risk"], p.get("affinity_object_types") or [], p.get("timeout_s", 30),
                p["approval_mode"]), frozenset(p["allowed_roles"]))
        for name, p in snapshot["tool_policies"].items()
    }
    rules = sorted(snapshot["approval_rules"].items(), key=lambda item: item[1].get("order", 1 << 30))
    return PolicySet(
        tools=policy_views_from_rows(rows),
        rules=tuple(RuleView(pk=r.get("pk"), name=name, enabled=r["enabled"], tool_name=r["tool"],
                             mcp_server_slug=r["mcp_server"], provider_id=r["provider_id"], risk=r["risk"],
                             env_tier=r["env_tier"], approver_kind=r["approver_kind"], role=r["role"],
                             approvals_needed=r["approvals_needed"], requester_counts=r["requester_counts"],
                             expires_s=r["expires_s"]) for name, r in rules),
        default_expires_s=settings.APPROVAL_DEFAULT_EXPIRES_S,
    )
