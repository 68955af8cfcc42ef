"""Built-in tools of the agents app."""

from __future__ import annotations

from agents.pipeline import policy_defaults, policy_views, required_role_for, tool_pipeline
from agents.presets import preset_tools_for_call
from agents.tools import ToolContext, tool, tool_sources


@tool(
    name="show_capabilities",
    description=(
        "List what the current user may do with tools in this chat, and why anything else is "
        "not available (role, administrator policy, context, thread settings)."
    ),
    risk="read",
    always_offered=True,
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)
def show_capabilities(*, ctx: ToolContext) -> dict:
    """``{"role", "available": [{name, risk, needs_approval, description}], "unavailable":
    [{name, reason, required_role?}]}`` — computed by the same pipeline that offers tools."""
    policies = policy_views()
    offer = tool_pipeline(
        role_name=ctx.role,
        object_type=(ctx.ui_context or {}).get("objectType"),
        allow_model_save=ctx.allow_model_save,
        policies=policies,
        only=preset_tools_for_call(thread_id=ctx.thread_id, user_id=ctx.user_id),  # the chat's assistant's
    )
    available = []
    for spec in offer.tools:
        policy = policies.get(spec.name) or policy_defaults(spec)
        available.append({
            "name": spec.name,
            "risk": policy.risk,
            "needs_approval": policy.risk == "dangerous" or policy.approval_mode == "always",
            "description": spec.description[:200],
        })
    unavailable = []
    for name, reason in sorted(offer.excluded.items()):
        entry = {"name": name, "reason": reason}
        spec = tool_sources.get(name)
        policy = policies.get(name) or (policy_defaults(spec) if spec else None)
        if policy is not None and reason.startswith("role"):
            entry["required_role"] = required_role_for(policy)
        unavailable.append(entry)
    return {
        "role": ctx.role,
        "available": available,
        "unavailable": unavailable,
        "summary": f"{len(available)} tool(s) available to role {ctx.role}, {len(unavailable)} not",
    }
