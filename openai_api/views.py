"""``POST /v1/chat/completions`` and ``GET /v1/models`` in the OpenAI wire format.

Auth: ``Authorization: Bearer <platform API token>`` (what every OpenAI client sends; the
token of ``POST /api/v1/auth/token/``), or ``Token <key>``.

The run executes in the platform's executor; this view follows its events (event log
first, then the thread's group, through the same cursor as SSE) and answers:

* ``stream: true`` — ``chat.completion.chunk`` server-sent events: text as it streams
  (assistant messages of the run separated by a blank line; server-side tool calls are not
  shown), client tool calls at the end with ``finish_reason: "tool_calls"``, a usage chunk
  when ``stream_options.include_usage``, then ``data: [DONE]``. A failed run sends
  ``data: {"error": {"message", "type": "api_error", "code"}}`` then ``data: [DONE]`` (the
  SDKs raise it). A ``: keep-alive`` comment (ignored by SSE clients) every
  ``SSE_KEEPALIVE_S`` while nothing else is sent — the run waiting for a worker, a silent
  model, Redis away — so a proxy's idle timeout does not cut the stream. What the stream
  cannot mend ends it the same way, with these codes (the run goes on; the whole answer is
  in the thread; the conversation is not remembered):

  - ``answer_restarted``: the worker was lost mid-answer and the model asked again (a lost
    attempt); its new answer differs from the text already streamed. When it repeats that
    text the stream continues seamlessly (``openai_api.streaming.StreamedAnswer``).
  - ``events_missing``: part of the run's events was lost (a hole in the event log); at the
    end the rest is sent from the stored answer, unless that answer does not continue the
    text sent.
* otherwise one ``chat.completion`` object.

When a platform tool needs a person's approval, the answer says so in text and ends
(``finish_reason: "stop"``; ``chatplatform.status`` is ``awaiting_approval``): the decision
is made in the platform's inbox or UI and the run goes on in the thread. A run that is not
done after ``COMPAT_API_WAIT_S`` (300 s) ends the response the same way with a note; the run
itself goes on. Every response carries ``X-Thread-Id`` (also ``chatplatform.thread_id``):
send it back to continue the thread explicitly.

Errors: ``{"error": {"message", "type", "param", "code"}}`` with 400/401/403/404/409/413/429;
the body is checked first as REST bodies are (``openai_api.validation``: ``invalid_json``,
``nested_too_deeply``, ``invalid_text``, ``too_many_messages``).
"""

from __future__ import annotations

import asyncio
import json
import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import JsonResponse, StreamingHttpResponse

from agents.presentation import error_for_viewer
from agents.streams import ACCESS_REVOKED, PARKED, run_event_stream
from chat.stream_access import StreamAccess, stream_access
from chatplatform.credentials import auser_or_refusal, authorization_key

from .services import (
    ApiRejected,
    Started,
    answer_message,
    completion_abandoned,
    completion_outcome,
    completion_start,
    conversation_remember,
    model_list,
)
from .streaming import StreamedAnswer, failure_message
from .validation import parse_body

logger = logging.getLogger(__name__)


def error(code: str, message: str, status: int, *, param: str | None = None) -> JsonResponse:
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
            429: "rate_limit_error"}.get(status, "invalid_request_error")
    return JsonResponse({"error": {"message": message, "type": kind, "code": code, "param": param}}, status=status)


async def _user(request):
    """``(user, None)``, or ``(None, the 401)``: a refused key (expired, revoked) says why."""
    user, refusal = await auser_or_refusal(request.headers.get("Authorization", ""))
    if user is not None:
        return user, None
    if refusal is not None:
        return None, error(refusal.code, refusal.message, 401)
    return None, error("invalid_api_key", "Send a platform API key: Authorization: Bearer <key>.", 401)


async def models(request):
    if request.method != "GET":
        return error("method_not_allowed", "Use GET.", 405)
    user, refused = await _user(request)
    if refused is not None:
        return refused
    return JsonResponse({"object": "list", "data": await sync_to_async(model_list)(user=user)})


def _body(request) -> bytes:
    """The request body within ``COMPAT_API_MAX_BODY_BYTES`` (larger than Django's
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` for the other APIs: base64 image parts make big bodies);
    ApiRejected ``too_large`` (413) beyond."""
    limit = int(getattr(settings, "COMPAT_API_MAX_BODY_BYTES", 32 * 1024 * 1024))
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise ApiRejected("too_large", "The request body is too large.", 413)
    data = request.read(limit + 1)
    if len(data) > limit:
        raise ApiRejected("too_large", "The request body is too large.", 413)
    return data


