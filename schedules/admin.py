from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .models import Schedule, ScheduleFire
from .services import schedule_pause, schedule_resume


class ScheduleFireInline(admin.TabularInline):
    model = ScheduleFire
    fields = ("due_at", "fired_at", "status", "detail", "run")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ("-fired_at",)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("run")


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Schedules are made by their owners (page, API); the admin sees them all, pauses,
    resumes or deletes them, and reads their history. Every field is read-only here: a prompt
    an administrator could edit would run as its owner, in the owner's name."""

    list_display = ("name", "owner", "workspace", "kind", "cron", "interval_s", "overlap", "paused",
                    "next_fire_at", "last_fired_at")
    list_filter = ("paused", "kind", "overlap", "workspace")
    search_fields = ("name", "owner__username", "prompt")
    readonly_fields = fields = ("id", "name", "owner", "workspace", "thread", "prompt", "kind", "cron", "interval_s",
                                "env_id", "overlap", "paused", "paused_reason", "next_fire_at", "last_fired_at",
                                "created_at", "updated_at")
    inlines = [ScheduleFireInline]
    actions = ["pause_selected", "resume_selected"]
    list_select_related = ("owner", "workspace")

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description=_("Pause the selected schedules"))
    def pause_selected(self, request, queryset):
        for schedule in queryset:
            schedule_pause(schedule=schedule, reason=str(_("Paused by an administrator.")))
        self.message_user(request, ngettext("%(n)d schedule paused.", "%(n)d schedules paused.", queryset.count())
                          % {"n": queryset.count()}, messages.SUCCESS)

    @admin.action(description=_("Resume the selected schedules"))
    def resume_selected(self, request, queryset):
        resumed = 0
        for schedule in queryset:
            try:
                schedule_resume(schedule=schedule)
                resumed += 1
            except Exception as exc:  # noqa: BLE001 - e.g. the owner left the workspace (Http404)
                self.message_user(request, _("%(name)s not resumed: %(error)s") % {"name": schedule.name,
                                                                                   "error": exc or _("no access")},
                                  messages.WARNING)
        self.message_user(request, ngettext("%(n)d schedule resumed.", "%(n)d schedules resumed.", resumed)
                          % {"n": resumed}, messages.SUCCESS)
