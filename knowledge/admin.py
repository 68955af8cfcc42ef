from django.contrib import admin

from .models import KnowledgeItem
from .services import knowledge_item_update


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
            from .services import knowledge_item_create

            fields = {k: v for k, v in form.cleaned_data.items() if k in {
                "workspace", "owner", "title", "content", "type", "tags", "url", "is_hidden", "is_private"}}
            created = knowledge_item_create(**fields)
            obj.pk = created.pk
