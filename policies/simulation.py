"""Replay a workspace's recorded tool calls against a draft policy set.

A call's decision depends only on a few facts (``agents.policy_set.CallFacts``: tool, the
caller's role, the environment tier, its MCP server or agent provider), so the ledger is
*aggregated in the database*: one ``GROUP BY`` per chunk of at most
``POLICY_SIM_CHUNK_ROWS`` calls, newest first, over (tool, role, tier, recorded decision,
recorded rule). Each distinct group is decided twice with ``agents.policy_set.call_decide`` —
the live path's own functions — under the draft and under the live set; a group's ``change``
compares the two (what applying the draft would change), and ``recorded_differs`` compares the
live set with the decision recorded on the calls (the replay's fidelity). The individual calls
of a group are read back page by page (:func:`calls_for_groups`), never copied.

Bounds: at most ``POLICY_SIM_MAX_ROWS`` calls and ``POLICY_SIM_MAX_SECONDS`` of scanning;
past either, the result is ``truncated`` (``truncated_reason`` ``rows`` | ``time``) and covers
the newest calls from ``covered_from`` on.

The caller's role is their role in the workspace *now* (the ledger does not keep the role at
the time); someone no longer a member has role "" and every governed tool refuses them.
The recorded decision: ``refused`` (permission denied), ``approval`` (it waited for
approval, under the rule stored on the call), ``auto`` (assessed, ran without approval) or
``skipped`` (stopped before the policy decided: invalid arguments, unknown or disabled tool —
not compared). Calls parked for a per-tool call limit (usage) look like ``approval``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Case, CharField, Count, F, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.approvals.policy import ApprovalRule, waiting_text
from agents.models import Provider, ToolCall
from agents.policy_set import (
    APPROVAL,
    AUTO,
    REFUSED,
    CallDecision,
    CallFacts,
    PolicySet,
    call_decide,
    mcp_server_slug_of,
)
from chat.models import Membership

SKIPPED = "skipped"
SAME = "same"
NOW_REFUSED = "now_refused"
NOW_APPROVAL = "now_needs_approval"
NOW_AUTO = "now_runs_without_approval"
APPROVERS_CHANGED = "approvers_changed"
CHANGES = (NOW_REFUSED, NOW_APPROVAL, NOW_AUTO, APPROVERS_CHANGED)
RULE_KEYS = ("rule", "approver_kind", "role", "approvals_needed", "requester_counts")
NO_ENV = "none"


def ledger_for_workspace(*, workspace_id: int) -> QuerySet:
    """The workspace's ledger rows with the facts a decision needs annotated: ``role_now``,
    ``recorded``, ``agent_call``, ``agent_provider``. Other workspaces' calls never appear."""
    role_now = Subquery(Membership.objects.filter(user_id=OuterRef("run__user_id"),
                                                  workspace_id=OuterRef("run__thread__workspace_id"))
                        .values("role__name")[:1])
    return (ToolCall.objects.filter(run__thread__workspace_id=workspace_id)
            .annotate(role_now=Coalesce(role_now, Value(""), output_field=CharField()),
                      recorded=Case(When(status=ToolCall.Status.PERMISSION_DENIED, then=Value(REFUSED)),
                                    When(requested_at__isnull=False, then=Value(APPROVAL)),
                                    When(~Q(risk=""), then=Value(AUTO)), default=Value(SKIPPED),
                                    output_field=CharField()),
                      agent_call=Case(When(run__provider__kind=Provider.Kind.AGENT_RUNS, then=Value("1")),
                                      default=Value(""), output_field=CharField()),
                      agent_provider=Case(When(run__provider__kind=Provider.Kind.AGENT_RUNS,
                                               then=F("run__provider_id")), default=None)))


GROUP_FIELDS = ("tool_name", "role_now", "env_context", "recorded", "agent_call", "agent_provider",
                *(f"approval__{k}" for k in RULE_KEYS))


