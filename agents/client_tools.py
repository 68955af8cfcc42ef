"""Client-declared tools: the seam for API clients that run tools themselves.

A run may carry tools its API client declared (the OpenAI-compatible API's ``tools``). The
loop offers them to the model next to the platform's own tools; when the model calls one,
the turn ends after the platform's own calls of that message ran, and the calls are
returned to the client — the platform never executes a client tool. The client sends the
results back as ``tool`` messages in its next request.

Plug-in shape (dependencies point one way, as for knowledge's tools): the app that knows
which run carries which tools registers a lookup at ``ready()``; ``agents`` never imports it.
"""

from __future__ import annotations

from collections.abc import Callable

from llm import ToolDefinition

_lookup: Callable[[object], list[ToolDefinition]] | None = None


def register_client_tools(lookup: Callable[[object], list[ToolDefinition]]) -> None:
    """Install ``lookup(run) -> [ToolDefinition]`` (called once per model request)."""
    global _lookup
    _lookup = lookup


def client_tools_for(run) -> list[ToolDefinition]:
    return list(_lookup(run)) if _lookup is not None else []


def client_call_names(run) -> set[str]:
    return {t.name for t in client_tools_for(run)}
