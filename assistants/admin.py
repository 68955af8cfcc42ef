from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from .models import Assistant


@admin.register(Assistant)
class AssistantAdmin(admin.ModelAdmin):
    """Workspace assistants: an administrator features them (listed first in the picker) or
    disables them (refused at every send; their chats keep their history)."""

    list_display = ["name", "workspace", "owner", "provider", "model", "visibility", "featured", "disabled",
                    "updated_at"]
    list_filter = ["workspace", "visibility", "featured", "disabled"]
    search_fields = ["name", "description", "owner__username"]
    list_editable = ["featured", "disabled"]
    readonly_fields = ["created_at", "updated_at"]
    actions = ["feature", "disable", "enable"]

    @admin.action(description=_("Feature selected assistants"), permissions=["change"])
    def feature(self, request, queryset) -> None:
        queryset.update(featured=True)

    @admin.action(description=_("Disable selected assistants"), permissions=["change"])
    def disable(self, request, queryset) -> None:
        queryset.update(disabled=True)

    @admin.action(description=_("Enable selected assistants"), permissions=["change"])
    def enable(self, request, queryset) -> None:
        queryset.update(disabled=False)
