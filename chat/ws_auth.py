"""Websocket authentication and origin checking (see ``config/asgi.py``)."""

from __future__ import annotations

import logging
from urllib.parse import urlparse

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware, InstanceSessionWrapper, SessionMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import validate_host

from chatplatform.credentials import auser_for_authorization, names_api_scheme

logger = logging.getLogger(__name__)


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


_DEFAULT_PORTS = {"http": 80, "https": 443}
_WS_TO_HTTP = {"ws": "http", "wss": "https"}


def _origin_tuple(value: str) -> tuple[str, str, int] | None:
    """``scheme://host[:port]`` → ``(scheme, host, port)`` with the default port filled in;
    None for anything that is not an http(s) origin."""
    try:
        parsed = urlparse(value.strip())
        port = parsed.port
    except ValueError:
        return None
    scheme = (parsed.scheme or "").lower()
    if scheme not in _DEFAULT_PORTS or not parsed.hostname or parsed.path not in ("", "/"):
        return None
    return scheme, parsed.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _trusted(origin: tuple[str, str, int], entry: str) -> bool:
    """One ``CSRF_TRUSTED_ORIGINS`` entry: scheme and port must match exactly; the host too,
    or be a sub-domain of a ``*.example.com`` entry (Django's own wildcard rule)."""
    wildcard = "://*." in entry
    trusted = _origin_tuple(entry.replace("://*.", "://", 1) if wildcard else entry)
    if trusted is None:
        return False
    scheme, host, port = trusted
    if origin[0] != scheme or origin[2] != port:
        return False
    return origin[1] == host or (wildcard and origin[1].endswith("." + host))


def origin_allowed(origin: str, *, host: str | None = None, scheme: str = "ws") -> bool:
    """Whether a websocket handshake's ``Origin`` may speak for a browser session.

    Scheme, host and port are compared, never the host name alone. Allowed: an origin listed
    in ``CSRF_TRUSTED_ORIGINS`` (``https://*.example.com`` wildcards as in Django), or the
    request's own origin — ``http``/``https`` for a ``ws``/``wss`` connection, with the
    handshake's ``Host`` (host and port) — when that host is in ``ALLOWED_HOSTS``. Behind a
    TLS-terminating proxy that does not pass the scheme on, list the public origin in
    ``CSRF_TRUSTED_ORIGINS``.
    """
    parsed = _origin_tuple(origin)
    if parsed is None:
        return False
    if any(_trusted(parsed, entry) for entry in settings.CSRF_TRUSTED_ORIGINS):
        return True
    if not host:
        return False
    own_scheme = _WS_TO_HTTP.get(scheme, scheme)
    own = _origin_tuple(f"{own_scheme}://{host}")
    if own is None or own != parsed:
        return False
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    name = f"[{parsed[1]}]" if ":" in parsed[1] else parsed[1]  # IPv6 as ALLOWED_HOSTS writes it
    return validate_host(name, allowed)


class TokenAndOriginMiddleware:
    """Runs inside ``AuthMiddlewareStack``: applies the token header and the origin rule.

    * ``Authorization: Bearer <key>`` or ``Token <key>`` (``chatplatform.credentials``) → that
      token's user (overrides any cookie session; an unknown key → anonymous);
    * an ``Origin`` header that is neither a trusted origin nor the request's own (scheme,
      host and port; ``origin_allowed``) → anonymous;
    * no ``Origin`` and no token → anonymous (cookies alone are a browser's credentials).
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        scope = dict(scope)
        auth = _header(scope, b"authorization") or ""
        origin = _header(scope, b"origin")
        if origin is not None and not origin_allowed(
                origin, host=_header(scope, b"host"), scheme=scope.get("scheme") or "ws"):
            scope["user"] = AnonymousUser()
            scope["auth_error"] = "origin not allowed"
        elif names_api_scheme(auth):
            scope["user"] = await auser_for_authorization(auth) or AnonymousUser()
        elif origin is None:
            scope["user"] = AnonymousUser()
        return await self.app(scope, receive, send)


class WebsocketSessionMiddleware(SessionMiddleware):
    """Channels' ``SessionMiddleware`` (the session from the cookie in ``scope["session"]``)
    without its wrapper around ``send``. That wrapper saves a modified session and sets its
    cookie on ``http.response.start`` only, which a websocket never sends, yet it read the
    session's ``modified`` and ``is_empty()`` through a ``LazyObject`` on every message — one
    frame per token, a visible share of a streaming web process's CPU."""

    async def __call__(self, scope, receive, send):
        wrapper = InstanceSessionWrapper(scope, send)
        await wrapper.resolve_session()
        return await self.inner(wrapper.scope, receive, send)


class ClosesWhenUnavailable:
    """Outermost: the session, user or token look-up found no database (PostgreSQL down, its
    pool empty past ``DB_POOL_TIMEOUT_S``) or no Redis — before any consumer ran. The socket is
    accepted and closed with ``4503`` (``chat.consumers.CLOSE_LAYER_LOST``): the page says
    "reconnecting…" and tries again with backoff. It used to end in the server's handshake
    error (HTTP 500), which a browser reports as a failed connection, nothing more. A consumer's
    own loss is handled inside it (``chat.consumers.ClosesOnLayerLoss``). While the database
    pool is known to reach no server (``chatplatform.dbpool.unreachable``) it closes at once."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        from chat.consumers import CLOSE_LAYER_LOST
        from chatplatform.dbpool import adatabase_down

        if await adatabase_down():  # known down: at once, not after DB_POOL_TIMEOUT_S
            logger.warning("websocket %s: PostgreSQL unreachable; closing %s", scope.get("path", "?"), CLOSE_LAYER_LOST)
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_LAYER_LOST})
            return None
        try:
            return await self.inner(scope, receive, send)
        except Exception as exc:
            from chatplatform.api import is_unavailable
            from chatplatform.layers import LAYER_ERRORS

            if not (is_unavailable(exc) or isinstance(exc, LAYER_ERRORS)):
                raise
            logger.warning("websocket %s: no database or channel layer before the consumer (%s: %s); closing %s",
                           scope.get("path", "?"), type(exc).__name__, exc, CLOSE_LAYER_LOST)
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_LAYER_LOST})


def WebsocketAuthStack(inner):  # noqa: N802 - mirrors channels' AuthMiddlewareStack
    """Channels' ``AuthMiddlewareStack`` (cookies, session, user) with
    :class:`WebsocketSessionMiddleware`, then :class:`TokenAndOriginMiddleware`, inside
    :class:`ClosesWhenUnavailable`."""
    return ClosesWhenUnavailable(
        CookieMiddleware(WebsocketSessionMiddleware(AuthMiddleware(TokenAndOriginMiddleware(inner)))))
