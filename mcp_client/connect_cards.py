"""Runs parked on a "connect" card (an OAuth MCP server the person has not connected): which
parked call a consent belongs to, and settling it when the callback lands
(``agents.services.decisions.connection_settled``)."""

from __future__ import annotations

import uuid

from agents.approvals.requests import CONNECT_RULE
from agents.models import ToolCall
from agents.services.decisions import connection_settled


def own_parked_call(user, server, raw: str):
    """The id of the call parked on ``server``'s connect card in one of ``user``'s runs named
    by ``raw``; None for anything else (unknown, someone else's, not parked on this server)."""
    try:
        value = uuid.UUID(str(raw))
    except ValueError:
        return None
    found = ToolCall.objects.filter(pk=value, run__user=user, status=ToolCall.Status.AWAITING_APPROVAL,
                                    approval__rule=CONNECT_RULE, approval__server=server.slug).exists()
    return value if found else None


def settle(request, *, connected: bool, error: str = "") -> bool:
    """The consent ``request`` (an ``MCPAuthRequest``) ended: resume the call parked on it
    (connected) or end it denied with the reason (declined or failed). False when no call
    was parked on it or it was settled, expired or cancelled meanwhile."""
    if request.tool_call_id is None:
        return False
    return connection_settled(tool_call_id=request.tool_call_id, user=request.user, connected=connected,
                              reason=error)