async def chat_completions(request):
    if request.method != "POST":
        return error("method_not_allowed", "Use POST.", 405)
    user, refused = await _user(request)
    if refused is not None:
        return refused
    try:
        # As REST bodies are checked (depth, NUL, lone surrogates) plus a message count.
        body = parse_body(_body(request))
        started = await sync_to_async(completion_start)(
            user=user, body=body, thread_header=request.headers.get("X-Thread-Id", ""),
            workspace_header=request.headers.get("X-Workspace", ""),
            user_agent=request.headers.get("User-Agent", ""),
        )
    except ApiRejected as exc:
        response = error(exc.code, exc.message, exc.status, param=exc.extra.get("param"))
        if exc.retry_after:
            response["Retry-After"] = str(max(1, round(exc.retry_after)))
        return response
    stream_options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
    access = stream_access(user=user, thread_id=started.thread_id,
                           token=authorization_key(request.headers.get("Authorization", "")))
    if body.get("stream"):
        response = StreamingHttpResponse(_sse(started, bool(stream_options.get("include_usage")), user, access),
                                         content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
    else:
        status, payload = await _complete(started, access)
        response = JsonResponse(payload, status=status)
    response["X-Thread-Id"] = started.thread_id
    return response


def _approval_note(event: dict, thread_id: str) -> str:
    risk = event.get("risk_level") or event.get("risk") or ""
    return (f"[Waiting for approval: the platform tool `{event.get('tool')}` ({risk}) needs a person's decision "
            f"({event.get('arguments_summary') or 'no arguments'}). Approve or deny it in chatplatform; the answer "
            f"continues in thread {thread_id}.]")


def _timeout_note(thread_id: str) -> str:
    wait = float(getattr(settings, "COMPAT_API_WAIT_S", 300.0))
    return f"[Still working after {wait:.0f} s; the answer continues in thread {thread_id}.]"


def _platform(started: Started, status: str) -> dict:
    return {"thread_id": started.thread_id, "run_id": started.run_id, "status": status}


def _access_revoked(event: dict) -> bool:
    return event["type"] == "error" and event.get("code") == ACCESS_REVOKED


async def _complete(started: Started, access: StreamAccess | None = None) -> tuple[int, dict]:
    note, failure = "", None
    async for event in run_event_stream(started.run_id, started.thread_id, stop_at_park=True, every_event=False,
                                       wait_s=float(settings.COMPAT_API_WAIT_S),
                                       **(access.stream_kwargs() if access else {})):
        if _access_revoked(event):  # the caller lost access while waiting: nothing of the answer
            return 403, {"error": {"message": event["message"], "type": "permission_error", "code": ACCESS_REVOKED,
                                   "param": None}}
        if event["type"] == PARKED:
            note = _approval_note(event, started.thread_id)
        elif event["type"] == "wait.timeout":
            note = _timeout_note(started.thread_id)
        elif event["type"] == "run.failed":
            failure = error_for_viewer(event.get("error") or {}, detailed=started.detailed)
    outcome = await sync_to_async(completion_outcome)(run_id=started.run_id, client_tool_names=started.client_tool_names)
    if failure is not None and not outcome.text:
        code = failure.get("code") or "run_failed"
        return 502, {"error": {"message": failure.get("message") or "The run failed.", "type": "api_error",
                               "code": code, "param": None}, "chatplatform": _platform(started, outcome.status)}
    text = "\n\n".join(t for t in (outcome.text, note) if t)
    calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
             for c in outcome.tool_calls]
    message = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    await sync_to_async(conversation_remember)(thread_id=started.thread_id, messages=started.messages,
                                                answer=answer_message(text, outcome.tool_calls))
    status = "awaiting_approval" if note and not note.startswith("[Still") else \
        ("running" if note else outcome.status)
    return 200, {
        "id": f"chatcmpl-{started.run_id}", "object": "chat.completion", "created": started.created,
        "model": started.model_id,
        "choices": [{"index": 0, "message": message, "finish_reason": outcome.finish_reason if not note else "stop",
                     "logprobs": None}],
        "usage": outcome.usage,
        "chatplatform": _platform(started, status),
    }


def _chunk(started: Started, delta: dict, finish: str | None = None, **extra) -> str:
    body = {"id": f"chatcmpl-{started.run_id}", "object": "chat.completion.chunk", "created": started.created,
            "model": started.model_id, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                                   "logprobs": None}], **extra}
    return f"data: {json.dumps(body, separators=(',', ':'), ensure_ascii=False)}\n\n"


