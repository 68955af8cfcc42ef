"""The per-person OAuth broker for MCP servers configured as ``auth = oauth``.

The SDK's ``OAuthClientProvider`` runs the whole authorization in one coroutine that waits
for the browser; here the consent is split across web requests, processes and hosts (the
person is redirected by one request, the callback lands in another). So this module drives the
same steps with the SDK's own pieces (``mcp.client.auth.utils`` discovery URL builders and
validators, ``mcp.shared.auth`` models, ``PKCEParameters``, ``check_registration_usable``,
``OAuthContext.prepare_token_auth``) and keeps the state in the database:

1. :func:`discover` — POST the server unauthenticated; from its 401 ``WWW-Authenticate``
   (``resource_metadata``) read the protected-resource metadata (RFC 9728, with the SDK's
   well-known fallbacks), check its ``resource`` names this server (RFC 8707), then read the
   authorization server's metadata (RFC 8414) and check its ``issuer`` is the server the
   resource metadata named (a metadata document for another origin is refused).
2. :func:`ensure_client` — dynamic client registration (RFC 7591) when offered, else the
   admin's client id/secret; stored encrypted in ``MCPOAuthClient``.
3. :func:`begin` → the authorization URL (code flow, PKCE S256, ``resource``, ``state``);
   :func:`complete` — the callback: ``state`` must be this person's, unused and unexpired;
   the code is exchanged once; tokens are stored Fernet-encrypted (``agents.provider_keys``).
4. :func:`access_token` — the person's bearer for a call; an expiring token is refreshed by
   ONE caller across processes and hosts (a compare-and-set lease on the token row: works the
   same on SQLite and PostgreSQL); the others wait for the new version and reuse it. A refresh
   token the server refuses marks the connection ``expired`` (:class:`NeedsConnection`).
5. :func:`disconnect` — revoke at the server (RFC 7009, best effort) and forget the tokens.

Every URL taken from a server's answer is checked by :func:`check_url` before it is fetched:
https (http only to the configured server's own host), and never a private, loopback or
link-local address unless it is the configured server's host or on
``MCP_OAUTH_ALLOWED_HOSTS`` (SSRF). Redirects are not followed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import secrets
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode, urlsplit

import httpx2
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils.translation import gettext as _
from mcp.client.auth.exceptions import OAuthFlowError, OAuthRegistrationError
from mcp.client.auth.oauth2 import OAuthContext, PKCEParameters, check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    validate_authorization_response_iss,
    validate_metadata_issuer,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import ValidationError

from agents.audit import audit_record
from agents.models import AuditEvent
from agents.provider_keys import decrypt_key, encrypt_key
from chatplatform.redaction import remember

from .models import MCPAuthRequest, MCPOAuthClient, MCPServer, MCPUserToken

logger = logging.getLogger(__name__)

CLIENT_NAME = "chatplatform"


class OAuthError(Exception):
    """A step of the OAuth flow failed; the message is for people (no secrets)."""


class NeedsConnection(Exception):
    """The person has no usable token for the server (never connected, disconnected, or the
    refresh token was refused): they must connect (again). ``server`` is the ``MCPServer``."""

    def __init__(self, server: MCPServer, reason: str = "") -> None:
        self.server = server
        self.reason = reason
        super().__init__(_("Connect %(server)s to continue.") % {"server": server.name})


class RequestRefused(OAuthError):
    """A callback that does not belong to a consent in flight of this person (wrong or
    replayed ``state``, another person's, expired)."""


# --- settings -----------------------------------------------------------------------------------
def _timeout() -> float:
    return float(getattr(settings, "MCP_OAUTH_TIMEOUT_S", 10.0))


def _lease_s() -> float:
    return float(getattr(settings, "MCP_OAUTH_REFRESH_LEASE_S", 30.0))


def _skew_s() -> float:
    return float(getattr(settings, "MCP_OAUTH_EXPIRY_SKEW_S", 60.0))


def _request_ttl_s() -> float:
    return float(getattr(settings, "MCP_OAUTH_REQUEST_TTL_S", 900.0))


# --- outbound URLs --------------------------------------------------------------------------------
def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def check_url(url: str, server: MCPServer) -> str:
    """``url`` when the platform may fetch it for ``server``'s OAuth flow; OAuthError otherwise.

    https only — http only to the configured server's own host (a local test or lab server the
    admin entered). The host must not be or resolve to a private, loopback, link-local or
    reserved address unless it is the configured server's host or on
    ``MCP_OAUTH_ALLOWED_HOSTS`` (an address an admin configured)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    own = _host(server.url)
    if parts.scheme not in ("https", "http") or not host:
        raise OAuthError(_("%(url)s is not an http(s) URL.") % {"url": url[:200]})
    if parts.scheme == "http" and host != own:
        raise OAuthError(_("%(url)s must use https.") % {"url": url[:200]})
    allowed = {own} | {str(h).lower() for h in (getattr(settings, "MCP_OAUTH_ALLOWED_HOSTS", None) or [])}
    if host in allowed:
        return url
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)}
    except OSError:
        raise OAuthError(_("%(host)s does not resolve.") % {"host": host}) from None
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        if not ip.is_global:
            raise OAuthError(_("%(url)s points at a private address (%(ip)s) that was not configured; refused.")
                             % {"url": url[:200], "ip": ip})
    return url


def _client() -> httpx2.Client:
    return httpx2.Client(timeout=_timeout(), follow_redirects=False)


def _get(http: httpx2.Client, url: str, server: MCPServer) -> httpx2.Response:
    check_url(url, server)
    try:
        return http.get(url, headers={"Accept": "application/json"})
    except httpx2.HTTPError as exc:
        raise OAuthError(_("%(url)s could not be read: %(error)s") % {"url": url[:200], "error": type(exc).__name__}) \
            from None


# --- discovery ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Discovery:
    resource: str
    issuer: str
    metadata: OAuthMetadata


def discover(server: MCPServer) -> Discovery:
    """Protected-resource metadata from the server's 401, then the authorization server's
    metadata. Raises OAuthError (the server needs no login, metadata missing or for another
    resource or issuer, a URL refused by :func:`check_url`)."""
    check_url(server.url, server)
    with _client() as http:
        try:
            probe = http.post(server.url, headers={"Accept": "application/json, text/event-stream",
                                                   "Content-Type": "application/json"},
                              content=json.dumps({"jsonrpc": "2.0", "id": 0, "method": "ping"}))
        except httpx2.HTTPError as exc:
            raise OAuthError(_("The MCP server could not be reached: %(error)s") % {"error": type(exc).__name__}) \
                from None
        if probe.status_code != 401:
            raise OAuthError(_("The MCP server did not ask for a login (HTTP %(status)s).")
                             % {"status": probe.status_code})
        resource = resource_url_from_server_url(server.url)
        auth_server = None
        for url in build_protected_resource_metadata_discovery_urls(
                extract_resource_metadata_from_www_auth(probe), server.url):
            response = _get(http, url, server)
            if response.status_code != 200:
                continue
            try:
                prm = ProtectedResourceMetadata.model_validate_json(response.content)
            except ValidationError:
                continue
            if not check_resource_allowed(requested_resource=resource, configured_resource=str(prm.resource)):
                raise OAuthError(_("The server's resource metadata names another resource (%(resource)s).")
                                 % {"resource": str(prm.resource)[:200]})
            resource = str(prm.resource)
            auth_server = str(prm.authorization_servers[0])
            break
        expected = auth_server or f"{urlsplit(server.url).scheme}://{urlsplit(server.url).netloc}"
        metadata = None
        for url in build_oauth_authorization_server_metadata_discovery_urls(auth_server, server.url):
            response = _get(http, url, server)
            if response.status_code != 200:
                continue
            try:
                metadata = OAuthMetadata.model_validate_json(response.content)
            except ValidationError:
                continue
            break
        if metadata is None:
            raise OAuthError(_("The authorization server publishes no metadata (RFC 8414)."))
        try:
            validate_metadata_issuer(metadata, expected.rstrip("/") if auth_server is None else expected)
        except OAuthFlowError:
            raise OAuthError(_("The authorization server's metadata names another issuer (%(issuer)s, expected "
                               "%(expected)s); refused.") % {"issuer": str(metadata.issuer)[:200],
                                                             "expected": expected[:200]}) from None
        methods = metadata.code_challenge_methods_supported
        if methods is not None and "S256" not in methods:
            raise OAuthError(_("The authorization server does not support PKCE with S256."))
        for endpoint in (metadata.authorization_endpoint, metadata.token_endpoint, metadata.registration_endpoint,
                         metadata.revocation_endpoint):
            if endpoint is not None:
                check_url(str(endpoint), server)
    return Discovery(resource=resource, issuer=str(metadata.issuer), metadata=metadata)


# --- the client registration ----------------------------------------------------------------------
def client_secret(server: MCPServer) -> str:
    return decrypt_key(server.oauth_client_secret_encrypted)


def set_client_secret(server: MCPServer, secret: str) -> None:
    """Store the admin-entered client secret encrypted (not saved here)."""
    server.oauth_client_secret_encrypted = encrypt_key(secret) if secret else ""


def _fingerprint(server: MCPServer, redirect_uri: str) -> str:
    material = [server.url, server.oauth_client_id, server.oauth_client_secret_encrypted, server.oauth_scopes,
                redirect_uri]
    return hashlib.sha256(json.dumps(material).encode()).hexdigest()


@dataclass(frozen=True)
class Client:
    row: MCPOAuthClient
    info: OAuthClientInformationFull
    metadata: OAuthMetadata

    @property
    def resource(self) -> str:
        return self.row.resource


def _load(row: MCPOAuthClient) -> Client:
    info = OAuthClientInformationFull.model_validate_json(decrypt_key(row.client_info_encrypted) or "{}")
    return Client(row=row, info=info, metadata=OAuthMetadata.model_validate(row.metadata))


def stored_client(server: MCPServer) -> Client | None:
    row = MCPOAuthClient.objects.filter(server=server).first()
    if row is None:
        return None
    try:
        return _load(row)
    except ValidationError:
        return None


def ensure_client(server: MCPServer, redirect_uri: str) -> Client:
    """The registered client for ``server`` (discovered and registered on first use, and again
    when its URL, client settings or the callback URL changed). Raises OAuthError."""
    fingerprint = _fingerprint(server, redirect_uri)
    row = MCPOAuthClient.objects.filter(server=server, fingerprint=fingerprint).first()
    if row is not None:
        try:
            return _load(row)
        except ValidationError:
            pass
    found = discover(server)
    scope = server.oauth_scopes or (" ".join(found.metadata.scopes_supported)
                                    if found.metadata.scopes_supported else None)
    if server.oauth_client_id:
        secret = client_secret(server)
        info = OAuthClientInformationFull(
            client_id=server.oauth_client_id, client_secret=secret or None, redirect_uris=[redirect_uri],
            token_endpoint_auth_method="client_secret_post" if secret else "none",
            grant_types=["authorization_code", "refresh_token"], scope=scope)
        registered = False
    elif found.metadata.registration_endpoint is not None:
        wanted = OAuthClientMetadata(
            client_name=CLIENT_NAME, redirect_uris=[redirect_uri], grant_types=["authorization_code", "refresh_token"],
            response_types=["code"], token_endpoint_auth_method="none", scope=scope)
        url = check_url(str(found.metadata.registration_endpoint), server)
        with _client() as http:
            try:
                response = http.post(url, json=wanted.model_dump(by_alias=True, mode="json", exclude_none=True))
            except httpx2.HTTPError as exc:
                raise OAuthError(_("Client registration failed: %(error)s") % {"error": type(exc).__name__}) from None
        if response.status_code not in (200, 201):
            raise OAuthError(_("The authorization server refused the client registration (HTTP %(status)s).")
                             % {"status": response.status_code})
        try:
            info = OAuthClientInformationFull.model_validate_json(response.content)
            check_registration_usable(info)
        except (ValidationError, OAuthRegistrationError) as exc:
            raise OAuthError(_("The client registration answer is unusable: %(error)s") % {"error": str(exc)[:200]}) \
                from None
        registered = True
    else:
        raise OAuthError(_("The authorization server offers no dynamic client registration: enter a client id in "
                           "the admin."))
    if info.client_secret:
        remember(info.client_secret)
    row, _created = MCPOAuthClient.objects.update_or_create(server=server, defaults={
        "fingerprint": fingerprint, "resource": found.resource, "issuer": found.issuer,
        "metadata": found.metadata.model_dump(by_alias=True, mode="json", exclude_none=True),
        "client_info_encrypted": encrypt_key(info.model_dump_json(exclude_none=True)), "registered": registered})
    return Client(row=row, info=info, metadata=found.metadata)


# --- consent --------------------------------------------------------------------------------------
def begin(user, server: MCPServer, redirect_uri: str, *, return_to: str = "", tool_call_id=None,
          for_listing: bool = False) -> str:
    """Start a consent for ``user`` at ``server``: the authorization URL to send the browser
    to. ``for_listing`` (staff only): once connected, this person's token lists the server's
    tools. Raises OAuthError (not an OAuth server, discovery or registration failed)."""
    if server.auth != MCPServer.Auth.OAUTH or server.transport != MCPServer.Transport.STREAMABLE_HTTP:
        raise OAuthError(_("This MCP server does not use OAuth."))
    client = ensure_client(server, redirect_uri)
    # consents nobody finished: kept a day past their expiry (the admin's audit view), then gone
    MCPAuthRequest.objects.filter(expires_at__lt=datetime.now(UTC) - timedelta(days=1)).delete()
    pkce = PKCEParameters.generate()
    state = secrets.token_urlsafe(32)
    MCPAuthRequest.objects.create(
        state=state, user=user, server=server, verifier_encrypted=encrypt_key(pkce.code_verifier),
        redirect_uri=redirect_uri, return_to=return_to[:500], tool_call_id=tool_call_id,
        for_listing=for_listing and bool(getattr(user, "is_staff", False)),
        expires_at=datetime.now(UTC) + timedelta(seconds=_request_ttl_s()))
    params = {
        "response_type": "code", "client_id": client.info.client_id, "redirect_uri": redirect_uri, "state": state,
        "code_challenge": pkce.code_challenge, "code_challenge_method": "S256", "resource": client.resource,
    }
    scope = client.info.scope or server.oauth_scopes
    if scope:
        params["scope"] = scope
    endpoint = str(client.metadata.authorization_endpoint)
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"


@dataclass(frozen=True)
class Outcome:
    request: MCPAuthRequest
    connected: bool
    error: str = ""


def _claim(user, state: str) -> MCPAuthRequest:
    """The consent in flight named by ``state``, claimed once for ``user``; RequestRefused
    when it is unknown, another person's, used or expired."""
    request = MCPAuthRequest.objects.select_related("server").filter(state=state).first() if state else None
    if request is None or request.user_id != getattr(user, "pk", None):
        raise RequestRefused(_("This sign-in link is not valid for you. Start again from the chat."))
    now = datetime.now(UTC)
    if request.expires_at <= now:
        raise RequestRefused(_("This sign-in link expired. Start again from the chat."))
    if not MCPAuthRequest.objects.filter(pk=request.pk, used_at__isnull=True).update(used_at=now):
        raise RequestRefused(_("This sign-in link was already used."))
    return request


def complete(user, *, state: str, code: str = "", error: str = "", iss: str | None = None) -> Outcome:
    """The callback: claim the consent (RequestRefused for a wrong, replayed, expired or
    another person's ``state``), then exchange ``code`` for tokens and store them. A person
    who declined (``error``) gets ``connected=False``; a failed exchange too, with the reason."""
    request = _claim(user, state)
    server = request.server
    if error:
        _audit(server, user, "declined", error=error[:100])
        return Outcome(request, False, _("You did not allow access to %(server)s.") % {"server": server.name})
    client = stored_client(server)
    if client is None or not code:
        return Outcome(request, False, _("The sign-in did not return a code."))
    try:
        validate_authorization_response_iss(iss, client.metadata)
    except OAuthFlowError:
        _audit(server, user, "refused", error="issuer mismatch")
        return Outcome(request, False, _("The sign-in answer came from another authorization server."))
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": request.redirect_uri,
            "client_id": client.info.client_id, "code_verifier": decrypt_key(request.verifier_encrypted),
            "resource": client.resource}
    try:
        token = _token_request(server, client, data)
    except OAuthError as exc:
        _audit(server, user, "refused", error=str(exc)[:200])
        return Outcome(request, False, str(exc))
    store_tokens(user, server, token)
    _audit(server, user, "connected", for_listing=request.for_listing)
    if request.for_listing and user.is_staff:
        server.oauth_listing_user = user
        server.save(update_fields=["oauth_listing_user", "updated_at"])  # post_save: re-list with this token
    return Outcome(request, True)


