from django import forms
from django.contrib import admin
from django.db.models import BooleanField, Case, Q, Value, When
from django.utils.translation import gettext_lazy as _

from .breakglass import grant_active, read_record, request_state
from .models import BreakGlassRequest, Membership, Message, Thread, Workspace
from .selectors import thread_blinded_for, threads_readable_q

PRIVATE = _("(private chat)")


class BlindAdminMixin:
    """The Django admin side of admin-blind chats (``Workspace.admin_blind``): a staff user who
    is not a chat's owner and holds no open break-glass grant for it sees its metadata only —
    ``content_fields`` are left off its change page, lists show no title the owner did not open
    to admins, and a search matches ``content_search_fields`` only in chats they may read. A
    change page opened under a grant is recorded as a break-glass read (``admin:<model>:<pk>``).

    ``thread_path``: the lookup from this model to its thread ("" for Thread itself)."""

    thread_path = ""
    content_fields: tuple = ()
    content_search_fields: tuple = ()
    safe_search_fields: tuple = ()

    def _thread(self, obj) -> Thread:
        for part in self.thread_path.split("__"):
            if part:
                obj = getattr(obj, part)
        return obj

    def _blinded(self, request, obj) -> bool:
        return obj is not None and thread_blinded_for(user=request.user, thread=self._thread(obj))

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if self._blinded(request, obj):
            return [f for f in fields if f not in self.content_fields]
        return fields

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if self._blinded(request, obj):
            return [f for f in fields if f not in self.content_fields]
        return fields

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, object_id)
        if obj is not None:
            thread = self._thread(obj)
            if thread.owner_id != request.user.pk and thread.workspace.admin_blind:
                grant = grant_active(user=request.user, thread_id=thread.pk)
                if grant is not None and request.method == "GET":
                    read_record(grant=grant, user=request.user, what=f"admin:{self.model._meta.model_name}:{obj.pk}")
        return super().change_view(request, object_id, form_url, extra_context)

    def get_search_results(self, request, queryset, search_term):
        term = (search_term or "").strip()
        if not term:
            return queryset, False
        safe = Q()
        for field in self.safe_search_fields:
            safe |= Q(**{f"{field}__icontains": term})
        content = Q()
        for field in self.content_search_fields:
            content |= Q(**{f"{field}__icontains": term})
        readable = threads_readable_q(user=request.user, prefix=self.thread_path + "__" if self.thread_path else "")
        if self.model is Thread:  # a title the owner opened to admins is searchable too
            readable |= Q(title_visible_to_admins=True)
        return queryset.filter(safe | (content & readable)), False


def title_readable(request, prefix: str = ""):
    """An annotation: whether this staff user may see the (``prefix``-reached) thread's title —
    they may read the chat (:func:`~chat.selectors.threads_readable_q`) or its owner opened it."""
    readable = threads_readable_q(user=request.user, prefix=prefix) | Q(**{f"{prefix}title_visible_to_admins": True})
    return Case(When(readable, then=Value(True)), default=Value(False), output_field=BooleanField())


def thread_label(thread: Thread, *, readable: bool) -> str:
    """What a list shows for ``thread``: its title when ``readable``, else "(private chat)"."""
    if readable:
        return thread.title or f"Thread {thread.pk}"
    return str(PRIVATE)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class WorkspaceForm(forms.ModelForm):
    class Meta:
        model = Workspace
        fields = ["name", "slug", "instructions", "admin_blind", "default_provider", "default_model", "artifacts_enabled"]

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
    list_display = ["name", "slug", "admin_blind", "artifacts_enabled", "created_at"]
    list_filter = ["admin_blind"]
    search_fields = ["name", "slug"]
    fields = ["name", "slug", "instructions", "admin_blind", "default_provider", "default_model", "artifacts_enabled"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "workspace", "role", "created_at"]
    list_filter = ["workspace", "role"]
    search_fields = ["user__username", "workspace__name"]


@admin.register(Thread)
class ThreadAdmin(BlindAdminMixin, admin.ModelAdmin):
    list_display = ["title_shown", "owner", "workspace", "provider", "model", "updated_at"]
    list_filter = ["workspace", "provider"]
    search_fields = ["title", "owner__username"]
    safe_search_fields = ("owner__username",)
    content_search_fields = ("title",)
    content_fields = ("title", "ui_context")
    readonly_fields = ["created_at", "updated_at"]
    exclude = ["leaf"]  # the selected branch is the owner's choice (chat UI / REST), not the admin's

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(title_readable=title_readable(request))

    @admin.display(description=_("title"), ordering="title")
    def title_shown(self, obj):
        return thread_label(obj, readable=getattr(obj, "title_readable", False))

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if self._blinded(request, obj):  # only the owner opens the title to admins
            return [f for f in fields if f != "title_visible_to_admins"]
        return fields

    def has_change_permission(self, request, obj=None):
        # A member's chat in an admin-blind workspace is view-only here, under a grant too (a grant
        # is read-only): moving it to another owner (oneself) would open it.
        if obj is not None and obj.workspace.admin_blind and obj.owner_id != request.user.pk:
            return False
        return super().has_change_permission(request, obj)


@admin.register(Message)
class MessageAdmin(BlindAdminMixin, admin.ModelAdmin):
    list_display = ["thread_shown", "position", "role", "status", "provider", "model", "created_at"]
    list_filter = ["role", "status", "provider"]
    search_fields = ["content"]
    thread_path = "thread"
    content_search_fields = ("content",)
    content_fields = ("content", "reasoning", "tool_calls", "citations", "error", "thread")
    readonly_fields = [f.name for f in Message._meta.fields]

    def get_queryset(self, request):
        return (super().get_queryset(request).select_related("thread__workspace")
                .annotate(title_readable=title_readable(request, prefix="thread__")))

    @admin.display(description=_("thread"))
    def thread_shown(self, obj):
        return thread_label(obj.thread, readable=getattr(obj, "title_readable", False))

    def has_add_permission(self, request):
        return False


@admin.register(BreakGlassRequest)
class BreakGlassRequestAdmin(admin.ModelAdmin):
    """Break-glass requests and their reads (read-only here: requests are made and decided
    through ``/api/v1/break-glass/`` and the ``/chat/break-glass/`` page, where the
    second-admin rule is enforced)."""

    list_display = ["created_at", "workspace", "requested_by", "thread_owner", "state", "decided_by", "access_until"]
    list_filter = ["workspace", "status"]
    search_fields = ["requested_by__username", "thread_owner__username", "reason"]
    fields = ["workspace", "thread_ref", "thread_owner", "requested_by", "reason", "status", "created_at",
              "expires_at", "decided_by", "decided_at", "decision_note", "access_until", "reads_shown"]
    readonly_fields = fields

    @admin.display(description=_("state"))
    def state(self, obj):
        return request_state(obj)

    @admin.display(description=_("reads"))
    def reads_shown(self, obj):
        return "\n".join(str(r) for r in obj.reads.select_related("user")) or "-"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
