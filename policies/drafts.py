"""A draft's changes: validate them against the live policy set, apply them to a snapshot
(for simulation) or to the rows (when applied), and tell what differs between two snapshots.

``changes`` shape::

    {"tool_policies": {"update_knowledge_item": {"approval_mode": "always", "allowed_roles": ["admin"]}},
     "approval_rules": {"Write": {"approver_kind": "workspace_admins", "requester_counts": false},
                        "Night write": {"risk": "write", "approver_kind": "role", "role": "admin"},
                        "Old rule": null}}

A tool must have a policy now (a deleted or never-registered tool is a 400 naming it); a
rule name that exists is changed field by field, a new name is created, ``null`` deletes.
"""

from __future__ import annotations

import copy

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from agents.models import ApprovalPolicy, Environment, Role, ToolPolicy
from chatplatform.errors import ServiceError
from mcp_client.models import MCPServer

TOOL_FIELDS = {"enabled", "risk", "approval_mode", "allowed_roles", "timeout_s"}
RULE_FIELDS = {"enabled", "tool", "mcp_server", "provider_id", "risk", "env_tier", "approver_kind", "role",
               "approvals_needed", "requester_counts", "expires_s"}
NEW_RULE = {"enabled": True, "tool": "", "mcp_server": "", "provider_id": None, "risk": "", "env_tier": "",
            "approver_kind": ApprovalPolicy.ApproverKind.REQUESTER, "role": "", "approvals_needed": 1,
            "requester_counts": True, "expires_s": 86400}


class PolicyChangeInvalid(ServiceError):
    """A draft the server refuses (400 ``invalid``, ``field``: where)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__("invalid", message, 400, field=field)


def _bool(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise PolicyChangeInvalid(where, _("%(where)s must be true or false.") % {"where": where})
    return value


def _choice(value, choices, where: str) -> str:
    allowed = [c for c, _label in choices]
    if value not in allowed:
        raise PolicyChangeInvalid(where, _("%(where)s must be one of %(allowed)s.") % {
            "where": where, "allowed": ", ".join(a or '""' for a in allowed)})
    return value


def _int(value, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PolicyChangeInvalid(where, _("%(where)s must be a whole number from %(low)s to %(high)s.") % {
            "where": where, "low": low, "high": high})
    return value


def changes_validate(changes, snapshot: dict) -> dict:
    """``changes`` checked against ``snapshot`` (the live set) and normalised. Raises
    :class:`PolicyChangeInvalid` naming the field, the unknown tool, role or server."""
    if not isinstance(changes, dict) or set(changes) - {"tool_policies", "approval_rules"}:
        raise PolicyChangeInvalid("changes", _("changes must be an object with tool_policies and/or approval_rules."))
    tools_in, rules_in = changes.get("tool_policies") or {}, changes.get("approval_rules") or {}
    if not isinstance(tools_in, dict) or not isinstance(rules_in, dict):
        raise PolicyChangeInvalid("changes", _("tool_policies and approval_rules must be objects keyed by name."))
    if not tools_in and not rules_in:
        raise PolicyChangeInvalid("changes", _("The draft changes nothing."))
    role_names = set(Role.objects.values_list("name", flat=True))
    out_tools: dict[str, dict] = {}
    for tool, fields in tools_in.items():
        where = f"tool_policies.{tool}"
        if tool not in snapshot["tool_policies"]:
            raise PolicyChangeInvalid(where, _("The tool %(tool)s does not exist (deleted?): it has no tool policy.")
                                      % {"tool": tool})
        if not isinstance(fields, dict) or not fields or set(fields) - TOOL_FIELDS:
            raise PolicyChangeInvalid(where, _("Change one or more of: %(fields)s.") % {
                "fields": ", ".join(sorted(TOOL_FIELDS))})
        clean: dict = {}
        for key, value in fields.items():
            at = f"{where}.{key}"
            if key == "enabled":
                clean[key] = _bool(value, at)
            elif key == "risk":
                clean[key] = _choice(value, ToolPolicy.Risk.choices, at)
            elif key == "approval_mode":
                clean[key] = _choice(value, ToolPolicy.ApprovalMode.choices, at)
            elif key == "timeout_s":
                clean[key] = _int(value, at, 1, 3600)
            else:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise PolicyChangeInvalid(at, _("allowed_roles must be a list of role names."))
                unknown = sorted(set(value) - role_names)
                if unknown:
                    raise PolicyChangeInvalid(at, _("No such role: %(names)s.") % {"names": ", ".join(unknown)})
                clean[key] = sorted(set(value))
        out_tools[tool] = clean
    out_rules: dict[str, dict | None] = {}
    for name, fields in rules_in.items():
        where = f"approval_rules.{name}"
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            raise PolicyChangeInvalid("approval_rules", _("A rule's name is 1 to 100 characters."))
        if fields is None:
            if name not in snapshot["approval_rules"]:
                raise PolicyChangeInvalid(where, _("No rule is named %(name)s.") % {"name": name})
            out_rules[name] = None
            continue
        if not isinstance(fields, dict) or not fields or set(fields) - RULE_FIELDS:
            raise PolicyChangeInvalid(where, _("Change one or more of: %(fields)s.") % {
                "fields": ", ".join(sorted(RULE_FIELDS))})
        merged = {**(snapshot["approval_rules"].get(name) or NEW_RULE), **fields}
        _rule_check(merged, where, snapshot, role_names)
        out_rules[name] = {k: merged[k] for k in fields}
    return {"tool_policies": out_tools, "approval_rules": out_rules}


def _rule_check(rule: dict, where: str, snapshot: dict, role_names: set[str]) -> None:
    """The model's own field and cross-field rules (``ApprovalPolicy.clean``) on a merged rule."""
    _bool(rule["enabled"], f"{where}.enabled")
    _bool(rule["requester_counts"], f"{where}.requester_counts")
    if rule["tool"] and rule["tool"] not in snapshot["tool_policies"]:
        raise PolicyChangeInvalid(f"{where}.tool", _("The tool %(tool)s does not exist (deleted?): it has no tool "
                                                     "policy.") % {"tool": rule["tool"]})
    if rule["role"] and rule["role"] not in role_names:
        raise PolicyChangeInvalid(f"{where}.role", _("No such role: %(names)s.") % {"names": rule["role"]})
    if rule["mcp_server"] and not MCPServer.objects.filter(slug=rule["mcp_server"]).exists():
        raise PolicyChangeInvalid(f"{where}.mcp_server", _("No MCP server is named %(slug)s.") % {
            "slug": rule["mcp_server"]})
    _choice(rule["risk"], [("", "")] + list(ToolPolicy.Risk.choices), f"{where}.risk")
    _choice(rule["env_tier"], [("", "")] + list(Environment.Tier.choices), f"{where}.env_tier")
    _choice(rule["approver_kind"], ApprovalPolicy.ApproverKind.choices, f"{where}.approver_kind")
    _int(rule["approvals_needed"], f"{where}.approvals_needed", 1, 2)
    _int(rule["expires_s"], f"{where}.expires_s", 0, 366 * 86400)
    if rule["provider_id"] is not None:
        _int(rule["provider_id"], f"{where}.provider_id", 1, 2**62)
    probe = ApprovalPolicy(
        approver_kind=rule["approver_kind"], approvals_needed=rule["approvals_needed"],
        requester_counts=rule["requester_counts"], provider_id=rule["provider_id"],
        approver_role=Role.objects.filter(name=rule["role"]).first() if rule["role"] else None,
        mcp_server=MCPServer.objects.filter(slug=rule["mcp_server"]).first() if rule["mcp_server"] else None,
    )
    try:
        probe.clean()
    except ValidationError as exc:
        key, messages = next(iter(exc.message_dict.items()))
        key = {"approver_role": "role"}.get(key, key)
        raise PolicyChangeInvalid(f"{where}.{key}", " ".join(messages)) from exc