def _token_request(server: MCPServer, client: Client, data: dict) -> OAuthToken:
    """POST the token endpoint (client authentication per the registration, via the SDK's
    ``OAuthContext.prepare_token_auth``). Raises :class:`TokenRefused` for a 4xx answer
    (``invalid_grant``…), OAuthError when unreachable or malformed."""
    context = OAuthContext(server_url=server.url, client_metadata=OAuthClientMetadata(redirect_uris=None),
                           storage=None, redirect_handler=None, callback_handler=None, client_info=client.info)
    data, headers = context.prepare_token_auth(dict(data), {"Content-Type": "application/x-www-form-urlencoded"})
    url = check_url(str(client.metadata.token_endpoint), server)
    with _client() as http:
        try:
            response = http.post(url, data=data, headers=headers)
        except httpx2.HTTPError as exc:
            raise OAuthError(_("The authorization server could not be reached: %(error)s")
                             % {"error": type(exc).__name__}) from None
    if 400 <= response.status_code < 500:
        try:
            reason = str(response.json().get("error", ""))[:60]
        except ValueError:
            reason = ""
        raise TokenRefused(_("The authorization server refused the token request (%(reason)s).")
                           % {"reason": reason or response.status_code})
    if response.status_code != 200:
        raise OAuthError(_("The authorization server answered HTTP %(status)s.") % {"status": response.status_code})
    try:
        token = OAuthToken.model_validate_json(response.content)
    except ValidationError:
        raise OAuthError(_("The authorization server's token answer is malformed.")) from None
    remember(token.access_token)
    if token.refresh_token:
        remember(token.refresh_token)
    return token