def _stream_error(code: str, message: str) -> str:
    return f"data: {json.dumps({'error': {'message': message, 'type': 'api_error', 'code': code}})}\n\n"


async def _sse(started: Started, include_usage: bool, user, access: StreamAccess | None = None):
    """The stream's chunks. A client that disconnects before the run ended (the ASGI handler
    cancels this generator's task, or closes it) cancels the run
    (:func:`openai_api.services.completion_abandoned`; ``COMPAT_API_CANCEL_ON_DISCONNECT``).
    A client that loses access to the thread (``access``) gets an error chunk with code
    ``access_revoked`` and ``[DONE]``; the run goes on."""
    ended = False
    try:
        async for chunk in _sse_chunks(started, include_usage, access):
            yield chunk
        ended = True
    finally:
        if not ended:
            # Shielded: the task is being cancelled, and the cancel must still reach the run.
            cancelled = await asyncio.shield(sync_to_async(completion_abandoned)(run_id=started.run_id, user=user))
            logger.info("run %s: the /v1 client disconnected mid-stream%s", started.run_id,
                        "; run cancelled" if cancelled else "")


async def _sse_chunks(started: Started, include_usage: bool, access: StreamAccess | None = None):
    yield _chunk(started, {"role": "assistant", "content": ""})
    answer = StreamedAnswer()  # the text the client has, message by message
    note, failure, revoked = "", None, None
    events = run_event_stream(started.run_id, started.thread_id, stop_at_park=True,
                              keepalive_s=float(settings.SSE_KEEPALIVE_S), wait_s=float(settings.COMPAT_API_WAIT_S),
                              **(access.stream_kwargs() if access else {}))
    try:
        async for event in events:
            kind = event["type"]
            if kind == "keepalive":
                yield ": keep-alive\n\n"
                continue
            if _access_revoked(event):
                revoked = event
                break
            text = answer.feed(event)
            if answer.failed:
                break
            if text:
                yield _chunk(started, {"content": text})
            elif kind == PARKED:
                note = _approval_note(event, started.thread_id)
            elif kind == "wait.timeout":
                note = _timeout_note(started.thread_id)
            elif kind == "run.failed":
                failure = error_for_viewer(event.get("error") or {}, detailed=started.detailed)
    finally:
        await events.aclose()
    if revoked is not None:  # nothing more of this thread for this client; the run goes on
        yield _stream_error(ACCESS_REVOKED, revoked["message"])
        yield "data: [DONE]\n\n"
        return
    if not answer.failed and failure is None:
        answer.finish()
    if answer.failed:  # the stream cannot be mended; the run goes on, its answer is in the thread
        yield _stream_error(answer.failed, failure_message(answer.failed, started.thread_id))
        yield "data: [DONE]\n\n"
        return
    outcome = await sync_to_async(completion_outcome)(run_id=started.run_id, client_tool_names=started.client_tool_names)
    if failure is not None:
        yield _stream_error(failure.get("code") or "run_failed", failure.get("message") or "The run failed.")
        yield "data: [DONE]\n\n"
        return
    if answer.hole:  # part of the stream was lost: the rest comes from the stored answer
        text = answer.reconcile(outcome.texts)
        if answer.failed:
            yield _stream_error(answer.failed, failure_message(answer.failed, started.thread_id))
            yield "data: [DONE]\n\n"
            return
        if text:
            yield _chunk(started, {"content": text})
    shown_note = ("\n\n" if answer.text else "") + note if note else ""
    if shown_note:
        yield _chunk(started, {"content": shown_note})
    finish = "stop" if note else outcome.finish_reason
    if outcome.tool_calls and not note:
        calls = [{"index": n, "id": c["id"], "type": "function",
                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for n, c in enumerate(outcome.tool_calls)]
        yield _chunk(started, {"tool_calls": calls})
    status = "awaiting_approval" if note and not note.startswith("[Still") else ("running" if note else outcome.status)
    yield _chunk(started, {}, finish, chatplatform=_platform(started, status))
    if include_usage:
        body = {"id": f"chatcmpl-{started.run_id}", "object": "chat.completion.chunk", "created": started.created,
                "model": started.model_id, "choices": [], "usage": outcome.usage}
        yield f"data: {json.dumps(body, separators=(',', ':'))}\n\n"
    # Remembered before [DONE]: a client that resends the history right after the stream ends
    # must find this thread.
    await sync_to_async(conversation_remember)(thread_id=started.thread_id, messages=started.messages,
                                                answer=answer_message(answer.text + shown_note, outcome.tool_calls))
    yield "data: [DONE]\n\n"
