"""Admin for external MCP servers and their tools.

* MCP servers: connection settings; secret header values are write-only (stored encrypted,
  only their header names are shown). A stdio server's command/args/env and ``${VAR}``
  expansion are for superusers only (``mcp_client.trust``): other staff see them read-only
  (env values masked) and the form refuses a stdio server or a ``${VAR}`` from them. Every
  saved change or deletion is an audit row ``mcp_server_changed``. Action "Connect and list tools": each tool with its
  description, input schema and MCP annotations (untrusted text, shown escaped), and the
  server's health.
* MCP tools: where each tool stands (exposed name, policy, quarantine); a quarantined tool's
  approved and new definitions side by side, and the action that approves the new one.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import NON_FIELD_ERRORS
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from agents.audit import audit_record
from agents.models import AuditEvent

from . import oauth, sync, trust
from .models import MCPServer, MCPTool, MCPUserToken


def _pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def definition_sides(approved, current) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """The approved and the offered definition as pretty JSON lines, each ``(line, changed)``:
    ``changed`` marks the lines that differ from the other side (``difflib``), so the drift
    review shows what moved even in a long definition."""
    import difflib

    old, new = _pretty(approved).splitlines(), _pretty(current).splitlines()
    old_marks, new_marks = [False] * len(old), [False] * len(new)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag != "equal":
            old_marks[i1:i2] = [True] * (i2 - i1)
            new_marks[j1:j2] = [True] * (j2 - j1)
    return list(zip(old, old_marks, strict=True)), list(zip(new, new_marks, strict=True))


def _lines_html(lines) -> str:
    return format_html_join("", '<span class="{}">{}</span>\n',
                            (("line changed" if changed else "line", text) for text, changed in lines))


# The drift review's layout lives in a stylesheet: the site's Content-Security-Policy allows no
# inline style attributes (they were dropped, and the two definitions stacked with lines cut).
ADMIN_CSS = {"all": ["chat/admin-mcp.css"]}


class MCPServerForm(forms.ModelForm):
    secret_headers = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2, "autocomplete": "off"}),
        help_text="Write-only: one “Header-Name: value” per line, stored encrypted and never shown again. "
                  "Leave empty to keep the stored ones.",
    )
    clear_secret_headers = forms.BooleanField(required=False, help_text="Remove the stored secret headers.")
    oauth_client_secret = forms.CharField(
        label=_("OAuth client secret"), required=False, widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
        help_text=_("Write-only: stored encrypted and never shown again. Leave empty to keep the stored one; "
                    "only with an admin-entered client id."))
    clear_oauth_client_secret = forms.BooleanField(label=_("Remove the stored client secret"), required=False)

    class Meta:
        model = MCPServer
        fields = ["slug", "name", "enabled", "transport", "command", "args", "env", "url", "headers",
                  "auth", "oauth_client_id", "oauth_scopes",
                  "allowlist", "environment", "connect_timeout_s", "call_timeout_s"]

    actor = None  # the editing user (set by MCPServerAdmin.get_form)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance._actor = self.actor  # the model's clean() refuses privileged changes by others
        if "auth" in self.fields:  # a form posted without it (scripts, older pages) keeps "none"
            self.fields["auth"].required = False
        self.stored_transport = self.instance.transport if self.instance.pk else None

    def clean_auth(self) -> str:
        return self.cleaned_data.get("auth") or MCPServer.Auth.NONE

    def clean_secret_headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in (self.cleaned_data.get("secret_headers") or "").splitlines():
            if not line.strip():
                continue
            name, sep, value = line.partition(":")
            if not sep or not name.strip() or not value.strip():
                raise forms.ValidationError("Each line must look like “Header-Name: value”.")
            out[name.strip()] = value.strip()
        return out

    def clean(self):
        data = super().clean()
        transport = data.get("transport", self.instance.transport)
        stdio = MCPServer.Transport.STDIO
        if (transport == stdio and self.stored_transport != stdio and "command" not in self.fields):
            self.add_error("transport", forms.ValidationError(
                "Only a superuser may configure a stdio server: it runs a command on the platform's host as the "
                "platform's user.", code="privileged"))
            return data
        command = data.get("command") if "command" in self.fields else self.instance.command
        if transport == stdio and not command:
            self.add_error("command", "A stdio server needs a command.")
        if transport == MCPServer.Transport.STREAMABLE_HTTP and not data.get("url"):
            self.add_error("url", "A streamable HTTP server needs a URL.")
        if data.get("auth") == MCPServer.Auth.OAUTH and transport != MCPServer.Transport.STREAMABLE_HTTP:
            self.add_error("auth", _("OAuth needs a streamable HTTP server."))
        if data.get("oauth_client_secret") and not data.get("oauth_client_id"):
            self.add_error("oauth_client_secret", _("A client secret goes with a client id: enter the client id too."))
        for field, kind in (("args", list), ("env", dict), ("headers", dict), ("allowlist", list)):
            value = data.get(field)
            if value is not None and not isinstance(value, kind):
                self.add_error(field, f"Must be a JSON {'list' if kind is list else 'object'}.")
        return data

    def _post_clean(self):
        super()._post_clean()  # the model's clean() (trust.check_change) runs here
        refused = [e for field in ("transport", NON_FIELD_ERRORS)
                   for e in self.errors.as_data().get(field, []) if e.code == "privileged"]
        if refused and self.actor is not None:
            audit_record(kind=AuditEvent.Kind.PERMISSION_DENIED, user=self.actor, detail={
                "server": self.cleaned_data.get("slug") or self.instance.slug, "action": "mcp_server_privileged",
                "reason": refused[0].messages[0]})

    def save(self, commit=True):
        server = super().save(commit=False)
        if self.cleaned_data.get("clear_secret_headers"):
            server.secret_headers_encrypted = ""
        elif self.cleaned_data.get("secret_headers"):
            merged = {**sync.secret_headers(server), **self.cleaned_data["secret_headers"]}
            sync.secret_headers_store(server, merged)
        if self.cleaned_data.get("clear_oauth_client_secret"):
            oauth.set_client_secret(server, "")
        elif self.cleaned_data.get("oauth_client_secret"):
            oauth.set_client_secret(server, self.cleaned_data["oauth_client_secret"])
        if commit:
            server.save()
        return server


class MCPToolInline(admin.TabularInline):
    model = MCPTool
    extra = 0
    can_delete = False
    fields = ["name", "exposed_name", "policy_link", "quarantined", "present", "last_seen_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="policy")
    def policy_link(self, obj):
        if obj.policy_id is None:
            return "—"
        url = reverse("admin:agents_toolpolicy_change", args=[obj.policy_id])
        state = "enabled" if obj.policy.enabled else "off"
        return format_html('<a href="{}">{} ({}, {})</a>', url, obj.policy.tool_name, state, obj.policy.risk)


class MCPUserTokenInline(admin.TabularInline):
    """Each person's connection to an OAuth server (tokens are never shown)."""

    model = MCPUserToken
    extra = 0
    can_delete = False
    verbose_name = _("person's connection")
    verbose_name_plural = _("people's connections (OAuth)")
    fields = ["user", "status", "error", "expires_at", "connected_at", "refreshed_at", "last_used_at", "manage"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description=_("manage"))
    def manage(self, obj):
        return format_html('<a href="{}">{}</a>', reverse("admin:agents_mcp_mcpusertoken_change", args=[obj.pk]),
                           _("details / disconnect"))


