from django.contrib import admin

from .models import Prompt


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    """Every prompt: personal ones (no workspace) and workspace ones. Members manage their own
    on the Prompts page; here an administrator finds, corrects or removes any of them."""

    list_display = ["command", "title", "workspace", "owner", "updated_at"]
    list_filter = [("workspace", admin.EmptyFieldListFilter), "workspace"]
    search_fields = ["command", "title", "body", "owner__username"]
    raw_id_fields = ["owner"]
    readonly_fields = ["created_at", "updated_at"]
