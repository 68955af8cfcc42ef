from django.contrib import admin, messages
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from .models import ApiKey
from .services import api_key_revoke


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Users' API keys: prefix, owner, name and times — never the secret (only its hash is
    stored, and the hash is not shown either). Keys are made by their owners; an administrator
    revokes them (the action below), which closes their open sockets and streams at once."""

    list_display = ["prefix", "user", "name", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "created_at"]
    search_fields = ["prefix", "name", "user__username"]
    fields = ["prefix", "user", "name", "created_at", "expires_at", "last_used_at", "revoked_at", "revoked_by"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke(self, request, queryset) -> None:
        count = 0
        for api_key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(api_key=api_key, by=request.user)
            count += 1
        self.message_user(request, f"Revoked {count} API key(s).", messages.SUCCESS)


# The password-posted tokens (DRF's authtoken, kept for compatibility): DRF's own admin lists
# each secret in plain text. Listed by their first characters instead; a token an
# administrator makes here is shown once, in the confirmation message, to hand over.
admin.site.unregister(TokenProxy)


@admin.register(TokenProxy)
class PasswordTokenAdmin(TokenAdmin):
    list_display = ("key_prefix", "user", "created")

    @admin.display(description="Key")
    def key_prefix(self, obj) -> str:
        return obj.key[:6] + "…"

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            self.message_user(request, f"The token for {obj.user}: {obj.key} — copy it now; it is not shown again.",
                              messages.SUCCESS)