@admin.register(MCPServer)
class MCPServerAdmin(admin.ModelAdmin):
    form = MCPServerForm
    list_display = ["slug", "name", "transport", "auth", "enabled", "health_status", "health_checked_at", "tool_count"]
    list_filter = ["enabled", "transport", "auth"]
    readonly_fields = ["stored_secret_headers", "health_status", "health_checked_at", "oauth_state"]
    inlines = [MCPToolInline, MCPUserTokenInline]
    actions = ["connect_and_list"]
    fieldsets = [
        (None, {"fields": ["slug", "name", "enabled", "transport"]}),
        ("stdio", {"fields": ["command", "args", "env"]}),
        ("Streamable HTTP", {"fields": ["url", "headers", "stored_secret_headers", "secret_headers",
                                        "clear_secret_headers"]}),
        (_("Sign-in (OAuth)"), {"fields": ["auth", "oauth_client_id", "oauth_client_secret",
                                             "clear_oauth_client_secret", "oauth_scopes", "oauth_state"],
                                  "description": _("OAuth: every person connects their own account from a "
                                                   "“Connect to continue” card in the chat, and their calls "
                                                   "carry their own token. The tools are listed with the account "
                                                   "of the administrator who connects below.")}),
        ("Governance", {"fields": ["allowlist", "environment", "connect_timeout_s", "call_timeout_s"],
                        "description": "${VAR} in command, args, env, url and headers is expanded from the "
                                       "platform's environment when connecting: superusers only, and only "
                                       "variables on MCP_ENV_ALLOWLIST (never the platform's own)."}),
        ("Health", {"fields": ["health_status", "health_checked_at"]}),
    ]

    superuser_only_fields = ("command", "args", "env")

    def get_inlines(self, request, obj):
        if obj is None or obj.auth != MCPServer.Auth.OAUTH:
            return [MCPToolInline]  # people's connections exist only for an OAuth server
        return self.inlines

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"actor": request.user})

    def get_fieldsets(self, request, obj=None):
        if trust.is_superuser(request.user):
            return self.fieldsets
        return [(name, {**opts, "fields": ["env_masked" if f == "env" else f for f in opts["fields"]]})
                if name == "stdio" else (name, opts) for name, opts in self.fieldsets]

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if not trust.is_superuser(request.user):
            fields += ["command", "args", "env_masked"]
        return fields

    @admin.display(description="env")
    def env_masked(self, obj):
        names = sorted((obj.env or {}) if obj and obj.pk else {})
        return ", ".join(f"{n}=••••" for n in names) or "none"

    def save_model(self, request, obj, form, change):
        old = MCPServer.objects.filter(pk=obj.pk).first() if change else None
        super().save_model(request, obj, form, change)
        if old is not None and (old.url, old.oauth_client_id, old.oauth_client_secret_encrypted, old.auth) != (
                obj.url, obj.oauth_client_id, obj.oauth_client_secret_encrypted, obj.auth):
            dropped = oauth.forget_server(obj, actor=request.user)  # tokens of the old URL never go to a new one
            if dropped:
                self.message_user(request, _("%(count)s person(s) must connect again: the server's sign-in "
                                             "settings changed.") % {"count": dropped}, level=messages.WARNING)
        fields = trust.changed_fields(old, obj)
        if fields:
            audit_record(kind=AuditEvent.Kind.MCP_SERVER_CHANGED, user=request.user, detail={
                "server": obj.slug, "action": "changed" if change else "added", "fields": fields,
                "privileged": bool(trust.privileged_material(obj)) and bool(
                    {"transport", "command", "args", "env", "url", "headers"} & set(fields)),
            })

    def delete_model(self, request, obj):
        slug = obj.slug
        super().delete_model(request, obj)
        audit_record(kind=AuditEvent.Kind.MCP_SERVER_CHANGED, user=request.user,
                     detail={"server": slug, "action": "deleted", "fields": []})

    def delete_queryset(self, request, queryset):
        slugs = list(queryset.values_list("slug", flat=True))
        super().delete_queryset(request, queryset)
        for slug in slugs:
            audit_record(kind=AuditEvent.Kind.MCP_SERVER_CHANGED, user=request.user,
                         detail={"server": slug, "action": "deleted", "fields": []})

    @admin.display(description="stored secret headers")
    def stored_secret_headers(self, obj):
        names = sorted(sync.secret_headers(obj)) if obj and obj.pk else []
        return ", ".join(f"{n}: ••••" for n in names) or "none"

    @admin.display(description=_("OAuth state"))
    def oauth_state(self, obj):
        if not obj or not obj.pk or obj.auth != MCPServer.Auth.OAUTH:
            return "—"
        client = oauth.stored_client(obj)
        found = (_("authorization server %(issuer)s, client %(kind)s")
                 % {"issuer": client.row.issuer, "kind": _("registered dynamically") if client.row.registered
                    else _("entered here")}) if client else _("not discovered yet")
        lister = obj.oauth_listing_user.get_username() if obj.oauth_listing_user_id else _("nobody yet")
        connect = reverse("mcp-oauth-connect", args=[obj.slug]) + "?listing=1&next=" + reverse(
            "admin:agents_mcp_mcpserver_change", args=[obj.pk])
        return format_html('{}<br>{} {}<br><a href="{}">{}</a>', found, _("Tools listed as:"), lister, connect,
                           _("Connect my account (lists the tools)") if obj.enabled else "")

    @admin.display(description="tools")
    def tool_count(self, obj):
        return obj.tools.filter(present=True).count()

    @admin.action(description="Connect and list tools")
    def connect_and_list(self, request, queryset):
        reports = []
        for server in queryset:
            reports.append(sync.refresh(server))
        rows = []
        for report in reports:
            tools = [{
                "tool": t,
                "description": t.current_definition.get("description", ""),
                "schema": _pretty(t.current_definition.get("inputSchema", {})),
                "annotations": _pretty(t.current_definition.get("annotations", {})),
                "policy_url": reverse("admin:agents_toolpolicy_change", args=[t.policy_id]) if t.policy_id else "",
                "tool_url": reverse("admin:agents_mcp_mcptool_change", args=[t.pk]),
            } for t in report.tools]
            rows.append({"report": report, "tools": tools})
        context = {**self.admin_site.each_context(request), "title": "MCP servers: tools and health",
                   "rows": rows, "opts": self.model._meta}
        return TemplateResponse(request, "admin/agents_mcp/tool_listing.html", context)