def decision_dict(decision: CallDecision, requester: str) -> dict:
    """A decision as JSON, with the approval card's own words (``waiting_text``)."""
    out: dict = {"outcome": decision.outcome, "reason": decision.reason}
    if decision.rule is not None:
        out["rule"] = {k: getattr(decision.rule, k) for k in RULE_KEYS}
        out["approvers"] = waiting_text(decision.rule, requester)
    return out


def recorded_dict(group: dict, requester: str) -> dict:
    out: dict = {"outcome": group["recorded"], "reason": "permission_denied" if group["recorded"] == REFUSED else ""}
    if group["recorded"] == APPROVAL:
        rule = {k: group[f"approval__{k}"] for k in RULE_KEYS}
        out["rule"] = rule
        full = ApprovalRule(rule=rule["rule"] or "Approval", policy_id=None,
                            approver_kind=rule["approver_kind"] or "requester", role=rule["role"] or "",
                            approvals_needed=int(rule["approvals_needed"] or 1),
                            requester_counts=bool(rule["requester_counts"] if rule["requester_counts"] is not None
                                                  else True), expires_s=0)
        out["approvers"] = waiting_text(full, requester)
    return out


def change_of(recorded: dict, simulated: dict) -> str:
    """How decision ``simulated`` differs from ``recorded`` (the live set's, or the one
    recorded): ``same`` or one of :data:`CHANGES`."""
    if recorded["outcome"] != simulated["outcome"]:
        return {REFUSED: NOW_REFUSED, APPROVAL: NOW_APPROVAL, AUTO: NOW_AUTO}[simulated["outcome"]]
    if recorded["outcome"] == APPROVAL:
        before, after = recorded["rule"], simulated["rule"]
        same = all((before.get(k) or "") == (after.get(k) or "") for k in ("rule", "approver_kind", "role")) and (
            int(before.get("approvals_needed") or 1) == after["approvals_needed"]
            and (before.get("requester_counts") is not False) == after["requester_counts"])
        return SAME if same else APPROVERS_CHANGED
    return SAME


@dataclass
class SimulationResult:
    """``groups``: see ``PolicySimulation.groups``; ``covered_from``: the oldest call counted."""

    groups: list[dict] = field(default_factory=list)
    rows_scanned: int = 0
    truncated: bool = False
    truncated_reason: str = ""
    covered_from: datetime | None = None
    duration_ms: int = 0


def simulate(*, workspace_id: int, since: datetime, until: datetime, draft: PolicySet, live: PolicySet,
             max_rows: int | None = None, max_seconds: float | None = None, chunk_rows: int | None = None,
             clock=time.monotonic) -> SimulationResult:
    """Replay the workspace's calls in [``since``, ``until``) (newest first, in chunks) under
    ``draft`` and ``live``. Bounds default to the ``POLICY_SIM_*`` settings."""
    max_rows = max_rows or settings.POLICY_SIM_MAX_ROWS
    max_seconds = max_seconds or settings.POLICY_SIM_MAX_SECONDS
    chunk_rows = chunk_rows or settings.POLICY_SIM_CHUNK_ROWS
    started = clock()
    ledger = ledger_for_workspace(workspace_id=workspace_id).filter(created_at__gte=since)
    counts: dict[tuple, int] = {}
    result = SimulationResult(covered_from=until)
    cursor = until
    while True:
        if result.rows_scanned >= max_rows:
            if ledger.filter(created_at__lt=cursor).exists():
                result.truncated, result.truncated_reason = True, "rows"
            else:
                result.covered_from = since
            break
        if clock() - started > max_seconds:
            result.truncated, result.truncated_reason = True, "time"
            break
        take = min(chunk_rows, max_rows - result.rows_scanned)
        window = ledger.filter(created_at__lt=cursor)
        # The chunk's lower edge: the created_at of its ``take``-th newest call (an index walk).
        edges = list(window.order_by("-created_at").values_list("created_at", flat=True)[take - 1:take])
        edge = edges[0] if edges else None
        chunk = window.filter(created_at__gte=edge) if edge is not None else window
        scanned = 0
        for row in chunk.order_by().values(*GROUP_FIELDS).annotate(n=Count("id")):
            n = row.pop("n")
            key = tuple(row[f] for f in GROUP_FIELDS)
            counts[key] = counts.get(key, 0) + n
            scanned += n
        result.rows_scanned += scanned
        if edge is None:
            result.covered_from = since
            break
        cursor = result.covered_from = edge
    result.groups = _decide_groups(counts, draft=draft, live=live)
    result.duration_ms = int((clock() - started) * 1000)
    return result


