from django import forms
from django.contrib import admin, messages

from chat.admin import BlindAdminMixin
from chat.models import Thread
from chat.selectors import thread_blinded_for

from .catalogue import models_refresh, provider_health
from .models import (
    ApprovalDecision,
    ApprovalPolicy,
    AuditEvent,
    Environment,
    LLMModel,
    Provider,
    Role,
    Run,
    ToolCall,
    ToolPolicy,
)
from .provider_keys import encrypt_key


@admin.register(Role)
class RoleAdmin(admin.ModelAdmin):
    list_display = ["name", "label", "rank", "is_admin"]


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    list_display = ["name", "tier"]


class ProviderForm(forms.ModelForm):
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Write-only: stored encrypted and never shown again. Leave empty to keep the current key.",
    )
    clear_api_key = forms.BooleanField(required=False, help_text="Remove the stored key.")

    class Meta:
        model = Provider
        fields = ["slug", "name", "kind", "base_url", "api_key_env", "default_model", "enabled", "echo_reasoning",
                  "environment", "agent_approve_as"]

    def save(self, commit=True):
        provider = super().save(commit=False)
        if self.cleaned_data.get("clear_api_key"):
            provider.api_key_encrypted = ""
        elif self.cleaned_data.get("api_key"):
            provider.api_key_encrypted = encrypt_key(self.cleaned_data["api_key"])
        if commit:
            provider.save()
        return provider


class LLMModelInline(admin.TabularInline):
    model = LLMModel
    extra = 0
    fields = ["name", "label", "enabled", "allowed_roles", "prompt_tier", "parameter_size", "context_window",
              "supports_tools", "supports_images", "echo_reasoning", "listed_at"]
    readonly_fields = ["listed_at"]


def _refresh(modeladmin, request, providers) -> None:
    """Probe each provider (short timeouts), cache its model listing and health status."""
    for provider in providers:
        result = models_refresh(provider=provider)
        if result.ok:
            modeladmin.message_user(request, f"{provider.name} ({provider.slug}): ok, {len(result.listed)} models listed")
        else:
            modeladmin.message_user(request, f"{provider.name} ({provider.slug}): {result.status}",
                                    level=messages.WARNING)


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    form = ProviderForm
    list_display = ["name", "slug", "kind", "base_url", "default_model", "enabled", "health", "health_checked_at",
                    "has_stored_key"]
    list_filter = ["kind", "enabled"]
    readonly_fields = ["health", "health_checked_at", "models_refreshed_at"]
    inlines = [LLMModelInline]
    actions = ["refresh_models"]

    @admin.display(description="status")
    def health(self, obj):
        return provider_health(obj)

    @admin.display(boolean=True, description="stored key")
    def has_stored_key(self, obj):
        return bool(obj.api_key_encrypted)

    @admin.action(description="Refresh models and health")
    def refresh_models(self, request, queryset):
        _refresh(self, request, queryset)


@admin.register(LLMModel)
class LLMModelAdmin(admin.ModelAdmin):
    list_display = ["name", "provider", "context_window", "supports_tools", "supports_images", "parameter_size",
                    "prompt_tier", "echo_reasoning", "listed", "enabled"]
    list_filter = ["provider", "prompt_tier", "enabled"]
    readonly_fields = ["listed_at"]
    actions = ["refresh_models"]

    @admin.display(boolean=True, description="in listing")
    def listed(self, obj):
        return obj.listed_at is not None

    @admin.action(description="Refresh models of these providers")
    def refresh_models(self, request, queryset):
        _refresh(self, request, Provider.objects.filter(pk__in=queryset.values("provider_id")))


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):
    list_display = ["tool_name", "enabled", "risk", "approval_mode", "timeout_s", "roles"]
    list_editable = ["enabled"]
    list_filter = ["enabled", "risk", "approval_mode"]
    filter_horizontal = ["allowed_roles"]

    @admin.display(description="allowed roles")
    def roles(self, obj):
        names = ", ".join(r.name for r in obj.allowed_roles.all())
        return names or ("every role" if obj.risk == "read" else "no one (name roles to allow)")


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "thread", "user", "status", "provider", "model", "iterations", "created_at"]
    list_filter = ["status", "provider"]
    search_fields = ["id", "user__username"]


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    """Who may approve which calls (agents.approvals.policy: the most specific enabled rule wins)."""

    list_display = ["name", "enabled", "tool_policy", "source", "risk_shown", "tier_shown", "approver_kind",
                    "approver_role", "approvals_needed", "requester_counts", "expires_s"]
    list_editable = ["enabled"]
    list_filter = ["enabled", "approver_kind", "risk", "env_tier", "approvals_needed"]
    fields = ["name", "enabled", "tool_policy", "mcp_server", "provider", "risk", "env_tier", "approver_kind",
              "approver_role", "approvals_needed", "requester_counts", "expires_s"]

    @admin.display(description="source")
    def source(self, obj):
        return obj.mcp_server or obj.provider or "any"

    @admin.display(description="risk")
    def risk_shown(self, obj):
        return obj.risk or "any"

    @admin.display(description="tier")
    def tier_shown(self, obj):
        return obj.env_tier or "any"


class ApprovalDecisionInline(admin.TabularInline):
    """Every approver of the call: who, their role at the time, the decision, when."""

    model = ApprovalDecision
    extra = 0
    can_delete = False
    fields = ["decided_at", "username", "role", "as_requester", "decision"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(ToolCall)
class ToolCallAdmin(BlindAdminMixin, ReadOnlyAdmin):
    """The tool ledger. In an admin-blind workspace a staff user sees a member's calls' name,
    status, risk, environment and times, not what they carried (arguments, result, summary)."""

    list_display = ["tool_name", "status", "risk", "run", "approvals_shown", "attempts", "duration_ms", "created_at"]
    inlines = [ApprovalDecisionInline]
    thread_path = "run__thread"
    content_fields = ("arguments", "raw_arguments", "result", "summary", "message", "approval")
    safe_search_fields = ("tool_name", "call_id", "run__user__username")

    @admin.display(description="approvals")
    def approvals_shown(self, obj):
        if obj.requested_at is None:
            return "-"
        rule = (obj.approval or {}).get("rule", "")
        return f"{obj.approvals_so_far}/{obj.approvals_needed} {rule}".strip()
    list_filter = ["status", "tool_name", "risk", ("run__user", admin.RelatedOnlyFieldListFilter),
                   ("created_at", admin.DateFieldListFilter)]
    search_fields = ["tool_name", "call_id", "run__user__username"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Permission denials, rejected UI context and frames, refused decisions."""

    list_display = ["created_at", "kind", "user", "workspace", "tool_name", "run"]
    list_filter = ["kind", ("user", admin.RelatedOnlyFieldListFilter), "tool_name",
                   ("created_at", admin.DateFieldListFilter)]
    search_fields = ["tool_name", "user__username"]

    def get_fields(self, request, obj=None):
        """An event of an admin-blind chat's (its ``detail`` can quote what was sent: a rejected
        UI context or frame, a refused call's arguments) shows without ``detail`` to staff
        who may not read that chat."""
        fields = list(super().get_fields(request, obj))
        if obj is not None and obj.thread_id is not None:
            thread = Thread.objects.select_related("workspace").filter(pk=obj.thread_id).first()
            if thread is not None and thread_blinded_for(user=request.user, thread=thread):
                return [f for f in fields if f != "detail"]
        return fields
