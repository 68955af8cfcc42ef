"""The tests' own stdio MCP server (the SDK's MCPServer): ``python tests/mcp/stdio_server.py``.

Tools: ``environment`` (the variables this process got, as JSON), ``pid`` (this process's
id), ``hang`` (never answers until cancelled), ``crash`` (the process exits mid-call).
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


if __name__ == "__main__":
    server.run("stdio")