def _decide_groups(counts: dict[tuple, int], *, draft: PolicySet, live: PolicySet) -> list[dict]:
    requester = _("the requester")
    groups = []
    for key, n in counts.items():
        group = dict(zip(GROUP_FIELDS, key, strict=True))
        facts = CallFacts(tool_name=group["tool_name"], role=group["role_now"], tier=group["env_context"] or None,
                          mcp_server_slug=mcp_server_slug_of(group["tool_name"]),
                          provider_id=group["agent_provider"], agent_call=bool(group["agent_call"]))
        recorded = recorded_dict(group, requester)
        simulated = decision_dict(call_decide(draft, facts), requester)
        current = decision_dict(call_decide(live, facts), requester)
        groups.append({
            "tool": group["tool_name"], "role": group["role_now"], "env": group["env_context"] or NO_ENV,
            "agent_call": bool(group["agent_call"]), "provider_id": group["agent_provider"],
            "recorded": recorded, "simulated": simulated, "current": current,
            "change": SKIPPED if recorded["outcome"] == SKIPPED else change_of(current, simulated),
            "recorded_differs": recorded["outcome"] != SKIPPED and change_of(recorded, current) != SAME,
            "count": n,
        })
    groups.sort(key=lambda g: (g["change"] in (SAME, SKIPPED), g["tool"], g["role"], g["env"], -g["count"]))
    return groups


def summary(groups: list[dict]) -> dict:
    """Counts for the result page and API: ``{"total", "by_change": {change: n}, "by_tool":
    {tool: {change: n}}, "by_role": {...}, "by_env": {...}, "recorded_differs": n}``.
    ``recorded_differs``: calls the live set decides differently today than when they were
    made (the policy or the caller's role changed since); 0 means the replay is faithful."""
    out: dict = {"total": 0, "by_change": {}, "by_tool": {}, "by_role": {}, "by_env": {}, "recorded_differs": 0}
    for g in groups:
        n, change = g["count"], g["change"]
        out["total"] += n
        out["by_change"][change] = out["by_change"].get(change, 0) + n
        for dim, value in (("by_tool", g["tool"]), ("by_role", g["role"] or "-"), ("by_env", g["env"])):
            bucket = out[dim].setdefault(value, {})
            bucket[change] = bucket.get(change, 0) + n
        if g["recorded_differs"]:
            out["recorded_differs"] += n
    return out


def calls_for_groups(*, workspace_id: int, since: datetime, until: datetime, groups: list[dict]) -> QuerySet:
    """The ledger rows of ``groups`` (newest first), for the paged call list."""
    match = Q(pk__in=[])
    for g in groups:
        q = Q(tool_name=g["tool"], role_now=g["role"], env_context="" if g["env"] == NO_ENV else g["env"],
              recorded=g["recorded"]["outcome"], agent_call="1" if g["agent_call"] else "")
        if g["recorded"]["outcome"] == APPROVAL:
            for k, v in g["recorded"]["rule"].items():
                q &= Q(**{f"approval__{k}__isnull": True}) if v is None else Q(**{f"approval__{k}": v})
        match |= q
    return (ledger_for_workspace(workspace_id=workspace_id)
            .filter(created_at__gte=since, created_at__lt=until).filter(match)
            .select_related("run__user", "run__thread").order_by("-created_at", "pk"))


def window(days: int) -> tuple[datetime, datetime]:
    """[now - ``days``, now)."""
    until = timezone.now()
    return until - timedelta(days=days), until