class TokenRefused(OAuthError):
    """The token endpoint refused the grant (4xx): a used or revoked code or refresh token."""


def _expires_at(token: OAuthToken) -> datetime | None:
    return datetime.now(UTC) + timedelta(seconds=int(token.expires_in)) if token.expires_in else None


def store_tokens(user, server: MCPServer, token: OAuthToken) -> MCPUserToken:
    """Save a new token set for ``user`` at ``server`` (status connected, version + 1)."""
    with transaction.atomic():
        row, created = MCPUserToken.objects.select_for_update().get_or_create(user=user, server=server)
        row.access_token_encrypted = encrypt_key(token.access_token)
        row.refresh_token_encrypted = encrypt_key(token.refresh_token or "")
        row.scope = (token.scope or "")[:500]
        row.expires_at = _expires_at(token)
        row.status, row.error = MCPUserToken.Status.CONNECTED, ""
        row.version = 1 if created else row.version + 1
        row.lease_until, row.lease_owner = None, ""
        if not created:
            row.connected_at = datetime.now(UTC)
        row.save()
    return row


# --- tokens for calls -----------------------------------------------------------------------------
def _usable(row: MCPUserToken) -> bool:
    return row.expires_at is None or row.expires_at > datetime.now(UTC) + timedelta(seconds=_skew_s())


