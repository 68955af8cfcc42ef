"""Request checks that apply to every view (``chatplatform.safe_input``, ``chatplatform.dbpool``)."""

from __future__ import annotations

import logging

from django.http import HttpResponseBadRequest, JsonResponse
from django.utils.deprecation import MiddlewareMixin

logger = logging.getLogger(__name__)


class RejectNulMiddleware(MiddlewareMixin):
    """A NUL character in the path, a query parameter (name or value) or the ``Last-Event-ID``
    header is refused with 400 (``invalid_text``; the JSON error shape under ``/api/``) before
    any view runs — PostgreSQL cannot compare text containing NUL, so it would be a 500.
    Sync and async capable (``MiddlewareMixin``): it never forces the async stack (SSE, the
    streaming OpenAI-compatible API) through a thread hop."""

    def process_request(self, request):
        if self._has_nul(request):
            message = "The request contains a NUL character (\\u0000) in its path or parameters."
            if request.path.startswith("/api/"):
                return JsonResponse({"error": {"code": "invalid_text", "message": message}}, status=400)
            return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return None

    @staticmethod
    def _has_nul(request) -> bool:
        if "\x00" in request.path or "\x00" in request.headers.get("Last-Event-ID", ""):
            return True
        return any("\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists())


def default_pool():
    """The ``default`` alias's psycopg pool, or None (SQLite, ``DB_POOL=false``)."""
    from django.db import connections

    return getattr(connections["default"], "pool", None)


class DatabaseUnreachableMiddleware(MiddlewareMixin):
    """While the PostgreSQL pool is known to reach no server (``chatplatform.dbpool.unreachable``:
    its reconnection attempts failed for ``DB_POOL_RECONNECT_S`` and none succeeded since), a
    request is answered 503 at once (``chatplatform.api.unavailable_response``) instead of
    waiting ``DB_POOL_TIMEOUT_S`` for a connection and then failing. Static files are served
    before it (WhiteNoise). Each such request probes the server's address and starts a
    connection attempt, so the first request once the server listens again goes on to the
    pool and is served by that attempt."""

    def process_request(self, request):
        from .api import unavailable_response
        from .dbpool import unreachable

        pool = default_pool()
        if pool is None or not unreachable(pool):
            return None
        logger.warning("service unavailable (%s %s): PostgreSQL unreachable", request.method, request.path)
        return unavailable_response(request)
