"""Scope pinning: the arguments that say *where* a call acts come from the run, never from
the model (DESIGN §5, "scope pinning").

The run's scope is its workspace, thread, user and environment (``RUN_SCOPE_ARGS``). Whatever
the model writes under one of those names is taken out of the call's arguments — an
environment the model names would otherwise pick the approval rule (a ``prod`` send turned
into a ``dev`` one, approvable by the requester). A tool that takes such an argument itself
(its JSON schema declares it: an external MCP tool's ``env_id``, say) is given the run's
value instead; an environment the run does not have is given to nobody.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .api import DEFAULT_SCOPE_ARGS, ToolContext, ToolSpec

RUN_SCOPE_ARGS = (*DEFAULT_SCOPE_ARGS, "env_id")
MODEL_ASKED_KEY = "model_scope_args"
"""Ledger ``arguments`` key: the scope values the model wrote and that were not used (kept as a
record of what it asked; never shown as the call's arguments, never sent)."""


@dataclass(frozen=True)
class PinnedCall:
    tool_args: dict  # what the tool receives: the model's arguments with the run's scope pinned
    ledger_args: dict  # what the ledger keeps: tool_args, the run's scope values, what the model asked
    model_asked: dict  # the model's own values of scope arguments that differ from the run's


def pin_scope(spec: ToolSpec, args: dict, ctx: ToolContext, *, env_name: str) -> PinnedCall:
    """Pin ``args`` (the model's parsed arguments) to the run's scope.

    ``env_name``: the call's environment, resolved from the run (``agents.risk.resolve_env``)
    or the tool's own (``ToolSpec.env_name``); "" for none. Returns the tool's arguments (scope
    names the tool declares in ``spec.parameters["properties"]`` carry the run's value — as a
    string where the schema asks for one — unless they are the tool's ``scope_args``, which
    a built-in tool reads from ``ctx``; the others are left out) and the ledger's."""
    declared = (spec.parameters or {}).get("properties") or {}
    run_values: dict[str, Any] = {**ctx.scope_values(), "env_id": env_name or None}
    tool_args = {k: v for k, v in args.items() if k not in RUN_SCOPE_ARGS}
    for key in RUN_SCOPE_ARGS:
        value = run_values[key]
        if key in declared and key not in spec.scope_args and value is not None:
            tool_args[key] = str(value) if (declared[key] or {}).get("type") == "string" else value
    model_asked = {k: args[k] for k in RUN_SCOPE_ARGS if k in args and args[k] != tool_args.get(k, run_values[k])}
    ledger_args = {**tool_args, **ctx.scope_values()}
    if model_asked:
        ledger_args[MODEL_ASKED_KEY] = model_asked
    return PinnedCall(tool_args=tool_args, ledger_args=ledger_args, model_asked=model_asked)