def access_token(user_id: int, server: MCPServer, *, stale_version: int | None = None) -> tuple[str, int]:
    """``(bearer, version)`` for ``user_id``'s calls to ``server``; blocking (tool threads).

    A token that expires within ``MCP_OAUTH_EXPIRY_SKEW_S`` — or whose ``version`` is
    ``stale_version`` (the server answered 401 to it) — is refreshed by exactly one caller
    across processes: the one whose compare-and-set takes the row's lease; the others poll
    until the version changes (or the lease lapses) and use the new token. Raises
    NeedsConnection (none stored, disconnected, refresh refused) or OAuthError (the
    authorization server is unreachable — nothing changed, try again)."""
    deadline = time.monotonic() + _lease_s() + _timeout()
    owner = uuid.uuid4().hex
    while True:
        row = MCPUserToken.objects.filter(user_id=user_id, server=server).first()
        if row is None or row.status != MCPUserToken.Status.CONNECTED:
            raise NeedsConnection(server, row.status if row else "not connected")
        wants_refresh = (stale_version is not None and row.version == stale_version) or not _usable(row)
        if not wants_refresh:
            now = datetime.now(UTC)
            if row.last_used_at is None or row.last_used_at < now - timedelta(seconds=60):
                # at most once a minute: not a write for every call and every re-list
                MCPUserToken.objects.filter(pk=row.pk).update(last_used_at=now)
            token = decrypt_key(row.access_token_encrypted)
            remember(token)
            return token, row.version
        now = datetime.now(UTC)
        won = MCPUserToken.objects.filter(pk=row.pk, version=row.version, status=MCPUserToken.Status.CONNECTED).filter(
            Q(lease_until__isnull=True) | Q(lease_until__lt=now)).update(
            lease_until=now + timedelta(seconds=_lease_s()), lease_owner=owner)
        if won:
            return _refresh(row, server, owner)
        # Someone else is refreshing: wait for their new version (or their lease to lapse).
        while time.monotonic() < deadline:
            time.sleep(0.05)
            current = MCPUserToken.objects.filter(pk=row.pk).values("version", "status", "lease_until").first()
            if current is None or current["version"] != row.version or current["status"] != row.status:
                break
            if current["lease_until"] is None or current["lease_until"] < datetime.now(UTC):
                break
        else:
            raise OAuthError(_("Refreshing the sign-in to %(server)s took too long.") % {"server": server.name})
        stale_version = None  # whatever happened, the row changed: read it again


