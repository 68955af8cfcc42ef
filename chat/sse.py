"""``GET /api/v1/runs/{id}/events/``: a run's events as Server-Sent Events (DESIGN §6, §7).

``id: <seq>``, ``event: <type>``, ``data: <json>`` per event; ``Last-Event-ID`` (header, or
``?after=`` for clients that cannot set it) resumes after that seq; a ``: keep-alive``
comment every ``SSE_KEEPALIVE_S`` seconds while idle; the response ends after the terminal
event. Events come from the event log first, then live from the thread's group, through the
same gap-filling, de-duplicating cursor as the websocket. While Redis is unreachable the
stream stays open with keep-alive comments and goes on from the log once it is back. A reader
who loses access (removed from the workspace, logged out …) gets an ``error`` event
``access_revoked`` and the end, at once on the access-change notice, else within
``STREAM_ACCESS_RECHECK_S`` (``chat.stream_access``).
"""

from __future__ import annotations

import json
import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import Http404, JsonResponse, StreamingHttpResponse

from agents.presentation import event_for_viewer, sees_error_details
from agents.selectors import run_get_for_user
from agents.streams import KEEPALIVE, run_event_stream
from chatplatform.credentials import auser_or_refusal, authorization_key, names_api_scheme
from chatplatform.safe_input import BadInput, parse_int

from .stream_access import StreamAccess, stream_access

logger = logging.getLogger(__name__)


def _error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def _format_sse(event: dict) -> str:
    return f"id: {event.get('seq', '')}\nevent: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"


async def run_events(request, run_id):
    auth = request.headers.get("Authorization", "")
    token = session_key = refusal = None
    if names_api_scheme(auth):
        user, refusal = await auser_or_refusal(auth)
        token = authorization_key(auth)
    else:
        user = await request.auser()
        session_key = getattr(getattr(request, "session", None), "session_key", None)
    if refusal is not None:
        return _error(refusal.code, refusal.message, 401)
    if user is None or not user.is_authenticated:
        return _error("not_authenticated", "Authentication credentials were not provided.", 401)
    try:
        run = await sync_to_async(run_get_for_user)(user=user, run_id=run_id)
    except Http404:
        return _error("not_found", "No such run.", 404)
    raw_after = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    try:
        after = parse_int(raw_after, "Last-Event-ID (or after)", minimum=0)
    except BadInput as exc:
        return _error(exc.code, f"{exc.message} It is the seq of the last event you have.", 400)
    detailed = await sync_to_async(sees_error_details)(user=user, workspace_id=run.thread.workspace_id)
    access = stream_access(user=user, thread_id=run.thread_id, session_key=session_key, token=token)
    response = StreamingHttpResponse(_stream(str(run.pk), run.thread_id, after, detailed=detailed, access=access),
                                     content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _stream(run_id: str, thread_id, after: int, *, detailed: bool = False, access: StreamAccess | None = None):
    """The run's events as SSE (``agents.streams.run_event_stream``), a comment line as the
    keep-alive; ``detailed``: the viewer sees upstream error detail
    (``agents.presentation.event_for_viewer``); ``access``: the reader's access re-check
    (a reader who loses access gets an ``error`` event ``access_revoked``, then the end)."""
    keepalive_s = float(settings.SSE_KEEPALIVE_S)
    async for event in run_event_stream(run_id, thread_id, after=after, keepalive_s=keepalive_s,
                                        check_s=keepalive_s, **(access.stream_kwargs() if access else {})):
        if event is KEEPALIVE:
            yield ": keep-alive\n\n"
        else:
            yield _format_sse(event_for_viewer(event, detailed=detailed))


def schema_hook(result, generator, request, public):
    """drf-spectacular post-processing: document the SSE endpoint (a plain async view)."""
    result.setdefault("paths", {})["/api/v1/runs/{run_id}/events/"] = {
        "get": {
            "operationId": "runs_events",
            "summary": "Stream a run's events (Server-Sent Events)",
            "description": __doc__,
            "tags": ["runs"],
            "parameters": [
                {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}},
                {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "integer"}},
                {"name": "after", "in": "query", "required": False, "schema": {"type": "integer"}},
            ],
            "responses": {
                "200": {"description": "text/event-stream of run events",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                "404": {"description": "No such run (or not yours)"},
            },
        }
    }
    return result
