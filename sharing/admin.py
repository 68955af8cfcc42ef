"""Share links in the admin: administrators see every link (never the token: the link is the
secret) and revoke them; a workspace's sharing setting (public links, off by default) is set
here."""

from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .models import ShareLink, WorkspaceSharing
from .services import share_revoke


@admin.register(ShareLink)
class ShareLinkAdmin(admin.ModelAdmin):
    list_display = ["title", "thread", "visibility", "created_by", "created_at", "expires_at", "revoked_at"]
    list_filter = ["visibility", ("revoked_at", admin.EmptyFieldListFilter), "created_at"]
    search_fields = ["title", "created_by__username"]
    fields = ["title", "thread", "leaf", "visibility", "created_by", "created_at", "expires_at", "revoked_at",
              "revoked_by"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description=_("Revoke selected share links"), permissions=["change"])
    def revoke(self, request, queryset) -> None:
        count = 0
        for share in queryset.filter(revoked_at__isnull=True):
            share_revoke(share=share, by=request.user)
            count += 1
        self.message_user(request, ngettext("Revoked %(n)d share link.", "Revoked %(n)d share links.", count)
                          % {"n": count}, messages.SUCCESS)


@admin.register(WorkspaceSharing)
class WorkspaceSharingAdmin(admin.ModelAdmin):
    list_display = ["workspace", "public_links", "updated_at"]
    list_editable = ["public_links"]
    fields = ["workspace", "public_links"]
    autocomplete_fields = ["workspace"]

    def get_readonly_fields(self, request, obj=None):
        return ["workspace"] if obj is not None else []
