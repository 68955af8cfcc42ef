"""Tool policy as plain functions: what is offered (prompt side) and what may run
(invocation side). DESIGN §5 step 1 and step 4; rules from the ss-tools and cks rows of §1.

* ``tool_pipeline`` — tool sources → enabled policies → RBAC → context affinity →
  ``save_to_knowledge`` only when the thread allows model saves.
* ``tool_guard`` — checked for *every* call the model makes, offered or not: unknown or
  disabled → an error result; the role lacks it → ``permission.denied`` (never an approval).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings

from agents.models import Role, ToolPolicy
from agents.tools import ToolSpec, tool_sources
from chatplatform.config_cache import config_cached

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyView:
    """A policy row flattened for the hot path (or the declaration's defaults)."""

    enabled: bool
    risk: str
    allowed_roles: frozenset[str]
    affinity_object_types: tuple[str, ...]
    timeout_s: int
    approval_mode: str


def chat_denylisted(spec: ToolSpec) -> bool:
    """Tools that manage the platform itself can never be enabled for chat."""
    return spec.chat_denylisted or spec.name in settings.CHAT_TOOL_DENYLIST


def policy_defaults(spec: ToolSpec) -> PolicyView:
    return PolicyView(
        enabled=not chat_denylisted(spec),
        risk=spec.risk,
        allowed_roles=frozenset(spec.default_roles),
        affinity_object_types=(),
        timeout_s=30,
        approval_mode=spec.approval_default,
    )


def tool_policies_sync() -> int:
    """Create a ToolPolicy row with safe defaults for every registered tool that lacks one.
    Returns how many rows were created. Existing rows (the admin's word) are left alone."""
    existing = set(ToolPolicy.objects.values_list("tool_name", flat=True))
    created = 0
    for spec in tool_sources.all():
        if spec.name in existing:
            continue
        defaults = policy_defaults(spec)
        row = ToolPolicy.objects.create(
            tool_name=spec.name,
            enabled=defaults.enabled,
            risk=defaults.risk,
            timeout_s=defaults.timeout_s,
            approval_mode=defaults.approval_mode,
        )
        if spec.default_roles:
            row.allowed_roles.set(Role.objects.filter(name__in=spec.default_roles))
        created += 1
    return created


def policy_views() -> dict[str, PolicyView]:
    """Tool name → effective policy: the registered tools' defaults overlaid with the policy
    rows (:func:`_policy_rows`, kept per process while the configuration does not change —
    ``chatplatform.config_cache``; one statement when it did not)."""
    return policy_views_from_rows(config_cached("tool_policies", _policy_rows))


def policy_views_from_rows(rows: dict[str, tuple[tuple, frozenset[str]]]) -> dict[str, PolicyView]:
    """Tool name → effective policy for ``rows`` (shaped as :func:`_policy_rows`: tool name →
    ((tool_name, enabled, risk, affinity, timeout_s, approval_mode), role names)) over the
    registered tools' defaults. The live set and a simulated draft go through this one door."""
    specs = {spec.name: spec for spec in tool_sources.all()}
    views = {name: policy_defaults(spec) for name, spec in specs.items()}
    for (tool_name, enabled, risk, affinity, timeout_s, approval_mode), names in rows.values():
        spec = specs.get(tool_name)
        views[tool_name] = PolicyView(
            enabled=enabled and not (spec is not None and chat_denylisted(spec)),
            risk=risk,
            allowed_roles=frozenset(names),
            affinity_object_types=tuple(affinity or ()),
            timeout_s=timeout_s,
            approval_mode=approval_mode,
        )
    return views


def _policy_rows() -> dict[str, tuple[tuple, frozenset[str]]]:
    """Tool name → (its policy row's fields, its role names), in one query: each row with its
    role names joined (one result row per role, or one with no role), as plain values."""
    rows: dict[str, tuple[tuple, set[str]]] = {}
    for *fields, role in ToolPolicy.objects.order_by().values_list(
            "tool_name", "enabled", "risk", "affinity_object_types", "timeout_s", "approval_mode",
            "allowed_roles__name"):
        _fields, names = rows.setdefault(fields[0], (tuple(fields), set()))
        if role is not None:
            names.add(role)
    return {name: (fields, frozenset(names)) for name, (fields, names) in rows.items()}


@dataclass
class Offer:
    """The tools offered to the model and, for each left out, why."""

    tools: list[ToolSpec] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]


def role_allows(policy: PolicyView, role_name: str) -> bool:
    """Whether ``role_name`` may use a tool under ``policy``.

    Named roles decide. With no roles named, a read tool is for every role, while a write or
    dangerous tool is for no one until an administrator names roles (safe default: a new or
    unconfigured write tool never reaches a viewer, not even as an approval card).
    """
    if policy.allowed_roles:
        return role_name in policy.allowed_roles
    return policy.risk == "read"