def _refresh(row: MCPUserToken, server: MCPServer, owner: str) -> tuple[str, int]:
    refresh_token = decrypt_key(row.refresh_token_encrypted)
    client = stored_client(server)
    mine = MCPUserToken.objects.filter(pk=row.pk, lease_owner=owner)
    if not refresh_token or client is None:
        mine.update(status=MCPUserToken.Status.EXPIRED, error="no refresh token", lease_until=None, lease_owner="")
        _audit(server, None, "expired", user_id=row.user_id)
        raise NeedsConnection(server, "expired")
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client.info.client_id,
            "resource": client.resource}
    try:
        token = _token_request(server, client, data)
    except TokenRefused as exc:
        mine.update(status=MCPUserToken.Status.EXPIRED, error=str(exc)[:300], lease_until=None, lease_owner="")
        _audit(server, None, "refresh_refused", user_id=row.user_id)
        raise NeedsConnection(server, "expired") from None
    except OAuthError:
        mine.update(lease_until=None, lease_owner="")
        raise
    version = row.version + 1
    updated = mine.filter(version=row.version).update(
        access_token_encrypted=encrypt_key(token.access_token),
        refresh_token_encrypted=encrypt_key(token.refresh_token or refresh_token),
        scope=(token.scope or row.scope)[:500], expires_at=_expires_at(token), version=version,
        refreshed_at=datetime.now(UTC), last_used_at=datetime.now(UTC), lease_until=None, lease_owner="")
    if not updated:  # our lease lapsed and another caller refreshed meanwhile: theirs stands
        fresh = MCPUserToken.objects.get(pk=row.pk)
        return decrypt_key(fresh.access_token_encrypted), fresh.version
    _audit(server, None, "refreshed", user_id=row.user_id)
    return token.access_token, version


