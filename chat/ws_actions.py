"""Client-frame actions of the thread websocket, as plain sync functions.

Each takes ``(user, thread, frame)`` — ``thread`` as the socket's access re-check just found
it (:func:`frame_act`: a socket may outlive a membership or a login) — validates the frame
with the REST endpoint's input serializer, calls one service, and returns a list of events
to send back to this socket only. A ``ServiceError`` or a serializer ``ValidationError``
becomes an ``error`` event in the consumer; the socket stays open.
"""

from __future__ import annotations

from django.http import Http404
from django.utils.translation import gettext as _

from agents.approvals.selectors import tool_call_get_for_decider
from agents.audit import audit_record
from agents.event_types import check_event
from agents.models import AuditEvent
from agents.selectors import run_get_for_user
from agents.services import run_cancel, run_create, tool_call_decide
from chat.api.tool_calls import DecisionSerializer
from chatplatform.credentials import authorization_key, scope_authorization, token_still_valid
from chatplatform.errors import ServiceError

from .api.serializers import RunCreateSerializer
from .models import Thread
from .selectors import thread_get_for_user, thread_may_write


def audit_rejected_frame(*, user, thread_id, reason: str) -> None:
    """Record a frame the server could not read (kept for the audit trail, then ignored)."""
    audit_record(kind=AuditEvent.Kind.FRAME_REJECTED, user=user, thread_id=thread_id,
                 detail={"reason": reason[:500]})


def message_send(*, user, thread: Thread, frame: dict) -> list[dict]:
    """``message.send``: the same input serializer and service as ``POST /threads/{id}/runs/``.
    Only the thread's owner may send (a workspace admin may read it, not write in it)."""
    data = RunCreateSerializer(data=frame)
    data.is_valid(raise_exception=True)
    if not thread_may_write(thread=thread, user=user):
        raise ServiceError("not_allowed", _("You cannot send messages in this thread."), 403)
    created = run_create(thread=thread, user=user, **data.validated_data)
    queued = {"run_id": str(created.run.pk),
              "user_message_id": str(created.user_message.pk) if created.user_message else None}
    check_event("run.queued", queued)
    return [{"type": "run.queued", **queued}]


def run_cancel_frame(*, user, thread: Thread, frame: dict) -> list[dict]:
    run_cancel(run=_thread_run(user=user, thread_id=str(thread.pk), run_id=frame.get("run_id")), user=user)
    return []


def _thread_run(*, user, thread_id: str, run_id):
    """The run ``run_id`` of this thread, visible to ``user``; ServiceError ``not_found``
    (``invalid_frame`` when the frame names no run)."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise ServiceError("invalid_frame", _('"run_id" must name a run: its id as a string.'), 400)
    try:
        run = run_get_for_user(user=user, run_id=run_id)
    except Http404 as exc:
        raise ServiceError("not_found", _("No such run."), 404) from exc
    if str(run.thread_id) != thread_id:
        raise ServiceError("not_found", _("No such run."), 404)
    return run


def run_for_resume(*, user, thread_id: str, run_id) -> int:
    """Check ``run_id`` belongs to this thread and the user may see it; returns the run's
    last saved seq. ServiceError ``not_found`` otherwise."""
    return _thread_run(user=user, thread_id=thread_id, run_id=run_id).last_event_seq


def token_from_scope(scope) -> str | None:
    """The API key the socket authenticated with (``chatplatform.credentials``), else None."""
    return authorization_key(scope_authorization(scope))


def socket_user_active(*, user, session_key: str | None, token: str | None) -> bool:
    """The user is active and their credential (token, or session after a logout) still exists."""
    from django.conf import settings
    from django.contrib.sessions.backends.base import SessionBase
    from django.utils.module_loading import import_string
    if token is not None:  # one statement: the token exists and its user is active
        return token_still_valid(user=user, key=token)
    user.refresh_from_db(fields=["is_active"])
    if not user.is_active:
        return False
    if session_key is not None:
        store: SessionBase = import_string(settings.SESSION_ENGINE + ".SessionStore")()
        return store.exists(session_key)
    return True


def socket_still_allowed(*, user, thread_id: str, session_key: str | None, token: str | None) -> bool:
    """Whether a connected socket may keep receiving: the user is active, their credential
    (token, or session after a logout) still exists, and the thread is still visible."""
    return socket_thread(user=user, thread_id=thread_id, session_key=session_key, token=token) is not None


def socket_thread(*, user, thread_id: str, session_key: str | None, token: str | None) -> Thread | None:
    """:func:`socket_still_allowed`, returning the thread it found visible (None: not allowed)."""
    if not socket_user_active(user=user, session_key=session_key, token=token):
        return None
    try:
        # A re-check of an open socket, not a new read: not recorded again under a break-glass grant.
        return thread_get_for_user(user=user, thread_id=thread_id, reading=None)
    except Http404:
        return None


def frame_act(*, action, user, thread_id: str, frame: dict, session_key: str | None,
              token: str | None) -> list[dict] | None:
    """One client frame in one database hop: the socket's access re-check, then ``action``
    (one of :data:`ACTIONS`) on the thread the check found. Returns the action's events for
    this socket (``run.queued`` for a send); None (nothing done) when the socket may no longer
    act; a refusal raises as the action does."""
    thread = socket_thread(user=user, thread_id=thread_id, session_key=session_key, token=token)
    if thread is None:
        return None
    return action(user=user, thread=thread, frame=frame)


def approval_decide(*, user, thread: Thread, frame: dict) -> list[dict]:
    """``approval.decide``: the same input serializer and service as
    ``POST /tool-calls/{id}/decision/``; a refusal names the call (the card re-enables)."""
    data = DecisionSerializer(data=frame)
    data.is_valid(raise_exception=True)
    try:
        tool_call = tool_call_get_for_decider(user=user, tool_call_id=frame.get("tool_call_id"))
    except Http404 as exc:
        raise ServiceError("not_found", _("No such tool call."), 404) from exc
    if tool_call.run.thread_id != thread.pk:
        raise ServiceError("not_found", _("No such tool call."), 404)
    try:
        tool_call_decide(tool_call=tool_call, user=user, decision=data.validated_data["decision"])
    except ServiceError as exc:
        exc.extra.setdefault("tool_call_id", str(tool_call.pk))
        raise
    return []


ACTIONS = {
    "message.send": message_send,
    "approval.decide": approval_decide,
    "run.cancel": run_cancel_frame,
}
