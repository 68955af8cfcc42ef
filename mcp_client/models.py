"""External MCP servers and the tools they offer (managed in the Django admin)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from agents.models import Environment, ToolPolicy


class MCPServer(models.Model):
    """One external MCP server. ``stdio``: ``command`` + ``args`` + ``env`` (the process is
    started by the platform); ``streamable_http``: ``url`` + ``headers``.

    ``${VAR}`` in command, args, env values, url and header values is expanded from the
    platform's environment when connecting — only variables on ``MCP_ENV_ALLOWLIST`` and
    never the platform's own (``mcp_client.trust``). Only a superuser may set a stdio
    server's command/args/env or use ``${VAR}``: ``privileged_signature`` vouches for those
    settings, ``clean()`` refuses anyone else's change (set ``_actor`` to the editing user),
    and a server whose privileged settings are not signed never connects. ``secret_headers_encrypted`` holds header values
    entered write-only in the admin (Fernet, like provider keys); they never appear in a page,
    API response, event or log. ``allowlist``: when non-empty, only these tool names (the
    server's own names) are offered, and they start enabled. ``environment``: every call to
    this server is classified in that environment (a prod environment → prod).
    """

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (local process)"
        STREAMABLE_HTTP = "streamable_http", "Streamable HTTP"

    class Auth(models.TextChoices):
        NONE = "none", _("None or static headers")
        OAUTH = "oauth", _("OAuth (each person signs in)")

    slug = models.CharField(
        max_length=32, unique=True,
        validators=[RegexValidator(r"^[a-z0-9][a-z0-9_-]*$", "Lower-case letters, digits, - and _ only.")],
        help_text="Short name; prefixes tool names that clash (<slug>__<tool>).",
    )
    name = models.CharField(max_length=100)
    transport = models.CharField(max_length=20, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the executable, e.g. uvx or npx.")
    args = models.JSONField(default=list, blank=True, help_text='stdio: a JSON list, e.g. ["mcp-server-time"].')
    env = models.JSONField(default=dict, blank=True, help_text="stdio: extra environment variables (JSON object).")
    url = models.CharField(max_length=500, blank=True, help_text="streamable_http: the endpoint URL.")
    headers = models.JSONField(default=dict, blank=True,
                               help_text="streamable_http: request headers (JSON object); ${VAR} is expanded.")
    secret_headers_encrypted = models.TextField(blank=True, editable=False)
    # OAuth (streamable_http only): every person connects their own account (mcp_client.oauth).
    auth = models.CharField(max_length=10, choices=Auth.choices, default=Auth.NONE,
                            help_text=_("OAuth: each person connects their own account; their calls carry "
                                        "their own token."))
    oauth_client_id = models.CharField(
        max_length=300, blank=True,
        help_text=_("OAuth: a client id registered at the authorization server. Empty: dynamic client "
                    "registration (RFC 7591) when the server offers it."))
    oauth_client_secret_encrypted = models.TextField(blank=True, editable=False)
    oauth_scopes = models.CharField(max_length=500, blank=True,
                                    help_text=_("OAuth: scopes to ask for, space-separated. Empty: what the "
                                                "server advertises."))
    # The person whose token lists the server's tools (an admin who connected from the admin).
    oauth_listing_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                           on_delete=models.SET_NULL, related_name="+", editable=False)
    # HMAC (SECRET_KEY) of the settings only a superuser may set; see mcp_client.trust.
    privileged_signature = models.CharField(max_length=128, blank=True, editable=False)
    enabled = models.BooleanField(default=False)
    allowlist = models.JSONField(default=list, blank=True,
                                 help_text="Tool names (the server's own) offered and enabled on discovery. "
                                           "Empty: every tool, each off until enabled.")
    environment = models.ForeignKey(Environment, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    connect_timeout_s = models.PositiveIntegerField(default=20, help_text="Start + initialise + list, seconds.")
    call_timeout_s = models.PositiveIntegerField(default=60, help_text="Default timeout of its tools, seconds.")
    # Health, written by the platform: connected | failed: <root cause> | connecting.
    health_status = models.CharField(max_length=500, blank=True, editable=False)
    health_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return f"{self.name} ({self.slug})"

    def clean(self) -> None:
        """Refuses (ValidationError) privileged settings set by anyone but a superuser; the
        editing user is ``self._actor`` (the admin sets it; None vouches for nothing)."""
        from . import trust

        super().clean()
        trust.check_change(self, getattr(self, "_actor", None))


class MCPTool(models.Model):
    """A tool an MCP server offered. ``name`` is the server's own name; ``exposed_name`` the
    name offered to models (see ``mcp_client.naming``), which is also its ``ToolPolicy`` row's
    ``tool_name``.

    Drift: ``approved_hash`` is the hash of the definition (name, description, input schema,
    annotations) an admin accepted; when the server offers another definition of an enabled
    tool, ``quarantined`` is set and the tool is neither offered nor callable until an admin
    approves ``current_definition`` (old and new shown side by side in the admin).
    Descriptions and annotations are untrusted text written by the server's author.
    """

    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=500)
    exposed_name = models.CharField(max_length=64, blank=True)
    policy = models.OneToOneField(ToolPolicy, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="mcp_tool")
    current_definition = models.JSONField(default=dict)
    current_hash = models.CharField(max_length=64)
    approved_definition = models.JSONField(default=dict)
    approved_hash = models.CharField(max_length=64)
    quarantined = models.BooleanField(default=False)
    quarantined_at = models.DateTimeField(null=True, blank=True)
    present = models.BooleanField(default=True, help_text="Offered by the server at its last listing.")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["server", "name"]
        verbose_name = "MCP tool"
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="mcptool_unique_name")]

    def __str__(self) -> str:
        return f"{self.server.slug}/{self.name}"


class MCPOAuthClient(models.Model):
    """What discovery found for an OAuth server and the client the platform is registered as
    there: ``resource`` (RFC 8707, the canonical server URL or the protected-resource
    metadata's), ``issuer`` and the authorization-server metadata (RFC 8414) as JSON, and the
    client information (RFC 7591 answer or the admin's id/secret) Fernet-encrypted. One per
    server; rediscovered when the server's URL or client settings change (``fingerprint``)."""

    server = models.OneToOneField(MCPServer, on_delete=models.CASCADE, related_name="oauth_client")
    fingerprint = models.CharField(max_length=64)
    resource = models.CharField(max_length=500)
    issuer = models.CharField(max_length=500)
    metadata = models.JSONField(default=dict)
    client_info_encrypted = models.TextField()
    registered = models.BooleanField(default=False, help_text="the client id came from dynamic registration")
    discovered_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP OAuth client"

    def __str__(self) -> str:
        return f"{self.server_id}: {self.issuer}"


class MCPUserToken(models.Model):
    """One person's tokens for one OAuth MCP server (Fernet-encrypted; never shown).

    ``status``: ``connected`` | ``expired`` (the refresh token was refused: connect again) |
    ``error`` (``error`` says why). ``version`` grows with every new access token; the refresh
    lease (``lease_until``/``lease_owner``) makes one refresh per person and server across
    processes and hosts: the caller that wins the compare-and-set refreshes, the others wait
    for ``version`` to change (``mcp_client.oauth.access_token``)."""

    class Status(models.TextChoices):
        CONNECTED = "connected", _("connected")
        EXPIRED = "expired", _("expired")
        ERROR = "error", _("error")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_tokens")
    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="user_tokens")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CONNECTED)
    error = models.CharField(max_length=300, blank=True)
    access_token_encrypted = models.TextField(blank=True)
    refresh_token_encrypted = models.TextField(blank=True)
    scope = models.CharField(max_length=500, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=32, blank=True)
    connected_at = models.DateTimeField(auto_now_add=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "MCP user connection"
        constraints = [models.UniqueConstraint(fields=["user", "server"], name="mcpusertoken_unique")]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.server_id}: {self.status}"


class MCPAuthRequest(models.Model):
    """A consent in flight: the ``state`` sent to the authorization server, the PKCE verifier
    (encrypted), who started it and — when a run parked on it — the tool call to resume. Used
    once (``used_at``); expires after ``MCP_OAUTH_REQUEST_TTL_S``."""

    state = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="+")
    verifier_encrypted = models.TextField()
    redirect_uri = models.CharField(max_length=500)
    return_to = models.CharField(max_length=500, blank=True)
    tool_call_id = models.UUIDField(null=True, blank=True)
    # Started from the admin by a staff member: their token lists the server's tools.
    for_listing = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "MCP OAuth request"

    def __str__(self) -> str:
        return f"{self.user_id}@{self.server_id} ({'used' if self.used_at else 'open'})"


