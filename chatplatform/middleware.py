"""Request checks that apply to every view (``chatplatform.safe_input``)."""

from __future__ import annotations

from django.http import HttpResponseBadRequest, JsonResponse
from django.utils.deprecation import MiddlewareMixin


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
