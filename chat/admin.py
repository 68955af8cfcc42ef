from django.contrib import admin

from .models import Membership, Message, Thread, Workspace


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    fields = ["name", "slug", "instructions"]
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
