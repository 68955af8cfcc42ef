"""What the chat shows of an MCP call besides its row, read back for a thread's messages
(``GET /threads/{id}/messages/`` → each tool call's ``elicitations`` and ``links``): the
server's questions (a pending one with its form, so a reload draws the card again) and the
resources it linked."""

from __future__ import annotations

from .models import MCPElicitation, MCPResourceLink
from .resource_links import resource_url


def call_extras(tool_call_ids) -> dict[str, dict]:
    """``str(tool_call_id) → {"elicitations": [...], "links": [...]}`` for the calls that have
    any (two queries). An elicitation: ``{elicitation_id, server, server_name, message, status,
    reason, expires_at, fields}`` — ``fields`` only while it is pending; never an answer."""
    ids = [i for i in tool_call_ids if i]
    out: dict[str, dict] = {}
    if not ids:
        return out
    for row in MCPElicitation.objects.filter(tool_call_id__in=ids).order_by("created_at"):
        pending = row.status == MCPElicitation.Status.PENDING
        out.setdefault(str(row.tool_call_id), {}).setdefault("elicitations", []).append({
            "elicitation_id": str(row.pk), "server": row.server_slug, "server_name": row.server_name,
            "message": row.message, "status": row.status, "reason": row.reason,
            "expires_at": row.expires_at.isoformat(), **({"fields": row.fields} if pending else {}),
        })
    for link in MCPResourceLink.objects.filter(tool_call_id__in=ids).order_by("pk"):
        out.setdefault(str(link.tool_call_id), {}).setdefault("links", []).append({
            "name": link.name or link.uri, "uri": link.uri, "mime_type": link.mime_type,
            "url": resource_url(link.server_id, link.uri)})
    return out