@admin.register(MCPTool)
class MCPToolAdmin(admin.ModelAdmin):
    list_display = ["exposed_name", "server", "name", "quarantined", "policy_enabled", "present", "last_seen_at"]
    list_filter = ["server", "quarantined", "present"]
    search_fields = ["name", "exposed_name"]
    readonly_fields = ["server", "name", "exposed_name", "policy", "quarantined", "quarantined_at", "present",
                       "first_seen_at", "last_seen_at", "definitions"]
    fields = readonly_fields
    actions = ["approve_definition"]

    def has_add_permission(self, request):
        return False

    @admin.display(boolean=True, description="enabled")
    def policy_enabled(self, obj):
        return bool(obj.policy and obj.policy.enabled)

    class Media:
        css = ADMIN_CSS

    @admin.display(description="definition (approved | offered now) — untrusted text from the server")
    def definitions(self, obj):
        changed = obj.current_hash != obj.approved_hash
        approved, current = definition_sides(obj.approved_definition, obj.current_definition)
        return format_html(
            '<div class="mcp-drift"><div><strong>approved</strong><pre class="mcp-def">{}</pre></div>'
            '<div><strong>offered now{}</strong><pre class="mcp-def">{}</pre></div></div>',
            _lines_html(approved), " (changed lines marked)" if changed else "", _lines_html(current),
        )

    @admin.action(description="Approve the changed definition (lift quarantine)")
    def approve_definition(self, request, queryset):
        done = 0
        for tool in queryset.select_related("server"):
            if tool.quarantined or tool.current_hash != tool.approved_hash:
                sync.approve_definition(tool, request.user)
                done += 1
        level = messages.SUCCESS if done else messages.WARNING
        self.message_user(request, f"{done} tool definition(s) approved.", level=level)