class MCPElicitation(models.Model):
    """An MCP server's question to a run's person during a tool call (``elicitation/create``,
    form mode): the card's message and fields, and how it ended. The worker whose call waits
    polls the row; the person's answer (``answer_encrypted``: the accepted values as JSON,
    Fernet-encrypted like provider keys) reaches it here from any web process and is blanked
    as soon as the worker took it — a sensitive value is never stored in clear, never logged.

    ``status``: ``pending`` | ``accept`` | ``decline`` | ``cancel`` (what the server was told;
    ``reason`` says why: answered, expired, unattended, limit, unsupported, cancelled)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        ACCEPT = "accept"
        DECLINE = "decline"
        CANCEL = "cancel"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey("agents.Run", on_delete=models.CASCADE, related_name="+")
    tool_call = models.ForeignKey("agents.ToolCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    server_slug = models.CharField(max_length=64)
    server_name = models.CharField(max_length=200, blank=True)
    message = models.TextField(blank=True)
    fields = models.JSONField(default=list, blank=True, help_text="the card's fields (mcp_client.elicitation)")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    reason = models.CharField(max_length=20, blank=True)
    answer_encrypted = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "MCP elicitation"

    def __str__(self) -> str:
        return f"{self.server_slug}: {self.status}"


class MCPResourceLink(models.Model):
    """A resource an MCP server linked (``resource_link`` or an embedded resource) in a tool
    result of someone's thread: the only URIs ``/mcp-resources/<server id>/?uri=`` reads for
    them — never an open proxy to whatever URI a caller names."""

    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    thread_id = models.UUIDField()
    tool_call = models.ForeignKey("agents.ToolCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    uri = models.CharField(max_length=2000)
    name = models.CharField(max_length=300, blank=True)
    mime_type = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "MCP resource link"
        indexes = [models.Index(fields=["server", "user", "uri"], name="mcpreslink_lookup")]

    def __str__(self) -> str:
        return self.uri
