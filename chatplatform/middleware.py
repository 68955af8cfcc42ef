"""Request checks that apply to every view (``chatplatform.safe_input``, ``chatplatform.dbpool``)."""

from __future__ import annotations

import logging
from inspect import iscoroutinefunction

from django.http import HttpResponseBadRequest, JsonResponse
from django.utils.decorators import sync_and_async_middleware

logger = logging.getLogger(__name__)


def _has_nul(request) -> bool:
    if "\x00" in request.path or "\x00" in request.headers.get("Last-Event-ID", ""):
        return True
    return any("\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists())


def _nul_refused(request):
    message = "The request contains a NUL character (\\u0000) in its path or parameters."
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": "invalid_text", "message": message}}, status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


@sync_and_async_middleware
def reject_nul_middleware(get_response):
    """A NUL character in the path, a query parameter (name or value) or the ``Last-Event-ID``
    header is refused with 400 (``invalid_text``; the JSON error shape under ``/api/``) before
    any view runs — PostgreSQL cannot compare text containing NUL, so it would be a 500.
    Sync and async: on the async stack (SSE, the streaming OpenAI-compatible API) the check
    runs on the event loop — a ``MiddlewareMixin``'s ``process_request`` would be run through
    ``sync_to_async`` on Django's one thread-sensitive executor for every request."""
    if iscoroutinefunction(get_response):
        async def middleware(request):
            if _has_nul(request):
                return _nul_refused(request)
            return await get_response(request)
    else:
        def middleware(request):
            if _has_nul(request):
                return _nul_refused(request)
            return get_response(request)
    return middleware


@sync_and_async_middleware
def database_unreachable_middleware(get_response):
    """While the PostgreSQL pool is known to reach no server (``chatplatform.dbpool.unreachable``:
    its reconnection attempts failed for ``DB_POOL_RECONNECT_S``, none succeeded since and
    nothing listens at the server's address), a request is answered 503 at once
    (``chatplatform.api.unavailable_response``) instead of waiting ``DB_POOL_TIMEOUT_S`` for a
    connection and then failing. Static files are served before it (WhiteNoise). Each such
    request probes the server's address and starts a connection attempt, so the first request
    once the server listens again goes on to the pool and is served by that attempt. Sync and
    async: a request costs one dict look-up, and no thread hop, unless the pool is marked."""
    from .api import unavailable_response
    from .dbpool import adatabase_down, database_down

    def refuse(request):
        logger.warning("service unavailable (%s %s): PostgreSQL unreachable", request.method, request.path)
        return unavailable_response(request)

    if iscoroutinefunction(get_response):
        async def middleware(request):
            if await adatabase_down():
                return refuse(request)
            return await get_response(request)
    else:
        def middleware(request):
            if database_down():
                return refuse(request)
            return get_response(request)
    return middleware
