"""The tests' own stdio MCP server (the SDK's MCPServer): ``python tests/mcp/stdio_server.py``.

Tools: ``environment`` (the variables this process got, as JSON), ``pid`` (this process's
id), ``hang`` (never answers until cancelled), ``crash`` (the process exits mid-call); with
``ASK_TOOLS=1`` also the asking tools of ``tests.mcp.asking`` (recorded in ``$ASK_LOG``).
"""

from __future__ import annotations

import asyncio
import json
import os

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)

server = MCPServer("test-stdio")


@server.tool(annotations=READ, description="The environment variables this server process received (JSON).")
def environment() -> str:
    return json.dumps(dict(os.environ), sort_keys=True)


@server.tool(annotations=READ, description="This server process's id.")
def pid() -> str:
    return str(os.getpid())


@server.tool(annotations=READ, description="Never answers (until cancelled).")
async def hang() -> str:
    await asyncio.sleep(3600)
    return "never"


@server.tool(annotations=READ, description="The process exits while answering.")
async def crash() -> str:
    os._exit(3)


def _record(tool: str, **facts) -> None:
    """What reached this server, one JSON line per call in ``$ASK_LOG`` (when set)."""
    if os.environ.get("ASK_LOG"):
        with open(os.environ["ASK_LOG"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "arguments": facts}) + "\n")


if os.environ.get("ASK_TOOLS") == "1":  # the asking tools (tests.mcp.asking)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.mcp.asking import add_asking_tools

    add_asking_tools(server, _record)


if __name__ == "__main__":
    server.run("stdio")
