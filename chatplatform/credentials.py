"""The one way an ``Authorization`` header becomes a user: REST (DRF), the websocket, SSE,
``/v1`` and the knowledge base's ``/mcp/`` endpoint all call this module, so every door takes
the same schemes and refuses the same things.

The scheme rule: ``Bearer <key>`` (what OpenAI and MCP clients send) or ``Token <key>`` (DRF's
word), the scheme case-insensitive, one key with no spaces inside. A key is one of:

* a kind of key an app registers here (:func:`register_key_kind`, by the key's prefix): the
  self-service API keys (``cp_…``, the ``apikeys`` app) — this library imports no app, so the
  app hands in its look-up and its re-check. A kind may refuse a key it knows with a reason
  (:class:`KeyRefused`: expired, revoked), which the door answers as a 401 with that message;
* otherwise a password-posted token (``rest_framework.authtoken``'s ``Token``, made by
  ``POST /api/v1/auth/token/`` or an admin), kept for compatibility.

A key of an inactive user is no credential.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication

from .dbasync import db_async

SCHEMES = ("bearer", "token")
CHALLENGE = 'Bearer realm="chatplatform"'


def authorization_key(header: str | bytes | None) -> str | None:
    """The API key an ``Authorization`` header carries (``Bearer <key>`` or ``Token <key>``),
    else None: no header, another scheme (``Basic …``), no key, or more than one word."""
    if not header:
        return None
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() not in SCHEMES:
        return None
    return parts[1]


def names_api_scheme(header: str | bytes | None) -> bool:
    """The header is meant as an API credential (its scheme is ``Bearer`` or ``Token``), well
    formed or not: such a request is judged by its key alone, never by a session cookie."""
    if not header:
        return False
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    return header.split(" ", 1)[0].strip().lower() in SCHEMES


class KeyRefused(Exception):
    """A key its kind knows but refuses (expired, revoked): ``code`` and ``message`` are what
    the door answers (401)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class KeyKind:
    """A kind of API key an app registers: keys starting with ``prefix`` are looked up by
    ``user_for_key(key)`` (the active user, None for an unknown key, or :class:`KeyRefused`)
    and re-checked on open sockets and streams by ``still_valid(user=, key=)``."""

    prefix: str
    user_for_key: Callable[[str], object]
    still_valid: Callable[..., bool]


_kinds: dict[str, KeyKind] = {}


def register_key_kind(prefix: str, *, user_for_key: Callable[[str], object],
                      still_valid: Callable[..., bool]) -> None:
    """Let keys starting with ``prefix`` in at every door (an app's ``ready()``)."""
    _kinds[prefix] = KeyKind(prefix, user_for_key, still_valid)


def _kind_of(key: str) -> KeyKind | None:
    for prefix, kind in _kinds.items():
        if key.startswith(prefix):
            return kind
    return None


def authenticate_key(key: str | None):
    """The active user whose key is ``key``, else None; :class:`KeyRefused` for a key its
    kind refuses with a reason (expired, revoked)."""
    if not key:
        return None
    kind = _kind_of(key)
    if kind is not None:
        return kind.user_for_key(key)
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return None
    return token.user


def user_for_key(key: str | None):
    """The active user whose key is ``key``, else None (a refused key too). One query."""
    try:
        return authenticate_key(key)
    except KeyRefused:
        return None


def user_or_refusal(header: str | bytes | None) -> tuple[object | None, KeyRefused | None]:
    """``(user, None)`` for an ``Authorization`` header naming an active user; ``(None,
    refusal)`` for a key refused with a reason (expired, revoked); else ``(None, None)``."""
    try:
        return authenticate_key(authorization_key(header)), None
    except KeyRefused as refusal:
        return None, refusal


auser_or_refusal = db_async(user_or_refusal)
""":func:`user_or_refusal` for async code (SSE, ``/v1``, ``/mcp/``)."""


def user_for_authorization(header: str | bytes | None):
    """The active user an ``Authorization`` header names (:func:`authorization_key`), else
    None. Sync: views, DRF and management code; async code awaits
    :func:`auser_for_authorization`."""
    return user_for_key(authorization_key(header))


auser_for_authorization = db_async(user_for_authorization)
""":func:`user_for_authorization` for async code (the websocket, SSE, ``/v1``, ``/mcp/``): the
database work runs on the executor, never on the event loop."""


def scope_authorization(scope) -> str | None:
    """The ``Authorization`` header of an ASGI ``scope`` (the last one, as Django reads it)."""
    value = None
    for name, raw in scope.get("headers", ()):
        if name.lower() == b"authorization":
            value = raw.decode("latin-1")
    return value


def token_still_valid(*, user, key: str) -> bool:
    """``key`` is still a key of ``user`` and ``user`` is still active (an open socket's or
    stream's re-check: a deleted token, a revoked or expired key, a deactivated user ends it)."""
    kind = _kind_of(key)
    if kind is not None:
        return kind.still_valid(user=user, key=key)
    from rest_framework.authtoken.models import Token

    return Token.objects.filter(key=key, user=user, user__is_active=True).exists()


class AuthorizationHeaderAuthentication(BaseAuthentication):
    """DRF's authentication through :func:`user_for_authorization`: ``Bearer`` or ``Token``.

    No header, or a scheme this rule does not take (``Basic``), leaves the request to the next
    class (the session). A header of our schemes with a key that names no active user is a
    401 — never silently anonymous."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not names_api_scheme(header):
            return None
        key = authorization_key(header)
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid Authorization header: send 'Bearer <token>'.")
        try:
            user = authenticate_key(key)
        except KeyRefused as refusal:
            raise exceptions.AuthenticationFailed(refusal.message, refusal.code) from None
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return user, key

    def authenticate_header(self, request) -> str:
        return CHALLENGE


class AuthorizationHeaderScheme(OpenApiAuthenticationExtension):
    """The OpenAPI schema's word for :class:`AuthorizationHeaderAuthentication`: HTTP bearer
    (``Token <key>`` is accepted too), so ``/api/docs/`` offers the API token beside the session."""

    target_class = "chatplatform.credentials.AuthorizationHeaderAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A platform API key (made on the settings page or with "
                               "POST /api/v1/api-keys/; or a token from POST /api/v1/auth/token/): "
                               "`Authorization: Bearer <key>` (or `Token <key>`)."}

