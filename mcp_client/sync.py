"""The database side of external MCP servers, and the tool sources they become.

``reconcile()`` (ordinary threads only; never on an event loop):

1. starts/stops/restarts the process's connections to match the enabled ``MCPServer`` rows;
2. stores each new listing: an ``MCPTool`` row per tool and a ``ToolPolicy`` row with safe
   defaults for a new one (off unless on the server's allowlist; risk from its annotations:
   ``readOnlyHint`` → read, ``destructiveHint`` → dangerous, otherwise write); a changed
   definition of an enabled tool quarantines it (audit event ``mcp_tool_quarantined``);
3. gives every tool its exposed name (``mcp_client.naming``), renaming its policy row with it;
4. writes each server's health and builds the specs that :data:`mcp_tools` and
   :data:`mcp_resources` offer until the next reconcile. The tools of a server that is
   reconnecting stay offered: a call starts the reconnect attempt and waits for it
   (``mcp_client.runtime``), and fails with the attempt's error when it fails.

``specs()`` calls ``reconcile()`` when something changed (an admin edit in this process, a
new listing, a connection's health) or every ``MCP_RECONCILE_S`` seconds (edits made in
another process), so a worker process follows the admin without a restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction

from agents.audit import audit_record
from agents.models import AuditEvent, Role, ToolPolicy
from agents.provider_keys import decrypt_key, encrypt_key
from agents.tools import ConnectRequired, ToolContext, ToolError, ToolSpec, registry
from agents.tools.api import DEFAULT_SCOPE_ARGS

from . import elicitation, naming, resource_links, trust
from .content import resource_text, result_text
from .models import MCPServer, MCPTool
from .runtime import (
    CallCancelled,
    CallFailed,
    CallTimedOut,
    Listing,
    ServerConfig,
    ServerGone,
    ServerUnavailable,
    runtime,
)

logger = logging.getLogger(__name__)

RESOURCE_TOOL = "get_context"
DESCRIPTION_CHARS = 2000  # a server's tool description as offered to the model
_VAR = trust.VAR


# --- configuration ------------------------------------------------------------------------------
class ConfigError(ValueError):
    pass


def expand(text: str, env: dict[str, str], own: dict[str, str] | None = None) -> str:
    """``${VAR}`` → its value from ``env`` (the platform's environment: only allowlisted,
    never the platform's own variables — ``trust.variable_refusal``) or from ``own`` (the
    server's own env entries, for its args); ConfigError naming a refused or unset variable."""

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if own and name in own:
            return own[name]
        refusal = trust.variable_refusal(name)
        if refusal:
            raise ConfigError(refusal)
        if name not in env:
            raise ConfigError(f"${{{name}}} is not set in the platform's environment")
        return env[name]

    return _VAR.sub(sub, str(text))


def secret_headers(server: MCPServer) -> dict[str, str]:
    """The write-only header values entered in the admin (decrypted)."""
    raw = decrypt_key(server.secret_headers_encrypted)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def secret_headers_store(server: MCPServer, headers: dict[str, str]) -> None:
    server.secret_headers_encrypted = encrypt_key(json.dumps(headers)) if headers else ""


def _listing_bearer(server: MCPServer) -> str:
    """The token the shared session of an OAuth server lists its tools with: that of the
    admin who connected from the admin page (``oauth_listing_user``). ConfigError when none."""
    from . import oauth

    if server.oauth_listing_user_id is None:
        raise ConfigError("OAuth: an administrator must connect their account in the admin to list its tools")
    try:
        return oauth.access_token(server.oauth_listing_user_id, server)[0]
    except oauth.NeedsConnection:
        raise ConfigError("OAuth: the listing account's sign-in expired; an administrator must connect "
                          "again in the admin") from None
    except oauth.OAuthError as exc:
        raise ConfigError(f"OAuth: {exc}") from None


def server_config(server: MCPServer, *, listing: bool = True) -> ServerConfig:
    """The connection settings of ``server`` with ``${VAR}`` expanded from the platform's
    environment. Raises ConfigError for privileged settings no superuser signed, a refused or
    unset variable, or a missing command/url. An OAuth server's shared (listing) session
    carries the listing admin's token; ``listing=False``: without it (a person's call adds
    their own)."""
    try:
        trust.require_signed(server)
    except trust.NotAllowed as exc:
        raise ConfigError(exc.messages[0]) from None
    env = dict(os.environ)
    secrets: list[str] = []
    if server.transport == MCPServer.Transport.STDIO:
        if not server.command:
            raise ConfigError("a stdio server needs a command")
        extra = {str(k): expand(v, env) for k, v in (server.env or {}).items()}
        secrets.extend(extra.values())
        return ServerConfig(
            slug=server.slug, transport="stdio", command=expand(server.command, env),
            args=tuple(expand(a, env, extra) for a in (server.args or [])),
            env=tuple(sorted(extra.items())), connect_timeout_s=float(server.connect_timeout_s),
            secrets=tuple(secrets),
        )
    if not server.url:
        raise ConfigError("a streamable HTTP server needs a url")
    headers = {str(k): expand(v, env) for k, v in (server.headers or {}).items()}
    hidden = secret_headers(server)
    secrets.extend(hidden.values())
    secrets.extend(v for k, v in headers.items() if _VAR.search(str((server.headers or {}).get(k, ""))))
    headers.update(hidden)
    if server.auth == MCPServer.Auth.OAUTH and listing:
        bearer = _listing_bearer(server)
        headers["Authorization"] = f"Bearer {bearer}"
        secrets.append(bearer)
    return ServerConfig(
        slug=server.slug, transport="streamable_http", url=expand(server.url, env),
        headers=tuple(sorted(headers.items())), connect_timeout_s=float(server.connect_timeout_s),
        secrets=tuple(s for s in secrets if s),
    )


# --- definitions, hashes, risk ------------------------------------------------------------------
def definition(tool) -> dict:
    """The parts of a tool that drift is checked on: name, description, input schema,
    annotations (an ``mcp_types.Tool``)."""
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    return {
        "name": tool.name,
        "title": tool.title or "",
        "description": tool.description or "",
        "inputSchema": tool.input_schema or {},
        "annotations": annotations,
    }


def definition_hash(defn: dict) -> str:
    canonical = {k: defn.get(k) for k in ("name", "description", "inputSchema", "annotations")}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def proposed_risk(annotations: dict) -> str:
    """``readOnlyHint`` → read, ``destructiveHint`` → dangerous, otherwise write (the MCP
    default for a tool without a read-only hint is that it may change things)."""
    if annotations.get("readOnlyHint") is True:
        return "read"
    if annotations.get("destructiveHint") is True:
        return "dangerous"
    return "write"


def _audit(kind: str, tool: MCPTool, user=None, **detail) -> None:
    audit_record(kind=kind, user=user, tool_name=tool.exposed_name or tool.name,
                 detail={"server": tool.server.slug, "tool": tool.name, **detail})


# --- storing a listing ------------------------------------------------------------------------
def store_listing(server: MCPServer, listing: Listing) -> None:
    """Record what ``server`` offered: new tools, definition drift, tools gone."""
    now = datetime.now(UTC)
    rows = {t.name: t for t in MCPTool.objects.filter(server=server).select_related("policy", "server")}
    allow = set(server.allowlist or [])
    seen: set[str] = set()
    for tool in listing.tools:
        defn = definition(tool)
        digest = definition_hash(defn)
        seen.add(tool.name)
        row = rows.get(tool.name)
        if row is None:
            MCPTool.objects.create(server=server, name=tool.name, current_definition=defn, current_hash=digest,
                                   approved_definition=defn, approved_hash=digest, last_seen_at=now)
            continue
        row.current_definition, row.current_hash, row.present, row.last_seen_at = defn, digest, True, now
        if digest != row.approved_hash and not row.quarantined:
            enabled = bool(row.policy and row.policy.enabled) or tool.name in allow
            if enabled:
                row.quarantined, row.quarantined_at = True, now
                _audit(AuditEvent.Kind.MCP_TOOL_QUARANTINED, row, old_hash=row.approved_hash, new_hash=digest)
                logger.warning("MCP tool %s/%s changed its definition: quarantined", server.slug, tool.name)
            else:  # never enabled: nothing was trusted yet; the admin reviews it when enabling
                row.approved_definition, row.approved_hash = defn, digest
        row.save()
    MCPTool.objects.filter(server=server, present=True).exclude(name__in=seen).update(present=False)


def approve_definition(tool: MCPTool, user) -> None:
    """An admin accepted the tool's current definition: it is offered again (audit event
    ``mcp_tool_reviewed`` with both hashes)."""
    old = tool.approved_hash
    tool.approved_definition, tool.approved_hash = tool.current_definition, tool.current_hash
    tool.quarantined, tool.quarantined_at = False, None
    tool.save()
    _audit(AuditEvent.Kind.MCP_TOOL_REVIEWED, tool, user=user, decision="approved", old_hash=old,
           new_hash=tool.current_hash)


def _assign_names(servers: list[MCPServer]) -> None:
    """Exposed names for the present tools of enabled servers; each tool's policy row is
    created (safe defaults) or renamed with it."""
    enabled_ids = [s.pk for s in servers]
    rows = list(MCPTool.objects.filter(server_id__in=enabled_ids, present=True).select_related("server", "policy"))
    reserved = {spec.name for spec in registry.all()} | {RESOURCE_TOOL}
    names = naming.exposed_names(((r.server.slug, r.name) for r in rows), reserved)
    changed = [r for r in rows if r.exposed_name != names[(r.server.slug, r.name)] or r.policy is None]
    if not changed:
        return
    with transaction.atomic():
        for row in changed:  # free the old names first, so two tools may swap names
            if row.policy is not None:
                row.policy.tool_name = f"~mcp-{row.policy.pk}"
                row.policy.save(update_fields=["tool_name"])
        for row in changed:
            new = names[(row.server.slug, row.name)]
            owner = ToolPolicy.objects.filter(tool_name=new).first()
            if owner is not None and not MCPTool.objects.filter(policy=owner).exists():
                owner.delete()  # an orphan row under this name (a deleted server's tool)
            if row.policy is None:
                annotations = row.current_definition.get("annotations") or {}
                risk = proposed_risk(annotations)
                allowlisted = row.name in set(row.server.allowlist or [])
                row.policy = ToolPolicy.objects.create(
                    tool_name=new, enabled=allowlisted, risk=risk,
                    timeout_s=row.server.call_timeout_s, approval_mode="never" if risk == "read" else "always",
                )
                if allowlisted and risk != "read":
                    # A write or dangerous tool with no roles named is for no one (agents.pipeline);
                    # one the admin allowlisted gets the roles built-in write tools have by default.
                    row.policy.allowed_roles.set(Role.objects.filter(name__in=ALLOWLISTED_WRITE_ROLES))
            else:
                row.policy.tool_name = new
                row.policy.save(update_fields=["tool_name"])
            row.exposed_name = new
            row.save(update_fields=["exposed_name", "policy"])


ALLOWLISTED_WRITE_ROLES = ("member", "admin")


# --- the specs ---------------------------------------------------------------------------------
def _schema(defn: dict) -> dict:
    schema = dict(defn.get("inputSchema") or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _oauth_call(server_id: int, tool: str, arguments: dict, timeout_s: float, ctx: ToolContext):
    """A call with the calling person's own token: refreshed when it expires (one refresh per
    person and server), refreshed once more when the server answers 401 to it; a person
    without a usable token gets :class:`agents.tools.ConnectRequired` (the run parks on a
    "connect" card)."""
    from . import oauth
    from .runtime import Unauthorized

    server = MCPServer.objects.filter(pk=server_id).first()
    if server is None or not server.enabled:
        raise ServerUnavailable(f"MCP server {server_id} is not enabled")
    try:
        config = server_config(server, listing=False)
    except ConfigError as exc:
        raise ServerUnavailable(f"MCP server {server.slug!r} is misconfigured: {exc}") from None
    try:
        bearer, version = oauth.access_token(ctx.user_id, server)
        try:
            return runtime.call_as(config, bearer, tool, arguments, timeout_s=timeout_s, cancelled=ctx.cancelled,
                                   progress=ctx.progress, elicit=elicitation.asker(ctx, server.slug))
        except Unauthorized:
            # Refused before the tool ran (initialise or the call request): safe to send again.
            bearer, version = oauth.access_token(ctx.user_id, server, stale_version=version)
            try:
                return runtime.call_as(config, bearer, tool, arguments, timeout_s=timeout_s,
                                       cancelled=ctx.cancelled, progress=ctx.progress,
                                       elicit=elicitation.asker(ctx, server.slug))
            except Unauthorized:
                oauth.mark_expired(ctx.user_id, server, "the server refused a fresh token")
                raise oauth.NeedsConnection(server, "expired") from None
    except oauth.NeedsConnection as exc:
        raise _connect_required(server, exc) from None
    except oauth.OAuthError as exc:
        raise ToolError(f"MCP server {server.slug!r}: {exc}", retryable=True) from None


def _connect_required(server: MCPServer, exc: Exception) -> ConnectRequired:
    from django.urls import reverse

    return ConnectRequired(str(exc), server=server.slug, server_name=server.name,
                           url=reverse("mcp-oauth-connect", args=[server.slug]))


def _connect_check(server_id: int):
    """``ToolSpec.connect_check`` of an OAuth server's tools: None when the calling person
    has a usable token (an expiring one is refreshed here, once per person and server), else
    the ``ConnectRequired`` that parks the call on a "connect" card. ``refresh=False``: from the
    stored state only (a connected row counts), for listings."""

    def check(*, ctx: ToolContext, refresh: bool = True) -> ConnectRequired | None:
        from . import oauth

        server = MCPServer.objects.filter(pk=server_id).first()
        if server is None:
            return None  # the call itself says the server is gone
        if not refresh:  # a listing: the stored state only, no request to the authorization server
            connected = server.user_tokens.filter(user_id=ctx.user_id, status="connected").exists()
            return None if connected else _connect_required(server, oauth.NeedsConnection(server))
        try:
            oauth.access_token(ctx.user_id, server)
        except oauth.NeedsConnection as exc:
            return _connect_required(server, exc)
        except oauth.OAuthError as exc:
            raise ToolError(f"MCP server {server.slug!r}: {exc}") from None
        return None

    return check


def _tool_func(slug: str, tool: str, risk: str, timeout_s: float, oauth_server_id: int | None = None):
    def call(*, ctx: ToolContext, **arguments):
        try:
            if oauth_server_id is not None:
                result = _oauth_call(oauth_server_id, tool, arguments, timeout_s, ctx)
            else:
                result = runtime.call(slug, tool, arguments, timeout_s=timeout_s, cancelled=ctx.cancelled,
                                      progress=ctx.progress, elicit=elicitation.asker(ctx, slug))
        except ServerGone as exc:
            if risk == "read":  # retried once by the loop, after the session reconnects
                raise ToolError(str(exc), retryable=True) from None
            raise ToolError(f"{exc}; the call may or may not have taken effect — check before retrying.",
                            outcome_unknown=True) from None
        except ServerUnavailable as exc:
            raise ToolError(str(exc)) from None
        except CallTimedOut as exc:
            raise ToolError(str(exc), outcome_unknown=risk != "read") from None
        except CallCancelled as exc:
            raise ToolError(str(exc), outcome_unknown=risk != "read") from None
        except CallFailed as exc:
            raise ToolError(f"MCP server {slug!r} refused the call: {exc}") from None
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"{tool} failed (no details from the server)")
        links = resource_links.links_record(ctx, slug, result)
        if links:  # shown under the call as links the person may open through the platform
            ctx.emit("resource.linked", links=links)
        return text

    return call


def _spec_for(row: MCPTool, server: MCPServer, *, unavailable: str = "") -> ToolSpec:
    defn = row.current_definition if not row.quarantined else row.approved_definition
    schema = _schema(defn)
    props = set((schema.get("properties") or {}).keys())
    policy = row.policy
    risk = policy.risk if policy else proposed_risk(defn.get("annotations") or {})
    description = (defn.get("description") or defn.get("title") or row.name)[:DESCRIPTION_CHARS]
    return ToolSpec(
        name=row.exposed_name,
        description=description,
        parameters=schema,
        risk=risk,
        func=_tool_func(server.slug, row.name, risk, float(server.call_timeout_s),
                        oauth_server_id=server.pk if server.auth == MCPServer.Auth.OAUTH else None),
        # the platform's own scope arguments never reach an external server unless its
        # schema declares them, and then with the run's values (agents.tools.scope)
        scope_args=tuple(a for a in DEFAULT_SCOPE_ARGS if a not in props),
        source=f"mcp:{server.slug}",
        unavailable=unavailable,
        env_name=server.environment.name if server.environment_id else "",
        origin=(server.slug, row.name),
        connect_check=_connect_check(server.pk) if server.auth == MCPServer.Auth.OAUTH else None,
    )


@dataclass
class Snapshot:
    tools: list[ToolSpec] = field(default_factory=list)
    resources: dict[str, tuple[str, object]] = field(default_factory=dict)  # uri → (slug, Resource)


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.snapshot = Snapshot()
        self.stale = True
        self.last = 0.0
        self.seen: dict[str, tuple] = {}  # slug → (listing seq, health) last stored
        self.local = threading.local()


_state = _State()


def mark_stale(sender=None, **kwargs) -> None:
    """Signal receiver: an admin edit in this process — rebuild at the next ``specs()``."""
    if not getattr(_state.local, "reconciling", False):
        _state.stale = True


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _seen_key(conn) -> tuple:
    """What ``reconcile`` last stored of a connection: (which connection, listing seq, health)."""
    return (id(conn), conn.listing.seq if conn.listing else 0, conn.health)


def _changed() -> bool:
    for slug, conn in runtime.connections().items():
        if _state.seen.get(slug) != _seen_key(conn):
            return True
    return False


def maybe_reconcile() -> None:
    """Reconcile when something changed or ``MCP_RECONCILE_S`` passed; never on an event
    loop (async code may not use the ORM) — the last snapshot is used there."""
    if _on_event_loop():
        return
    interval = float(getattr(settings, "MCP_RECONCILE_S", 5))
    if not (_state.stale or _changed() or time.monotonic() - _state.last >= interval):
        return
    try:
        reconcile()
    except Exception as exc:  # no database yet (before migrate), or not allowed here (tests)
        logger.debug("MCP reconcile skipped: %s", exc)


def reconcile() -> Snapshot:
    """Bring connections, tool rows, names, health and the offered specs up to date."""
    with _state.lock:
        _state.local.reconciling = True
        try:
            _state.stale = False
            _state.last = time.monotonic()
            return _reconcile()
        finally:
            _state.local.reconciling = False


def _reconcile() -> Snapshot:
    servers = list(MCPServer.objects.select_related("environment").order_by("slug"))
    enabled = [s for s in servers if s.enabled]
    configs, broken = [], {}
    for server in enabled:
        try:
            configs.append(server_config(server))
        except ConfigError as exc:
            broken[server.slug] = str(exc)
    runtime.ensure(configs)
    for slug in set(_state.seen) - {s.slug for s in enabled}:
        del _state.seen[slug]
    now = datetime.now(UTC)
    for server in enabled:
        conn = runtime.connection(server.slug)
        if server.slug in broken:
            health = f"failed: {broken[server.slug]}"
        elif conn is None:
            continue
        else:
            key = _seen_key(conn)
            before = _state.seen.get(server.slug) or (None, 0, "")
            if before != key:
                if conn.listing and before[:2] != key[:2]:  # a new listing (or a new connection's)
                    store_listing(server, conn.listing)
                _state.seen[server.slug] = key
            health = conn.health
        if server.health_status != health:
            MCPServer.objects.filter(pk=server.pk).update(health_status=health[:500], health_checked_at=now)
            server.health_status = health
    _assign_names(enabled)
    snapshot = _build(servers, broken)
    if snapshot.resources and not ToolPolicy.objects.filter(tool_name=RESOURCE_TOOL).exists():
        ToolPolicy.objects.create(tool_name=RESOURCE_TOOL, enabled=True, risk="read", approval_mode="never")
    _state.snapshot = snapshot
    return snapshot


def _build(servers: list[MCPServer], broken: dict[str, str]) -> Snapshot:
    snap = Snapshot()
    rows = MCPTool.objects.filter(server__in=servers).exclude(exposed_name="").select_related("policy")
    by_server: dict[int, list[MCPTool]] = {}
    for row in rows:
        by_server.setdefault(row.server_id, []).append(row)
    live, gone = [], []
    for server in servers:
        conn = runtime.connection(server.slug) if server.enabled else None
        allow = set(server.allowlist or [])
        for row in by_server.get(server.pk, []):
            if not server.enabled:
                gone.append(_spec_for(row, server, unavailable=(
                    f"{row.exposed_name} is not available: the MCP server {server.slug!r} was disabled by an "
                    "administrator.")))
                continue
            if not row.present:
                continue
            if allow and row.name not in allow:
                reason = f"{row.exposed_name} is not on the allowlist of MCP server {server.slug!r}."
            elif row.quarantined:
                reason = (f"{row.exposed_name} is quarantined: the MCP server {server.slug!r} changed this tool's "
                          "definition, and an administrator must review the change before it can be used.")
            elif server.auth == MCPServer.Auth.OAUTH:
                reason = ""  # each call opens its own session with the caller's token
            elif server.slug in broken:
                reason = f"MCP server {server.slug!r} is misconfigured: {broken[server.slug]}."
            elif conn is None:
                reason = f"MCP server {server.slug!r} is not reachable right now (not started)."
            else:
                reason = ""
            live.append(_spec_for(row, server, unavailable=reason))
        if conn is not None and conn.state == "connected" and conn.listing:
            for resource in conn.listing.resources:
                snap.resources.setdefault(str(resource.uri), (server.slug, resource))
    taken = {s.name for s in live}
    snap.tools = live + [s for s in gone if s.name not in taken]
    return snap


# --- tool sources ---------------------------------------------------------------------------------
class MCPToolSource:
    """Every tool of every configured MCP server (unavailable ones carry the reason)."""

    name = "mcp"

    def specs(self) -> list[ToolSpec]:
        maybe_reconcile()
        return list(_state.snapshot.tools)


class MCPResourceSource:
    """One synthetic read tool, ``get_context(uri)``, over the resources of every connected
    server; its ``uri`` parameter is an enum of the resources available right now."""

    name = "mcp-resources"

    def specs(self) -> list[ToolSpec]:
        maybe_reconcile()
        resources = dict(_state.snapshot.resources)
        if not resources:
            return []
        lines = []
        for uri, (slug, res) in list(resources.items())[:50]:
            about = (res.description or res.title or res.name or "")[:120]
            lines.append(f"- {uri} ({slug}){': ' + about if about else ''}")
        more = f"\n(and {len(resources) - 50} more)" if len(resources) > 50 else ""
        description = ("Read a resource (a file, document or record) offered by a connected MCP server. "
                       "Available resources:\n" + "\n".join(lines) + more)

        def read(*, ctx: ToolContext, uri: str) -> str:
            entry = _state.snapshot.resources.get(uri) or resources.get(uri)
            if entry is None:
                raise ToolError(f"Resource {uri!r} is not available right now.")
            slug = entry[0]
            try:
                result = runtime.read_resource(slug, uri, timeout_s=60)
            except (ServerGone, ServerUnavailable) as exc:
                raise ToolError(str(exc), retryable=True) from None
            except CallFailed as exc:
                raise ToolError(f"MCP server {slug!r} could not read {uri}: {exc}") from None
            return "\n\n".join(resource_text(c) for c in result.contents)

        return [ToolSpec(
            name=RESOURCE_TOOL, description=description[:DESCRIPTION_CHARS * 2], risk="read", func=read,
            parameters={"type": "object", "properties": {"uri": {"type": "string", "enum": list(resources)}},
                        "required": ["uri"], "additionalProperties": False},
            source=self.name,
        )]


mcp_tools = MCPToolSource()
mcp_resources = MCPResourceSource()


# --- admin / command line ---------------------------------------------------------------------------
@dataclass
class ServerReport:
    server: MCPServer
    health: str
    server_info: str = ""
    tools: list[MCPTool] = field(default_factory=list)
    resources: list = field(default_factory=list)
    checked_at: datetime | None = None


def refresh(server: MCPServer, timeout_s: float | None = None) -> ServerReport:
    """Connect (or re-list) ``server`` now and store what it offers: the admin's "connect
    and list tools" and ``manage.py mcp_refresh``. A disabled server is connected once for
    the listing only; its tools stay unoffered."""
    timeout_s = timeout_s or float(server.connect_timeout_s) + 5
    if not server.enabled:
        return _probe_disabled(server, timeout_s)
    reconcile()
    conn = runtime.wait_attempt(server.slug, timeout_s)
    if conn is not None and conn.state == "connected":
        conn = runtime.relist(server.slug, timeout_s)
    elif conn is not None:
        conn = runtime.relist(server.slug, timeout_s)  # a failed server: retry now, not after backoff
        runtime.wait_attempt(server.slug, timeout_s)
    reconcile()
    server.refresh_from_db()
    return ServerReport(
        server=server, health=server.health_status or (conn.health if conn else "not started"),
        server_info=conn.server_info if conn else "",
        tools=list(server.tools.filter(present=True).select_related("policy")),
        resources=list(conn.listing.resources) if conn and conn.listing else [],
        checked_at=server.health_checked_at,
    )


def _probe_disabled(server: MCPServer, timeout_s: float) -> ServerReport:
    from .runtime import Connection

    try:
        config = server_config(server)
    except ConfigError as exc:
        return ServerReport(server=server, health=f"failed: {exc}")
    conn = Connection(config)

    seen: dict[str, str] = {}

    async def once() -> None:
        task = asyncio.ensure_future(conn.run())
        try:
            deadline = time.monotonic() + timeout_s
            while conn.state == "connecting" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            seen["health"] = conn.health
            conn.stop()
            try:
                await asyncio.wait_for(task, timeout=10)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()

    runtime.submit(once()).result(timeout_s + 15)
    health = seen.get("health", "failed: no answer")
    if conn.listing:
        store_listing(server, conn.listing)
    now = datetime.now(UTC)
    MCPServer.objects.filter(pk=server.pk).update(health_status=health[:500], health_checked_at=now)
    server.refresh_from_db()
    return ServerReport(server=server, health=health, server_info=conn.server_info,
                        tools=list(server.tools.filter(present=True).select_related("policy")),
                        resources=list(conn.listing.resources) if conn.listing else [], checked_at=now)


def reset() -> None:
    """Stop every connection and forget the snapshot (tests; process exit)."""
    runtime.shutdown()
    with _state.lock:
        _state.snapshot = Snapshot()
        _state.seen.clear()
        _state.stale = True
        _state.last = 0.0


def warm_up(wait_s: float = 10.0) -> None:
    """Connect this process's enabled servers now (web process start, worker ready), so the
    first chat turn already has their tools; waits up to ``wait_s`` for the first attempts."""
    try:
        reconcile()
        deadline = time.monotonic() + wait_s
        for slug in runtime.connections():
            runtime.wait_attempt(slug, max(0.0, deadline - time.monotonic()))
        reconcile()
    except Exception:  # noqa: BLE001 — never break start-up; the next offer reconciles again
        logger.warning("MCP warm-up skipped", exc_info=settings.DEBUG)


def warm_up_in_background(**kwargs) -> None:
    """``warm_up`` in its own thread (which closes its database connection when done)."""

    def run() -> None:
        from django.db import connections

        try:
            warm_up()
        finally:
            connections.close_all()

    threading.Thread(target=run, name="mcp-warm-up", daemon=True).start()


DEMO_TIME_SERVER = {
    "name": "Time (reference MCP server)",
    "transport": MCPServer.Transport.STDIO,
    "args": [],
    "enabled": True,
    "allowlist": ["get_current_time", "convert_time"],
    "connect_timeout_s": 30,
}


def seed_demo_time_server() -> MCPServer:
    """The demo's external server: ``mcp-server-time`` (PyPI, read-only tools), started with
    this interpreter's environment. Created once; an admin's later changes are kept."""
    import sys
    from pathlib import Path

    command = Path(sys.executable).parent / "mcp-server-time"
    server, created = MCPServer.objects.get_or_create(slug="time", defaults={**DEMO_TIME_SERVER,
                                                                             "command": str(command)})
    if server.command == str(command) and not server.args and not server.env and not trust.is_signed(server):
        trust.sign(server)  # the platform's own demo command, set by this code, not by an admin
        server.save(update_fields=["privileged_signature"])
    return server


def delete_policy_with_tool(sender, instance: MCPTool, **kwargs) -> None:
    """Signal receiver: a deleted tool (its server deleted) takes its policy row along."""
    if instance.policy_id:
        ToolPolicy.objects.filter(pk=instance.policy_id).delete()
