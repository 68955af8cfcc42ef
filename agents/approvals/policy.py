"""Approval policy as plain functions: which rule a call falls under, who may decide it now,
and how a card says so.

* :func:`rule_for` — the most specific enabled ``ApprovalPolicy`` for a call (tool > MCP
  server / agent provider > environment tier > risk; ties: the oldest), or the built-in
  :data:`FALLBACK` when none matches.
* :func:`decider_check` — whether a person may decide a parked call *now*: their role is read
  from their membership at decision time, so someone removed from a role can no longer decide.
* :func:`candidates` — the people who may decide a parked call (notifications, the card's
  "who can approve").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q

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


FALLBACK = ApprovalRule(rule="Approval", policy_id=None, approver_kind=K.REQUESTER, role="", approvals_needed=1,
                        requester_counts=True, expires_s=0)
"""When no enabled rule matches: the requester (or a workspace admin) decides, no expiry
beyond ``APPROVAL_DEFAULT_EXPIRES_S``."""


def rule_for(*, tool_name: str, risk: str, tier: str | None, mcp_server_slug: str = "",
             provider_id=None) -> ApprovalRule:
    """The rule for one call. ``risk``: the tool policy's ``read|write|dangerous``; ``tier``:
    ``prod|staging|dev`` or None; ``mcp_server_slug``: the call's MCP server ("" for other
    tools); ``provider_id``: the agent provider that asked (agent_runs), else None."""
    rows = (ApprovalPolicy.objects.filter(enabled=True)
            .filter(Q(tool_policy__isnull=True) | Q(tool_policy__tool_name=tool_name))
            .filter(Q(mcp_server__isnull=True) | Q(mcp_server__slug=mcp_server_slug or " "))
            .filter(Q(provider__isnull=True) | Q(provider_id=provider_id))
            .filter(Q(risk="") | Q(risk=risk))
            .filter(Q(env_tier="") | Q(env_tier=tier or "-"))
            .select_related("approver_role").order_by("created_at", "pk"))

    def specificity(row: ApprovalPolicy) -> int:
        return (8 * bool(row.tool_policy_id) + 4 * bool(row.mcp_server_id or row.provider_id)
                + 2 * bool(row.env_tier) + bool(row.risk))

    best = max(rows, key=specificity, default=None)  # max keeps the first (oldest) of equals
    if best is None:
        return ApprovalRule(**{**FALLBACK.as_dict(), "expires_s": settings.APPROVAL_DEFAULT_EXPIRES_S})
    two = best.approvals_needed == 2
    return ApprovalRule(
        rule=best.name, policy_id=best.pk, approver_kind=best.approver_kind,
        role=best.approver_role.name if best.approver_role_id else "",
        approvals_needed=2 if two else 1, requester_counts=best.requester_counts and not two,
        expires_s=best.expires_s,
    )


def _role_qualifies(rule: ApprovalRule, membership: Membership | None) -> bool:
    if membership is None:
        return False
    if rule.approver_kind == K.ROLE:
        return membership.role.name == rule.role
    return membership.role.is_admin  # workspace admins; and admins under "the requester"


def role_label(rule: ApprovalRule) -> str:
    """The group that may approve, in plain words (no requester clause)."""
    if rule.approver_kind == K.ROLE:
        return f"the {rule.role} role"
    return "workspace admins"


def approvers_phrase(rule: ApprovalRule, requester: str) -> str:
    """Who may approve, e.g. "a workspace admin other than alice", "two people with the
    prod-approver role other than alice", "alice or a workspace admin"."""
    if rule.approver_kind == K.REQUESTER:
        return f"{requester} or a workspace admin"
    group = (f"someone with the {rule.role} role" if rule.approvals_needed == 1
             else f"two people with the {rule.role} role") if rule.approver_kind == K.ROLE else (
        "a workspace admin" if rule.approvals_needed == 1 else "two workspace admins")
    return group if rule.requester_counts else f"{group} other than {requester}"


def waiting_text(rule: ApprovalRule, requester: str) -> str:
    """The card's sentence: "Production write: needs 1 approval from a workspace admin other
    than alice". It is the rule only: how many approved so far is said once, on its own line
    (``approvals_so_far``, ``approved_by``), never repeated in it."""
    n = rule.approvals_needed
    return f"{rule.rule}: needs {n} approval{'s' if n != 1 else ''} from {approvers_phrase(rule, requester)}"


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
        return DeciderCheck(False, "You are not a member of this call's workspace.", role, is_requester)
    if (ledger.approval or {}).get("rule") == CONNECT:
        # A connect card is the requester's own account: nobody else connects or cancels it.
        return DeciderCheck(is_requester, "" if is_requester else "Only the person who asked can connect their "
                            "own account.", role, is_requester)
    if rule.approver_kind == K.REQUESTER:
        if is_requester or membership.role.is_admin:
            return DeciderCheck(True, "", role, is_requester)
        return DeciderCheck(False, f"Only {approvers_phrase(rule, run.user.get_username())} may decide this call.",
                            role, is_requester)
    if is_requester and not rule.requester_counts:
        return DeciderCheck(False, f"{rule.rule}: the requester cannot approve their own call; it needs "
                            f"{approvers_phrase(rule, run.user.get_username())}.", role, True)
    if not _role_qualifies(rule, membership):
        return DeciderCheck(False, f"{rule.rule}: only {role_label(rule)} may decide this call "
                            f"(your role here is {role}).", role, is_requester)
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
