"""Schedule reads, always scoped to the caller."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from .models import Schedule, ScheduleFire

HISTORY_LIMIT = 50


def schedules_for_user(*, user) -> QuerySet[Schedule]:
    """The caller's own schedules (with thread and workspace), by name."""
    return Schedule.objects.filter(owner=user).select_related("thread", "workspace")


def schedule_get_for_user(*, user, schedule_id) -> Schedule:
    """One of the caller's schedules; ``Http404`` for anything else (another user's, a
    malformed id), so existence is never revealed."""
    try:
        return schedules_for_user(user=user).get(pk=schedule_id)
    except (Schedule.DoesNotExist, ValueError, TypeError, Exception) as exc:  # bad UUIDs: ValidationError
        raise Http404("No such schedule.") from exc


def schedule_history(*, schedule: Schedule, limit: int = HISTORY_LIMIT) -> list[ScheduleFire]:
    """The schedule's latest ``limit`` fires, newest first, with their runs."""
    return list(ScheduleFire.objects.filter(schedule=schedule).select_related("run")[:limit])