def snapshot_apply(snapshot: dict, changes: dict) -> dict:
    """A new snapshot: ``snapshot`` with validated ``changes`` applied (new rules last)."""
    out = copy.deepcopy(snapshot)
    for tool, fields in changes.get("tool_policies", {}).items():
        out["tool_policies"][tool].update(fields)
    order = max((r.get("order", 0) for r in out["approval_rules"].values()), default=-1)
    for name, fields in changes.get("approval_rules", {}).items():
        if fields is None:
            out["approval_rules"].pop(name, None)
        elif name in out["approval_rules"]:
            out["approval_rules"][name].update(fields)
        else:
            order += 1
            out["approval_rules"][name] = {**NEW_RULE, **fields, "order": order, "pk": None}
    return out


def snapshot_diff(before: dict, after: dict) -> dict:
    """The changes (same shape as a draft's) that turn ``before`` into ``after``: changed
    fields only; rules missing from ``after`` are ``null``."""
    tools: dict[str, dict] = {}
    for name, fields in after["tool_policies"].items():
        old = before["tool_policies"].get(name)
        if old is None:
            continue  # a tool registered since: not a policy change
        changed = {k: v for k, v in fields.items() if k in TOOL_FIELDS and old.get(k) != v}
        if changed:
            tools[name] = changed
    rules: dict[str, dict | None] = {}
    for name, fields in after["approval_rules"].items():
        old = before["approval_rules"].get(name)
        changed = {k: v for k, v in fields.items() if k in RULE_FIELDS and (old is None or old.get(k) != v)}
        if changed:
            rules[name] = changed
    for name in before["approval_rules"]:
        if name not in after["approval_rules"]:
            rules[name] = None
    return {"tool_policies": tools, "approval_rules": rules}


@transaction.atomic
def snapshot_write(changes: dict) -> None:
    """Write validated ``changes`` to the tool policy and approval rule rows."""
    roles = {r.name: r for r in Role.objects.all()}
    for tool, fields in changes.get("tool_policies", {}).items():
        row = ToolPolicy.objects.select_for_update().get(tool_name=tool)
        for key, value in fields.items():
            if key != "allowed_roles":
                setattr(row, key, value)
        row.save()
        if "allowed_roles" in fields:
            row.allowed_roles.set([roles[n] for n in fields["allowed_roles"]])
    for name, fields in changes.get("approval_rules", {}).items():
        if fields is None:
            ApprovalPolicy.objects.filter(name=name).delete()
            continue
        row = ApprovalPolicy.objects.filter(name=name).first() or ApprovalPolicy(name=name)
        for key, value in fields.items():
            if key == "tool":
                row.tool_policy = ToolPolicy.objects.get(tool_name=value) if value else None
            elif key == "mcp_server":
                row.mcp_server = MCPServer.objects.get(slug=value) if value else None
            elif key == "role":
                row.approver_role = roles[value] if value else None
            else:
                setattr(row, key, value)
        row.save()
