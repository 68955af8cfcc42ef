"""Resource links an MCP server put in a tool result (``resource_link`` blocks and embedded
resources), recorded per person, thread and server as the call finishes — the recording side
of the door in :mod:`mcp_client.resources`, which opens only the URIs recorded here. Apart
from the door so the tool-call path (``sync``) and the door (which reads through ``sync``'s
server configuration) do not import each other."""

from __future__ import annotations

import mcp_types as types
from django.urls import reverse
from django.utils.http import urlencode

from agents.tools import ToolContext

from .models import MCPResourceLink, MCPServer

MAX_LINKS = 20  # per tool result


def resource_url(server_id: int, uri: str) -> str:
    return reverse("mcp-resource", args=[server_id]) + "?" + urlencode({"uri": uri})


def links_record(ctx: ToolContext, slug: str, result: types.CallToolResult) -> list[dict]:
    """Remember the resources ``result`` links for ``ctx``'s person and thread; the links as
    the chat shows them: ``[{name, uri, mime_type, url}]``."""
    blocks = []
    for block in result.content or []:
        if isinstance(block, types.ResourceLink):
            blocks.append((str(block.uri), block.title or block.name or "", block.mime_type or ""))
        elif isinstance(block, types.EmbeddedResource):
            blocks.append((str(block.resource.uri), "", block.resource.mime_type or ""))
    if not blocks or not ctx.thread_id:
        return []
    server = MCPServer.objects.filter(slug=slug).first()
    if server is None:
        return []
    links = []
    for uri, name, mime in blocks[:MAX_LINKS]:
        if len(uri) > 2000:
            continue
        MCPResourceLink.objects.create(server=server, user_id=ctx.user_id, thread_id=ctx.thread_id,
                                       tool_call_id=ctx.tool_call_id or None, uri=uri, name=name[:300],
                                       mime_type=mime[:200])
        links.append({"name": name[:300] or uri, "uri": uri, "mime_type": mime, "url": resource_url(server.pk, uri)})
    return links