def tool_pipeline(
    *, role_name: str, object_type: str | None, allow_model_save: bool, policies: dict[str, PolicyView],
    only: frozenset[str] | None = None,
) -> Offer:
    """The offered tool set for one request, in four steps: enabled → RBAC (the user's role
    in the thread's workspace) → context affinity → model-save consent.

    ``only``: the names a thread's preset allows (``agents.presets``; None: no narrowing) —
    applied after the caller's role, so a preset never adds a tool, it only takes away.

    Context affinity: when the UI context names an object type that some allowed tool has an
    affinity for, only those tools (plus always-offered ones such as ``show_capabilities``)
    are offered; an absent type, or one no tool is tied to, leaves every allowed tool.
    Each exclusion is logged with its reason and kept in ``Offer.excluded``.
    """
    offer = Offer()
    allowed: list[ToolSpec] = []
    for spec in tool_sources.all():
        policy = policies.get(spec.name) or policy_defaults(spec)
        if spec.unavailable:
            offer.excluded[spec.name] = spec.unavailable
        elif not policy.enabled:
            offer.excluded[spec.name] = "on the chat denylist" if chat_denylisted(spec) else "disabled by policy"
        elif not role_allows(policy, role_name):
            offer.excluded[spec.name] = f"role {role_name!r} not allowed"
        elif only is not None and spec.name not in only:
            offer.excluded[spec.name] = "not one of the assistant's tools"
        else:
            allowed.append(spec)
    affine = {
        spec.name for spec in allowed
        if object_type and object_type in (policies.get(spec.name) or policy_defaults(spec)).affinity_object_types
    }
    for spec in allowed:
        reason = None
        if affine and spec.name not in affine and not spec.always_offered:
            reason = f"no affinity with object type {object_type!r}"
        elif spec.requires_model_save and not allow_model_save:
            reason = "model saves are off in this thread"
        if reason:
            offer.excluded[spec.name] = reason
            logger.debug("tool %s not offered: %s", spec.name, reason)
        else:
            offer.tools.append(spec)
    return offer


@dataclass(frozen=True)
class Guard:
    """Outcome of the invocation guard. ``kind``: ok | unknown | unavailable | disabled |
    permission_denied."""

    kind: str
    message: str = ""
    required_role: str = ""
    alternatives: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.kind == "ok"


def required_role_for(policy: PolicyView) -> str:
    """The least-trusted role that may use the tool (by ``Role.rank``); "" when no role may
    (a write or dangerous tool whose policy names no roles)."""
    if not policy.allowed_roles:
        return ""
    role = Role.objects.filter(name__in=policy.allowed_roles).order_by("rank").first()
    return role.name if role else sorted(policy.allowed_roles)[0]


def guard_verdict(*, policy: PolicyView | None, role_name: str, unavailable: str = "") -> str:
    """The invocation guard's verdict as a pure function of the tool's policy (None: no such
    tool) and the caller's role: ``unknown | unavailable | disabled | permission_denied | ok``.
    Shared by :func:`tool_guard` and policy simulation (``policies.simulation``)."""
    if policy is None:
        return "unknown"
    if unavailable:
        return "unavailable"
    if not policy.enabled:
        return "disabled"
    if not role_allows(policy, role_name):
        return "permission_denied"
    return "ok"


def tool_guard(*, name: str, role_name: str, policies: dict[str, PolicyView], offered: list[str],
               only: frozenset[str] | None = None) -> Guard:
    """Check one call at invocation time, whether or not the tool was offered. ``only``: the
    thread's preset's tools (``tool_pipeline``); a call outside them is ``disabled``.

    A hallucinated or replayed call for a tool the role lacks is ``permission_denied`` — it
    never becomes an approval request (DESIGN §1, ss-tools row).
    """
    spec = tool_sources.get(name)
    policy = (policies.get(name) or policy_defaults(spec)) if spec is not None else None
    verdict = guard_verdict(policy=policy, role_name=role_name, unavailable=spec.unavailable if spec else "")
    if verdict == "unknown":
        return Guard("unknown", f"Unknown tool {name!r}. Available tools: {', '.join(offered) or 'none'}.")
    assert spec is not None and policy is not None
    if verdict == "unavailable":
        return Guard("unavailable", spec.unavailable)
    if verdict == "disabled":
        return Guard("disabled", f"Tool {name!r} is disabled by the administrator.")
    if verdict == "permission_denied":
        alternatives = tuple(n for n in offered if n != name)
        message = (
            f"Permission denied: your role {role_name!r} may not use {name!r}."
            if policy.allowed_roles else
            f"Permission denied: no role may use {name!r} until an administrator names the roles allowed to."
        )
        return Guard(
            "permission_denied",
            message,
            required_role=required_role_for(policy),
            alternatives=alternatives,
        )
    if only is not None and name not in only:
        return Guard("disabled", f"Tool {name!r} is not one of the tools of this chat's assistant.")
    return Guard("ok")
