"""The audit trail's one writer: every ``AuditEvent`` row (decisions, refusals, permission
denials, rejected frames and UI contexts, MCP calls and drift) is written by
:func:`audit_record`, so each row has the same shape and an anonymous user is never stored."""

from __future__ import annotations

from .models import AuditEvent


def audit_record(*, kind: str, user=None, user_id=None, workspace_id=None, thread_id=None, run=None,
                 tool_name: str = "", detail: dict | None = None) -> AuditEvent:
    """Write one audit row of ``kind`` (an ``AuditEvent.Kind``). ``user`` (or ``user_id``):
    who acted — an anonymous user is stored as nobody; ``workspace_id``/``thread_id``/``run``:
    where; ``tool_name``: the tool concerned; ``detail``: JSON-safe facts (no secrets, no
    message text). Returns the row."""
    if user is not None and not getattr(user, "is_authenticated", False):
        user = None
    fields = {"user": user} if user is not None else {"user_id": user_id}
    return AuditEvent.objects.create(kind=kind, workspace_id=workspace_id, thread_id=thread_id, run=run,
                                     tool_name=tool_name, detail=detail or {}, **fields)