def mark_expired(user_id: int, server: MCPServer, reason: str) -> None:
    """The server refused a freshly refreshed token: the person must connect again."""
    MCPUserToken.objects.filter(user_id=user_id, server=server).update(
        status=MCPUserToken.Status.EXPIRED, error=reason[:300])


# --- disconnect -----------------------------------------------------------------------------------
def disconnect(user_id: int, server: MCPServer, *, actor=None) -> bool:
    """Revoke ``user_id``'s tokens at the authorization server (RFC 7009; best effort — a
    server without revocation or unreachable still loses the tokens here) and delete them.
    ``actor``: who did it (an admin, or the person). False when there was nothing to forget."""
    row = MCPUserToken.objects.filter(user_id=user_id, server=server).first()
    if row is None:
        return False
    client = stored_client(server)
    revoked = False
    if client is not None and client.metadata.revocation_endpoint is not None:
        for kind, value in (("refresh_token", decrypt_key(row.refresh_token_encrypted)),
                            ("access_token", decrypt_key(row.access_token_encrypted))):
            if not value:
                continue
            context = OAuthContext(server_url=server.url, client_metadata=OAuthClientMetadata(redirect_uris=None),
                                   storage=None, redirect_handler=None, callback_handler=None, client_info=client.info)
            # A public client sends an empty client_secret (RFC 6749 §2.3.1 allows it): the SDK's own
            # revocation endpoint refuses a request without the field.
            data, headers = context.prepare_token_auth(
                {"token": value, "token_type_hint": kind, "client_id": client.info.client_id,
                 **({} if client.info.client_secret else {"client_secret": ""})},
                {"Content-Type": "application/x-www-form-urlencoded"})
            try:
                url = check_url(str(client.metadata.revocation_endpoint), server)
                with _client() as http:
                    revoked = http.post(url, data=data, headers=headers).status_code == 200 or revoked
            except (OAuthError, httpx2.HTTPError):
                logger.info("MCP server %s: token revocation failed", server.slug)
    row.delete()
    _audit(server, actor, "disconnected", user_id=user_id, revoked=revoked)
    return True


def forget_server(server: MCPServer, *, actor=None) -> int:
    """The server's URL or client settings changed: its registration and every person's
    tokens belong to the old ones and must never be sent to the new URL — forget them (people
    connect again). Returns how many people's tokens were dropped."""
    MCPOAuthClient.objects.filter(server=server).delete()
    dropped, _rows = MCPUserToken.objects.filter(server=server).delete()
    if dropped:
        _audit(server, actor, "reset", people=dropped)
    return dropped


def _audit(server: MCPServer, user, action: str, *, user_id=None, **detail) -> None:
    audit_record(kind=AuditEvent.Kind.MCP_OAUTH, user=user, user_id=user_id if user is None else None,
                 detail={"server": server.slug, "action": action,
                         **({"for_user_id": user_id} if user_id is not None else {}), **detail})
