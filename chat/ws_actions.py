"""Client-frame actions of the thread websocket, as plain sync functions.

Each takes ``(user, thread_id, frame)``, re-checks access through the selectors (a socket
may outlive a membership), calls one service, and returns a list of events to send back to
this socket only. Errors are :class:`FrameError` → an ``error`` event; the socket stays open.
"""

from __future__ import annotations

from django.http import Http404

from agents.selectors import run_get_for_user
from agents.services import RunRejected, run_cancel, run_create

from .selectors import thread_get_for_user

MAX_ENV_ID_CHARS = 100


class FrameError(Exception):
    def __init__(self, code: str, message: str, **extra) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


def _optional_bool(frame: dict, key: str) -> bool | None:
    value = frame.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise FrameError("invalid_frame", f"{key!r} must be true, false or absent.")


def message_send(*, user, thread_id: str, frame: dict) -> list[dict]:
    content = frame.get("content")
    if not isinstance(content, str):
        raise FrameError("invalid_frame", '"content" must be a string.')
    ui_context = frame.get("ui_context")
    if ui_context is not None and not isinstance(ui_context, dict):
        raise FrameError("invalid_frame", '"ui_context" must be an object.')
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


ACTIONS = {
    "message.send": message_send,
    "run.cancel": run_cancel_frame,
}
