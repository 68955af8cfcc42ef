"""Tool declarations and the process-wide registry.

A tool is declared once, next to its code::

    @tool(name="search_knowledge", risk="read", scope_args=("workspace_id",),
          description="...", parameters={...JSON schema...})
    def search_knowledge(*, ctx: ToolContext, query: str, top_k: int = 8) -> ToolOutput | dict: ...

The registry is filled in ``AgentsConfig.ready()`` (every app's ``tools`` module is
imported) and frozen afterwards; admin ``ToolPolicy`` rows decide what is enabled and for whom.
"""

from .registry import ToolContext, ToolOutput, ToolSpec, make_spec, registry, tool

__all__ = ["ToolContext", "ToolOutput", "ToolSpec", "make_spec", "registry", "tool"]
