"""Websocket authentication and origin checking (see ``chatplatform/asgi.py``)."""

from __future__ import annotations

from urllib.parse import urlparse

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import validate_host


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@database_sync_to_async
def _user_for_token(key: str):
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


def origin_allowed(origin: str) -> bool:
    """``Origin`` must name one of ``ALLOWED_HOSTS`` (or a ``CSRF_TRUSTED_ORIGINS`` entry)."""
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parsed = urlparse(origin)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return False
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return validate_host(parsed.hostname, allowed)


class TokenAndOriginMiddleware:
    """Runs inside ``AuthMiddlewareStack``: applies the token header and the origin rule.

    * ``Authorization: Token <key>`` → that token's user (overrides any cookie session);
    * an ``Origin`` header from a host not allowed → anonymous;
    * no ``Origin`` and no token → anonymous (cookies alone are a browser's credentials).
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        scope = dict(scope)
        auth = _header(scope, b"authorization") or ""
        origin = _header(scope, b"origin")
        if origin is not None and not origin_allowed(origin):
            scope["user"] = AnonymousUser()
            scope["auth_error"] = "origin not allowed"
        elif auth.lower().startswith("token "):
            scope["user"] = await _user_for_token(auth[6:].strip())
        elif origin is None:
            scope["user"] = AnonymousUser()
        return await self.app(scope, receive, send)


def WebsocketAuthStack(inner):  # noqa: N802 - mirrors channels' AuthMiddlewareStack
    return AuthMiddlewareStack(TokenAndOriginMiddleware(inner))
