"""API-wide pieces: the JSON error shape ``{"error": {"code", "message"}}`` (DESIGN §6)."""

from __future__ import annotations

import logging

from django.http import Http404
from django.utils.translation import gettext, gettext_noop
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .errors import ServiceError

logger = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """Raise from a view to answer ``{"error": {"code", "message"}}`` with ``status_code``."""

    def __init__(self, code: str, message: str, status_code: int = 400, headers: dict | None = None) -> None:
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.error_code = code
        self.extra_headers = headers or {}


# In English; each use translates it (gettext) into the language of the one it answers.
UNAVAILABLE_MESSAGE = gettext_noop("A backing service (database or broker) is not reachable right now; nothing was "
                                   "lost — try again in a few seconds.")


def flatten_detail(detail) -> str:
    """A DRF error detail (dict, list or string) as one readable line."""
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {flatten_detail(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return " ".join(flatten_detail(v) for v in detail)
    return str(detail)


def exception_handler(exc, context):
    """Every error as ``{"error": {"code": str, "message": str}}`` with a fitting status; a
    service's :class:`~chatplatform.errors.ServiceError` keeps its code and status (and
    ``Retry-After`` for 429s)."""
    if isinstance(exc, ServiceError):
        headers = {"Retry-After": str(max(1, round(exc.retry_after)))} if exc.retry_after else None
        exc = ApiError(exc.code, exc.message, exc.status, headers=headers)
    elif is_unavailable(exc):
        logger.warning("service unavailable: %s: %s", type(exc).__name__, exc)
        exc = ApiError("service_unavailable", gettext(UNAVAILABLE_MESSAGE), 503, headers={"Retry-After": "5"})
    if isinstance(exc, Http404) and getattr(exc, "api_status", None):
        # A 404 subclass that may say more to this caller (chat.selectors.ThreadBlinded: 403
        # ``thread_blinded`` to an admin, who knows the chat exists from its metadata).
        exc = ApiError(exc.api_code, str(exc), exc.api_status)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or gettext("Not found."))
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ApiError):
        code = exc.error_code
        for key, value in exc.extra_headers.items():
            response[key] = value
    elif isinstance(exc, exceptions.ValidationError):
        code = "invalid"
    else:
        codes = exc.get_codes() if isinstance(exc, exceptions.APIException) else "error"
        code = codes if isinstance(codes, str) else "error"
    if response.status_code == status.HTTP_404_NOT_FOUND:
        code = "not_found"
    message = flatten_detail(exc.detail) if isinstance(exc, exceptions.APIException) else str(exc)
    response.data = {"error": {"code": code, "message": message}}
    return response


def is_unavailable(exc: BaseException) -> bool:
    """A lost connection to PostgreSQL or Redis, or an empty database pool (not a bug in our
    code): REST answers 503 ``service_unavailable``, the websocket an ``error`` event of that
    code (``chat.consumers``)."""
    from django.db import InterfaceError, OperationalError

    if isinstance(exc, InterfaceError | OperationalError):
        return True
    try:
        from kombu.exceptions import OperationalError as BrokerError
        from redis.exceptions import ConnectionError as RedisConnectionError
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, BrokerError | RedisConnectionError)


def error_response(code: str, message: str, status_code: int) -> Response:
    return Response({"error": {"code": code, "message": message}}, status=status_code)


class ClientErrorLogFilter(logging.Filter):
    """For Django's ``django.security.RequestDataTooBig`` / ``TooManyFieldsSent`` /
    ``TooManyFilesSent`` loggers: Django logs a refused request body as an ERROR with a
    traceback, but it is the client's error, answered 413 / 400 (:func:`bad_request`) — one
    WARNING line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info = record.exc_text = None
        return True


def bad_request(request, exception=None):
    """``handler400``: API paths answer the JSON error shape (413 for a body over
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``; under ``/v1/`` OpenAI's ``{"error": {"message", "type",
    "param", "code"}}``); pages keep Django's default."""
    from django.core.exceptions import RequestDataTooBig
    from django.http import JsonResponse
    from django.views.defaults import bad_request as page_bad_request

    if request.path.startswith("/v1/"):  # the OpenAI-compatible API: OpenAI's error shape
        too_big = isinstance(exception, RequestDataTooBig)
        return JsonResponse({"error": {
            "message": "The request body is too large." if too_big else "Bad request.",
            "type": "invalid_request_error", "param": None, "code": "too_large" if too_big else "bad_request",
        }}, status=413 if too_big else 400)
    if request.path.startswith("/api/"):
        if isinstance(exception, RequestDataTooBig):
            return JsonResponse({"error": {"code": "too_large", "message": "The request body is too large."}}, status=413)
        return JsonResponse({"error": {"code": "bad_request", "message": "Bad request."}}, status=400)
    return page_bad_request(request, exception)


def server_error(request):
    """``handler500``: an unhandled exception that is a lost backing service (:func:`is_unavailable`:
    PostgreSQL down or its pool empty past ``DB_POOL_TIMEOUT_S``, Redis down) answers **503** with
    ``Retry-After: 5`` — the JSON error shape (``service_unavailable``) under ``/api/`` and
    ``/v1/``, elsewhere a short page that says so and reloads itself after 5 s. It touches no
    database (no session, no user). Any other exception: Django's default 500 page.

    Django calls it inside the ``except`` block of the failed request, so ``sys.exc_info()``
    is the exception (with ``DEBUG`` on, Django shows its technical page instead)."""
    import sys

    from django.views.defaults import server_error as page_server_error

    exc = sys.exc_info()[1]
    if exc is None or not is_unavailable(exc):
        return page_server_error(request)
    logger.warning("service unavailable (%s %s): %s: %s", request.method, request.path, type(exc).__name__, exc)
    return unavailable_response(request)


def unavailable_response(request):
    """The 503 for a request that needs a backing service that is not reachable: the JSON error
    shape ``service_unavailable`` under ``/api/`` and ``/v1/``, elsewhere the page
    ``503.html`` with ``Refresh: 5``; ``Retry-After: 5`` on both. Touches no database."""
    from django.http import HttpResponse, JsonResponse
    from django.template.loader import render_to_string

    if request.path.startswith(("/api/", "/v1/")):
        response = JsonResponse({"error": {"code": "service_unavailable", "message": gettext(UNAVAILABLE_MESSAGE)}}, status=503)
    else:
        response = HttpResponse(render_to_string("503.html", {"message": gettext(UNAVAILABLE_MESSAGE)}),
                                status=503, content_type="text/html; charset=utf-8")
        response["Refresh"] = "5"  # the browser reloads the page by itself
    response["Retry-After"] = "5"
    response._has_been_logged = True  # the caller logs one warning line: no ERROR with a traceback per request
    return response
