"""Client-frame actions of the thread websocket, as plain sync functions.

Each takes ``(user, thread_id, frame)``, re-checks access through the selectors (a socket
may outlive a membership), calls one service, and returns a list of events to send back to
this socket only. Errors are :class:`FrameError` → an ``error`` event; the socket stays open.
"""

from __future__ import annotations

from django.http import Http404

from agents.models import AuditEvent
from agents.selectors import run_get_for_user, tool_call_get_for_user
from agents.services import RunRejected, run_cancel, run_create, tool_call_decide
from agents.ui_context import UIContextError, ui_context_validate

from .selectors import thread_get_for_user

MAX_ENV_ID_CHARS = 100


class FrameError(Exception):
    def __init__(self, code: str, message: str, **extra) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


def audit_rejected_frame(*, user, thread_id, reason: str) -> None:
    """Record a frame the server could not read (kept for the audit trail, then ignored)."""
    AuditEvent.objects.create(
        kind=AuditEvent.Kind.FRAME_REJECTED, user=user if getattr(user, "is_authenticated", False) else None,
        thread_id=thread_id, detail={"reason": reason[:500]},
    )


def _optional_bool(frame: dict, key: str) -> bool | None:
    value = frame.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise FrameError("invalid_frame", f"{key!r} must be true, false or absent.")


def message_send(*, user, thread_id: str, frame: dict) -> list[dict]:
    content = frame.get("content")
    if not isinstance(content, str):
        raise FrameError("invalid_frame", '"content" must be a string.')
    try:
        ui_context = ui_context_validate(frame["ui_context"]) if frame.get("ui_context") is not None else None
    except UIContextError as exc:
        AuditEvent.objects.create(kind=AuditEvent.Kind.UI_CONTEXT_REJECTED, user=user, thread_id=thread_id,
                                  detail={"code": exc.code, "message": exc.message, "status": exc.status})
        raise FrameError(exc.code, exc.message, status=exc.status) from exc
    env_id = frame.get("env_id") or ""
    if not isinstance(env_id, str) or len(env_id) > MAX_ENV_ID_CHARS:
        raise FrameError("invalid_frame", f'"env_id" must be a string of at most {MAX_ENV_ID_CHARS} chars.')
    try:
        thread = thread_get_for_user(user=user, thread_id=thread_id, write=True)
    except Http404 as exc:
        raise FrameError("not_allowed", "You cannot send messages in this thread.") from exc
    try:
        run_create(
            thread=thread,
            user=user,
            content=content,
            grounded=_optional_bool(frame, "grounded"),
            include_private=_optional_bool(frame, "include_private"),
            ui_context=ui_context,
            env_id=env_id,
        )
    except RunRejected as exc:
        raise FrameError(exc.code, exc.message) from exc
    return []


def run_cancel_frame(*, user, thread_id: str, frame: dict) -> list[dict]:
    try:
        run = run_get_for_user(user=user, run_id=frame.get("run_id"))
    except Http404 as exc:
        raise FrameError("not_found", "No such run.") from exc
    if str(run.thread_id) != thread_id:
        raise FrameError("not_found", "No such run.")
    try:
        run_cancel(run=run, user=user)
    except RunRejected as exc:
        raise FrameError(exc.code, exc.message) from exc
    return []


def run_for_resume(*, user, thread_id: str, run_id) -> int:
    """Check ``run_id`` belongs to this thread and the user may see it; returns the run's
    last saved seq. FrameError ``not_found`` otherwise."""
    try:
        run = run_get_for_user(user=user, run_id=run_id)
    except Http404 as exc:
        raise FrameError("not_found", "No such run.") from exc
    if str(run.thread_id) != thread_id:
        raise FrameError("not_found", "No such run.")
    return run.last_event_seq


def token_from_scope(scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == b"authorization":
            text = value.decode("latin-1")
            if text.lower().startswith("token "):
                return text[6:].strip()
    return None


def socket_still_allowed(*, user, thread_id: str, session_key: str | None, token: str | None) -> bool:
    """Whether a connected socket may keep receiving: the user is active, their credential
    (token, or session after a logout) still exists, and the thread is still visible."""
    from django.conf import settings
    from django.contrib.sessions.backends.base import SessionBase
    from django.utils.module_loading import import_string
    from rest_framework.authtoken.models import Token

    user.refresh_from_db(fields=["is_active"])
    if not user.is_active:
        return False
    if token is not None:
        if not Token.objects.filter(key=token, user=user).exists():
            return False
    elif session_key is not None:
        store: SessionBase = import_string(settings.SESSION_ENGINE + ".SessionStore")()
        if not store.exists(session_key):
            return False
    try:
        thread_get_for_user(user=user, thread_id=thread_id)
    except Http404:
        return False
    return True


def approval_decide(*, user, thread_id: str, frame: dict) -> list[dict]:
    decision = frame.get("decision")
    if decision not in ("approve", "deny"):
        raise FrameError("invalid_frame", '"decision" must be "approve" or "deny".')
    try:
        tool_call = tool_call_get_for_user(user=user, tool_call_id=frame.get("tool_call_id"))
    except Http404 as exc:
        raise FrameError("not_found", "No such tool call.") from exc
    if str(tool_call.run.thread_id) != thread_id:
        raise FrameError("not_found", "No such tool call.")
    try:
        tool_call_decide(tool_call=tool_call, user=user, decision=decision)
    except RunRejected as exc:
        raise FrameError(exc.code, exc.message, status=exc.status, tool_call_id=str(tool_call.pk)) from exc
    return []


ACTIONS = {
    "message.send": message_send,
    "approval.decide": approval_decide,
    "run.cancel": run_cancel_frame,
}
