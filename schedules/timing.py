"""When a schedule fires: cron expressions (parsed by Celery's ``crontab``, UTC) and
intervals; the workspace minimum interval (``SCHEDULE_MIN_INTERVAL_S``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery.schedules import crontab
from django.conf import settings
from django.utils.translation import gettext as _

from chatplatform.errors import ServiceError

# How many upcoming fires the minimum-interval check looks at: a cron's fire times are the
# product of its fields, so its shortest gap shows up within its first day's fires.
GAP_SAMPLE = 200


def cron_parse(expression: str) -> crontab:
    """A five-field cron expression (minute hour day-of-month month day-of-week) → ``crontab``.
    Raises ``ServiceError`` ``invalid_cron`` (400, field ``cron``) for anything else."""
    fields = (expression or "").split()
    if len(fields) != 5:
        raise ServiceError("invalid_cron", _("A cron expression has five fields: minute hour day-of-month month "
                                             "day-of-week (e.g. \"0 9 * * 1-5\")."), 400, field="cron")
    minute, hour, day_of_month, month, day_of_week = fields
    try:
        return crontab(minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month,
                       day_of_week=day_of_week)
    except Exception as exc:  # noqa: BLE001 - crontab raises ValueError, ParseException, …: all a bad input
        raise ServiceError("invalid_cron", _("The cron expression is not valid: %(error)s") % {"error": exc},
                           400, field="cron") from exc


def cron_next(schedule: crontab, after: datetime) -> datetime:
    """The first fire of ``schedule`` strictly after ``after`` (aware, UTC), to the minute."""
    pinned = crontab(minute=schedule._orig_minute, hour=schedule._orig_hour,
                     day_of_month=schedule._orig_day_of_month, month_of_year=schedule._orig_month_of_year,
                     day_of_week=schedule._orig_day_of_week, nowfun=lambda: after)
    return after + pinned.remaining_estimate(after)


def next_fire(*, kind: str, cron: str, interval_s: int | None, after: datetime) -> datetime:
    """The schedule's first fire strictly after ``after`` (missed fires are not caught up: a
    schedule late by N periods fires once, then at its next time after now)."""
    if kind == "cron":
        return cron_next(cron_parse(cron), after)
    return after + timedelta(seconds=int(interval_s or 0))


def shortest_gap_s(expression: str, start: datetime) -> float:
    """The shortest time in seconds between two of the next ``GAP_SAMPLE`` fires of a cron."""
    parsed = cron_parse(expression)
    previous = cron_next(parsed, start)
    shortest = float("inf")
    for _i in range(GAP_SAMPLE):
        following = cron_next(parsed, previous)
        shortest = min(shortest, (following - previous).total_seconds())
        previous = following
    return shortest


def check_timing(*, kind: str, cron: str, interval_s: int | None, now: datetime) -> None:
    """Refuse a timing firing more often than ``SCHEDULE_MIN_INTERVAL_S``: ``ServiceError``
    ``too_frequent`` (400, field ``cron`` or ``interval_s``), ``invalid_cron`` (400)."""
    minimum = settings.SCHEDULE_MIN_INTERVAL_S
    if kind == "cron":
        gap = shortest_gap_s(cron, now)
        field = "cron"
    else:
        if interval_s is None or interval_s <= 0:
            raise ServiceError("invalid_interval", _("Give the interval in seconds (a positive number)."), 400,
                               field="interval_s")
        gap, field = interval_s, "interval_s"
    if gap < minimum:
        raise ServiceError("too_frequent", _("This schedule would fire every %(gap)d s; the minimum in this "
                                             "workspace is %(minimum)d s.") % {"gap": gap, "minimum": minimum},
                           400, field=field)