@admin.register(MCPUserToken)
class MCPUserTokenAdmin(admin.ModelAdmin):
    """People's connections to OAuth MCP servers: status per person and server, and
    disconnecting someone (their tokens are revoked at the authorization server and forgotten;
    an audit row ``mcp_oauth`` records who did it)."""

    list_display = ["user", "server", "status", "expires_at", "connected_at", "refreshed_at", "last_used_at"]
    list_filter = ["server", "status"]
    search_fields = ["user__username", "server__slug"]
    fields = ["user", "server", "status", "error", "scope", "expires_at", "version", "connected_at", "refreshed_at",
              "last_used_at"]
    readonly_fields = fields
    actions = ["disconnect"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # disconnecting revokes upstream: the action, not a bare delete

    def has_disconnect_permission(self, request) -> bool:
        return request.user.has_perm("agents_mcp.delete_mcpusertoken")

    @admin.action(description=_("Disconnect (revoke the tokens at the server)"), permissions=["disconnect"])
    def disconnect(self, request, queryset):
        done = 0
        for row in list(queryset.select_related("server")):
            done += oauth.disconnect(row.user_id, row.server, actor=request.user)
        self.message_user(request, _("%(count)s connection(s) disconnected.") % {"count": done},
                          level=messages.SUCCESS if done else messages.WARNING)
