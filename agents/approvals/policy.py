"""Approval policy as plain functions: which rule a call falls under, who may decide it now,
and how a card says so.

* :func:`rule_pick` / :func:`rule_for` — the most specific enabled ``ApprovalPolicy`` for a call (tool > MCP
  server / agent provider > environment tier > risk; ties: the oldest), or the built-in
  :data:`FALLBACK` when none matches.
* :func:`decider_check` — whether a person may decide a parked call *now*: their role is read
  from their membership at decision time, so someone removed from a role can no longer decide.
* :func:`candidates` — the people who may decide a parked call (notifications, the card's
  "who can approve").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils.translation import gettext, gettext_noop, ngettext

from agents.models import ApprovalPolicy, Run, ToolCall
from chat.models import Membership
from chat.selectors import membership_get, memberships_in_workspace

K = ApprovalPolicy.ApproverKind
CONNECT = "connect"  # the rule of a call parked until its person connects (agents.approvals.requests)


@dataclass(frozen=True)
class ApprovalRule:
    """The rule a parked call carries (``ToolCall.approval``). ``role``: the role name for
    kind ``role``; ``expires_s``: seconds, 0 never."""

    rule: str
    policy_id: int | None
    approver_kind: str
    role: str
    approvals_needed: int
    requester_counts: bool
    expires_s: int

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_ledger(cls, ledger: ToolCall) -> ApprovalRule:
        """The rule stored on a parked call (calls parked before rules existed: the fallback)."""
        data = ledger.approval or {}
        if not data:
            return FALLBACK
        return cls(rule=data.get("rule", FALLBACK.rule), policy_id=data.get("policy_id"),
                   approver_kind=data.get("approver_kind", K.REQUESTER), role=data.get("role", ""),
                   approvals_needed=int(data.get("approvals_needed", ledger.approvals_needed or 1)),
                   requester_counts=bool(data.get("requester_counts", True)),
                   expires_s=int(data.get("expires_s", 0)))


FALLBACK = ApprovalRule(rule=gettext_noop("Approval"), policy_id=None, approver_kind=K.REQUESTER, role="", approvals_needed=1,
                        requester_counts=True, expires_s=0)
"""When no enabled rule matches: the requester (or a workspace admin) decides, no expiry
beyond ``APPROVAL_DEFAULT_EXPIRES_S``."""


@dataclass(frozen=True)
class RuleView:
    """An approval rule as plain values, for :func:`rule_pick` (the live rows, or a draft's).
    Empty ``tool_name`` / ``mcp_server_slug`` and None ``provider_id``: any; ``risk`` and
    ``env_tier`` "": any. ``role``: the approver role's name (kind ``role``)."""

    pk: int | None
    name: str
    enabled: bool
    tool_name: str
    mcp_server_slug: str
    provider_id: int | None
    risk: str
    env_tier: str
    approver_kind: str
    role: str
    approvals_needed: int
    requester_counts: bool
    expires_s: int

    @classmethod
    def from_row(cls, row: ApprovalPolicy) -> RuleView:
        return cls(pk=row.pk, name=row.name, enabled=row.enabled,
                   tool_name=row.tool_policy.tool_name if row.tool_policy_id else "",
                   mcp_server_slug=row.mcp_server.slug if row.mcp_server_id else "", provider_id=row.provider_id,
                   risk=row.risk, env_tier=row.env_tier, approver_kind=row.approver_kind,
                   role=row.approver_role.name if row.approver_role_id else "",
                   approvals_needed=row.approvals_needed, requester_counts=row.requester_counts,
                   expires_s=row.expires_s)


def rule_views() -> list[RuleView]:
    """Every approval rule row, oldest first (the tie-break order of :func:`rule_pick`)."""
    rows = ApprovalPolicy.objects.select_related("tool_policy", "mcp_server", "approver_role").order_by(
        "created_at", "pk")
    return [RuleView.from_row(row) for row in rows]


def rule_pick(*, rules: Sequence[RuleView], tool_name: str, risk: str, tier: str | None, mcp_server_slug: str = "",
              provider_id=None, default_expires_s: int = 0) -> ApprovalRule:
    """The rule for one call among ``rules`` (oldest first) — a pure function, shared by the
    live path (:func:`rule_for`) and policy simulation (``policies.simulation``). The most
    specific enabled match wins (tool > MCP server / agent provider > tier > risk); ties: the
    first. No match: :data:`FALLBACK` expiring after ``default_expires_s`` seconds."""

    def matches(rule: RuleView) -> bool:
        return (rule.enabled and (not rule.tool_name or rule.tool_name == tool_name)
                and (not rule.mcp_server_slug or rule.mcp_server_slug == mcp_server_slug)
                and (rule.provider_id is None or rule.provider_id == provider_id)
                and (not rule.risk or rule.risk == risk) and (not rule.env_tier or rule.env_tier == tier))

    def specificity(rule: RuleView) -> int:
        return (8 * bool(rule.tool_name) + 4 * bool(rule.mcp_server_slug or rule.provider_id is not None)
                + 2 * bool(rule.env_tier) + bool(rule.risk))

    best = max((r for r in rules if matches(r)), key=specificity, default=None)  # max keeps the first of equals
    if best is None:
        return ApprovalRule(**{**FALLBACK.as_dict(), "expires_s": default_expires_s})
    two = best.approvals_needed == 2
    return ApprovalRule(
        rule=best.name, policy_id=best.pk, approver_kind=best.approver_kind, role=best.role,
        approvals_needed=2 if two else 1, requester_counts=best.requester_counts and not two,
        expires_s=best.expires_s,
    )


def rule_for(*, tool_name: str, risk: str, tier: str | None, mcp_server_slug: str = "",
             provider_id=None) -> ApprovalRule:
    """The rule for one call under the live rules (:func:`rule_pick` over :func:`rule_views`).
    ``risk``: the tool policy's ``read|write|dangerous``; ``tier``: ``prod|staging|dev`` or
    None; ``mcp_server_slug``: the call's MCP server ("" for other tools); ``provider_id``:
    the agent provider that asked (agent_runs), else None."""
    return rule_pick(rules=rule_views(), tool_name=tool_name, risk=risk, tier=tier, mcp_server_slug=mcp_server_slug,
                     provider_id=provider_id, default_expires_s=settings.APPROVAL_DEFAULT_EXPIRES_S)


def _role_qualifies(rule: ApprovalRule, membership: Membership | None) -> bool:
    if membership is None:
        return False
    if rule.approver_kind == K.ROLE:
        return membership.role.name == rule.role
    return membership.role.is_admin  # workspace admins; and admins under "the requester"


def rule_name(rule: ApprovalRule) -> str:
    """The rule's name in the active language: the seeded names (``defaults.DEFAULT_RULES``) are
    translated; a name an admin gave is shown as written."""
    return gettext(rule.rule) if rule.rule else rule.rule


def role_label(rule: ApprovalRule) -> str:
    """The group that may approve, in plain words (no requester clause)."""
    if rule.approver_kind == K.ROLE:
        return gettext("the %(role)s role") % {"role": rule.role}
    return gettext("workspace admins")


def approvers_phrase(rule: ApprovalRule, requester: str) -> str:
    """Who may approve, e.g. "a workspace admin other than alice", "two people with the
    prod-approver role other than alice", "alice or a workspace admin" (active language)."""
    values = {"requester": requester, "role": rule.role}
    if rule.approver_kind == K.REQUESTER:
        return gettext("%(requester)s or a workspace admin") % values
    one = rule.approvals_needed == 1
    if rule.approver_kind == K.ROLE:
        if rule.requester_counts:
            return (gettext("someone with the %(role)s role") if one
                    else gettext("two people with the %(role)s role")) % values
        return (gettext("someone with the %(role)s role other than %(requester)s") if one
                else gettext("two people with the %(role)s role other than %(requester)s")) % values
    if rule.requester_counts:
        return gettext("a workspace admin") if one else gettext("two workspace admins")
    return (gettext("a workspace admin other than %(requester)s") if one
            else gettext("two workspace admins other than %(requester)s")) % values


def waiting_text(rule: ApprovalRule, requester: str) -> str:
    """The card's sentence: "Production write: needs 1 approval from a workspace admin other
    than alice" (active language). It is the rule only: how many approved so far is said once,
    on its own line (``approvals_so_far``, ``approved_by``), never repeated in it."""
    n = rule.approvals_needed
    return ngettext("%(rule)s: needs %(n)d approval from %(who)s", "%(rule)s: needs %(n)d approvals from %(who)s",
                    n) % {"rule": rule_name(rule), "n": n, "who": approvers_phrase(rule, requester)}


@dataclass(frozen=True)
class DeciderCheck:
    """``allowed``; ``reason`` (why not, for a 403); ``role``: the decider's role name now
    (or ""); ``as_requester``: they started the run."""

    allowed: bool
    reason: str
    role: str
    as_requester: bool


def decider_check(*, ledger: ToolCall, run: Run, user) -> DeciderCheck:
    """May ``user`` decide parked call ``ledger`` of ``run`` now? Reads their membership in
    the run's workspace at this moment. Does not look at earlier decisions (the service
    refuses a second decision by the same person with 409)."""
    rule = ApprovalRule.from_ledger(ledger)
    membership = membership_get(user=user, workspace_id=run.thread.workspace_id)
    role = membership.role.name if membership else ""
    is_requester = run.user_id == user.pk
    if membership is None:
        return DeciderCheck(False, gettext("You are not a member of this call's workspace."), role, is_requester)
    if (ledger.approval or {}).get("rule") == CONNECT:
        # A connect card is the requester's own account: nobody else connects or cancels it.
        return DeciderCheck(is_requester, "" if is_requester else gettext(
                            "Only the person who asked can connect their own account."), role, is_requester)
    if rule.approver_kind == K.REQUESTER:
        if is_requester or membership.role.is_admin:
            return DeciderCheck(True, "", role, is_requester)
        return DeciderCheck(False, gettext("Only %(who)s may decide this call.") % {
            "who": approvers_phrase(rule, run.user.get_username())}, role, is_requester)
    if is_requester and not rule.requester_counts:
        return DeciderCheck(False, gettext("%(rule)s: the requester cannot approve their own call; it needs %(who)s.")
                            % {"rule": rule_name(rule), "who": approvers_phrase(rule, run.user.get_username())},
                            role, True)
    if not _role_qualifies(rule, membership):
        return DeciderCheck(False, gettext("%(rule)s: only %(who)s may decide this call (your role here is %(role)s).")
                            % {"rule": rule_name(rule), "who": role_label(rule), "role": role}, role, is_requester)
    return DeciderCheck(True, "", role, is_requester)


def candidates(*, ledger: ToolCall, run: Run) -> list:
    """Active users who may decide ``ledger`` now and have not decided it yet, by username (a
    connect card: its requester only)."""
    if (ledger.approval or {}).get("rule") == CONNECT:
        return [run.user] if run.user.is_active else []
    rule = ApprovalRule.from_ledger(ledger)
    members = memberships_in_workspace(workspace_id=run.thread.workspace_id).filter(user__is_active=True)
    if rule.approver_kind == K.ROLE:
        q = Q(role__name=rule.role)
    else:
        q = Q(role__is_admin=True)
    if rule.approver_kind == K.REQUESTER:
        q |= Q(user_id=run.user_id)
    ids = set(members.filter(q).values_list("user_id", flat=True))
    if rule.approver_kind != K.REQUESTER and not rule.requester_counts:
        ids.discard(run.user_id)
    ids -= set(ledger.approvals.exclude(user=None).values_list("user_id", flat=True))
    return list(get_user_model().objects.filter(pk__in=ids).order_by("username"))
