"""The tool API and the tool sources.

A built-in tool is declared once, next to its code::

    @tool(name="search_knowledge", risk="read", scope_args=("workspace_id",),
          description="...", parameters={...JSON schema...})
    def search_knowledge(*, ctx: ToolContext, query: str, top_k: int = 8) -> ToolOutput | dict: ...

Declarations fill the built-in source (``registry``) in ``AgentsConfig.ready()``; other
sources (e.g. external servers) are added to ``tool_sources`` at run time. Admin
``ToolPolicy`` rows decide what is enabled and for whom, for every source alike.
"""

from .api import ConnectRequired, ToolContext, ToolError, ToolOutput, ToolSpec, make_spec
from .sources import DeclaredTools, ToolSource, ToolSources, registry, tool, tool_sources

__all__ = [
    "ConnectRequired", "DeclaredTools", "ToolContext", "ToolError", "ToolOutput", "ToolSource", "ToolSources", "ToolSpec",
    "make_spec", "registry", "tool", "tool_sources",
]
