from django.contrib import admin

from .models import KnowledgeItem, KnowledgeSettings, RunSources
from .services import knowledge_item_create, knowledge_item_update, knowledge_search_language_set


@admin.register(KnowledgeItem)
class KnowledgeItemAdmin(admin.ModelAdmin):
    list_display = ["title", "workspace", "type", "owner", "is_hidden", "is_private", "updated_at"]
    list_filter = ["workspace", "type", "is_hidden", "is_private"]
    search_fields = ["title", "content"]
    readonly_fields = ["content_hash", "source_path", "created_at", "updated_at"]

    def save_model(self, request, obj, form, change):
        if change:
            knowledge_item_update(item=obj, **{f: form.cleaned_data[f] for f in form.changed_data if f in form.cleaned_data})
        else:
            fields = {k: v for k, v in form.cleaned_data.items() if k in {
                "workspace", "owner", "title", "content", "type", "tags", "url", "is_hidden", "is_private"}}
            created = knowledge_item_create(**fields)
            obj.pk = created.pk


@admin.register(KnowledgeSettings)
class KnowledgeSettingsAdmin(admin.ModelAdmin):
    """Changing the language re-indexes the workspace's chunks (PostgreSQL re-stems them)."""

    list_display = ["workspace", "search_language"]

    def save_model(self, request, obj, form, change):
        knowledge_search_language_set(workspace=obj.workspace, language=obj.search_language)
        obj.pk = KnowledgeSettings.objects.get(workspace=obj.workspace).pk


@admin.register(RunSources)
class RunSourcesAdmin(admin.ModelAdmin):
    """What each run was given from the knowledge base (read-only audit)."""

    list_display = ["run", "grounded_at", "grounding_note", "updated_at"]
    readonly_fields = ["run", "sources", "block", "grounded_at", "grounding_note", "updated_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
