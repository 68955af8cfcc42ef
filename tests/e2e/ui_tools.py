"""Test-only tools for the browser suite, loaded with EXTRA_TOOL_MODULES.

``ui_lookup`` (read) echoes its query; ``ui_write`` (write, approval always) records a
change — the suite uses it to park a run on an approval card.
"""

from agents.tools import tool


@tool(
    name="ui_lookup",
    description="Look something up (test tool).",
    risk="read",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
def ui_lookup(*, ctx, query: str) -> dict:
    return {"found": query, "summary": f"found {len(query)} characters"}


@tool(
    name="ui_write",
    description="Change a setting (test tool).",
    risk="write",
    default_approval="always",
    default_roles=("member", "admin"),  # a write tool with no roles named is for no one
    parameters={"type": "object", "properties": {"setting": {"type": "string"}}, "required": ["setting"]},
)
def ui_write(*, ctx, setting: str) -> dict:
    return {"changed": setting, "summary": f"changed {setting}"}
