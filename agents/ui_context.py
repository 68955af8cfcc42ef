"""Validation of the UI context a client attaches to a thread or a send.

``{objectType, objectId, objectName, envId, route, contextVersion}`` — informational only
(ss-tools "agent chat context" contract): payload over 4 KB → 413; unknown ``objectType`` or
``objectName`` over 256 chars → 422; unknown keys are dropped.
"""

from __future__ import annotations

import json

from django.conf import settings

from agents.audit import audit_record
from agents.models import AuditEvent
from chatplatform.errors import ServiceError

MAX_BYTES = 4 * 1024
MAX_NAME_CHARS = 256
MAX_FIELD_CHARS = 512
KEYS = ("objectType", "objectId", "objectName", "envId", "route", "contextVersion")


class UIContextError(ServiceError):
    """``status``: 413 or 422; ``code``: ``ui_context_too_large`` | ``ui_context_invalid``."""


def ui_context_validate(raw) -> dict:
    """Return the cleaned context (only known keys; ``{}`` for None) or raise UIContextError."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UIContextError("ui_context_invalid", "ui_context must be a JSON object.", 422)
    try:
        size = len(json.dumps(raw, ensure_ascii=False).encode("utf-8"))
    except (UnicodeEncodeError, TypeError, ValueError) as exc:  # lone surrogates, odd values
        raise UIContextError("ui_context_invalid", "ui_context must be valid JSON text (no lone surrogates).", 422) from exc
    if size > MAX_BYTES:
        raise UIContextError("ui_context_too_large", f"ui_context is {size} bytes; the limit is {MAX_BYTES}.", 413)
    cleaned: dict = {}
    for key in KEYS:
        value = raw.get(key)
        if value is None or value == "":
            continue
        if key == "contextVersion":
            if not isinstance(value, int | str):
                raise UIContextError("ui_context_invalid", "contextVersion must be a number or a string.", 422)
        elif not isinstance(value, str | int):
            raise UIContextError("ui_context_invalid", f"{key} must be a string.", 422)
        value = value if isinstance(value, int) else str(value)
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            raise UIContextError("ui_context_invalid", f"{key} is longer than {MAX_FIELD_CHARS} characters.", 422)
        cleaned[key] = value
    object_type = cleaned.get("objectType")
    if object_type is not None and object_type not in settings.UI_CONTEXT_OBJECT_TYPES:
        known = ", ".join(settings.UI_CONTEXT_OBJECT_TYPES)
        raise UIContextError("ui_context_invalid", f"Unknown objectType {object_type!r}; known: {known}.", 422)
    if len(str(cleaned.get("objectName", ""))) > MAX_NAME_CHARS:
        raise UIContextError("ui_context_invalid", f"objectName is longer than {MAX_NAME_CHARS} characters.", 422)
    return cleaned


def ui_context_accept(*, raw, user, workspace_id=None, thread_id=None) -> dict:
    """:func:`ui_context_validate` for a request: a rejected context is recorded as an
    ``ui_context_rejected`` audit event (committed even when the caller's transaction rolls
    back, since it is written before any) and the ``UIContextError`` re-raised."""
    try:
        return ui_context_validate(raw)
    except UIContextError as exc:
        audit_record(
            kind=AuditEvent.Kind.UI_CONTEXT_REJECTED, user=user, workspace_id=workspace_id, thread_id=thread_id,
            detail={"code": exc.code, "message": exc.message, "status": exc.status},
        )
        raise
