"""Runs parked on a "connect" card (an OAuth MCP server the person has not connected): which
parked call a consent belongs to, and settling it when the callback lands."""

from __future__ import annotations

import uuid


def own_parked_call(user, server, raw: str):
    """The id of the call parked for ``server`` in one of ``user``'s runs named by ``raw``;
    None for anything else (unknown, someone else's, not parked on this server)."""
    try:
        value = uuid.UUID(str(raw))
    except ValueError:
        return None
    from agents.models import ToolCall

    found = ToolCall.objects.filter(pk=value, run__user=user, status=ToolCall.Status.AWAITING_APPROVAL,
                                    approval__rule="connect", approval__server=server.slug).exists()
    return value if found else None


def settle(request, *, connected: bool, error: str = "") -> None:
    """The consent ``request`` ended: resume the call parked on it (connected) or end it
    denied with the reason (declined or failed)."""
    if request.tool_call_id is None:
        return
