from django import forms
from django.contrib import admin

from .models import Membership, Message, Thread, Workspace


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class WorkspaceForm(forms.ModelForm):
    class Meta:
        model = Workspace
        fields = ["name", "slug", "instructions", "default_provider", "default_model", "artifacts_enabled"]

    def clean(self):
        """A default model must be one the provider offers: an enabled model row, or its own
        default model (a name nobody enabled would fail every new chat's first send)."""
        data = super().clean()
        provider, model = data.get("default_provider"), (data.get("default_model") or "").strip()
        if provider is None and model:
            self.add_error("default_model", "Choose the default provider too (or leave the model empty).")
        elif provider is not None and model and model != provider.default_model \
                and not provider.models.filter(name=model, enabled=True).exists():
            self.add_error("default_model", f"{provider.name} has no enabled model {model!r}: enable it under "
                                            "LLM models, or leave this empty for the provider's default model.")
        data["default_model"] = model
        return data


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    form = WorkspaceForm
    list_display = ["name", "slug", "artifacts_enabled", "created_at"]
    search_fields = ["name", "slug"]
    fields = ["name", "slug", "instructions", "default_provider", "default_model", "artifacts_enabled"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "workspace", "role", "created_at"]
    list_filter = ["workspace", "role"]
    search_fields = ["user__username", "workspace__name"]


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    list_display = ["title", "owner", "workspace", "provider", "model", "updated_at"]
    list_filter = ["workspace", "provider"]
    search_fields = ["title", "owner__username"]
    readonly_fields = ["created_at", "updated_at"]
    exclude = ["leaf"]  # the selected branch is the owner's choice (chat UI / REST), not the admin's


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["thread", "position", "role", "status", "provider", "model", "created_at"]
    list_filter = ["role", "status", "provider"]
    search_fields = ["content"]
    readonly_fields = [f.name for f in Message._meta.fields]

    def has_add_permission(self, request):
        return False
