"""The schedules page (``/schedules/``): the caller's schedules with their next fire and
history, a form to make one, pause/resume/delete. Server-rendered forms (no script needed);
every action calls the same services as ``/api/v1/schedules/``."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from agents.models import Environment
from chat.selectors import thread_list_for_user
from chatplatform.errors import ServiceError

from .models import Schedule
from .selectors import schedule_get_for_user, schedule_history, schedules_for_user
from .services import schedule_create, schedule_delete, schedule_pause, schedule_resume

HISTORY_ON_PAGE = 10
FORM_FIELDS = ("name", "thread", "prompt", "kind", "cron", "interval_minutes", "env_id", "overlap")


def _interval_s(raw: str) -> int | None:
    try:
        return round(float(raw) * 60) if raw.strip() else None
    except ValueError as exc:
        raise ServiceError("invalid_interval", _("Give the interval in minutes (a number)."), 400,
                           field="interval_s") from exc


@login_required
@require_http_methods(["GET", "POST"])
def schedules_page(request):
    form = {"kind": "cron", "overlap": "skip", "cron": "0 9 * * 1-5"}
    error = None
    if request.method == "POST":
        action = request.POST.get("action", "create")
        if action == "create":
            form = {k: request.POST.get(k, "") for k in FORM_FIELDS}
            try:
                schedule = schedule_create(
                    user=request.user, thread_id=form["thread"], name=form["name"], prompt=form["prompt"],
                    kind=form["kind"], cron=form["cron"], interval_s=_interval_s(form["interval_minutes"]),
                    env_id=form["env_id"], overlap=form["overlap"])
            except ServiceError as exc:
                error = {"field": exc.extra.get("field", ""), "message": exc.message}
            except Http404:
                error = {"field": "thread", "message": _("Choose one of your chats.")}
            else:
                messages.success(request, _("Schedule “%(name)s” created.") % {"name": schedule.name})
                return redirect("schedules-page")
        else:
            schedule = schedule_get_for_user(user=request.user, schedule_id=request.POST.get("schedule", ""))
            try:
                if action == "pause":
                    schedule_pause(schedule=schedule)
                elif action == "resume":
                    schedule_resume(schedule=schedule)
                elif action == "delete":
                    schedule_delete(schedule=schedule)
            except Http404:
                messages.error(request, _("You can no longer write in that chat, so the schedule cannot resume."))
            return redirect("schedules-page")
    rows = [(s, schedule_history(schedule=s, limit=HISTORY_ON_PAGE)) for s in schedules_for_user(user=request.user)]
    return render(request, "schedules/schedules.html", {
        "rows": rows, "form": form, "error": error,
        "threads": thread_list_for_user(user=request.user)[:200],
        "environments": Environment.objects.order_by("name"),
        "kinds": Schedule.Kind.choices, "overlaps": Schedule.Overlap.choices,
    })
