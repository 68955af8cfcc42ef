"""Schedule writes (create, update, pause, resume, delete) and the tick that fires them.

The tick (:func:`schedules_tick`, given the time) runs in two steps, each its own transaction:

1. **claim** — due schedules (``next_fire_at <= now``, not paused) are taken with
   ``SELECT … FOR UPDATE SKIP LOCKED``; each gets a ``pending`` :class:`ScheduleFire` and its
   ``next_fire_at`` moves to its first fire after *now* in the same transaction, so two
   tickers never fire one schedule twice and N missed fires (downtime) become one.
2. **start** — each pending fire is taken the same way and started *as a send*
   (``agents.services.run_create``, as the owner, in the owner's thread, with its environment):
   budgets, rate limits, the model check and, at run time, the owner's roles and tool
   approvals apply exactly as for a message typed in the page. A process killed between the
   steps leaves the pending row; the next tick (any process) starts it.

A thread with a queued, running or parked run is busy: the fire is ``skipped``
(``overlap=skip``) or stays pending until the thread is free (``overlap=queue``; one pending
fire at most, later fires are skipped). An owner who can no longer write in the thread (left
the workspace, deactivated) pauses the schedule with the reason.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Environment, Run
from agents.services import MAX_MESSAGE_CHARS, run_create
from chat.selectors import thread_get_for_user
from chatplatform.errors import ServiceError

from .models import Schedule, ScheduleFire
from .timing import check_timing, next_fire

logger = logging.getLogger(__name__)

NAME_MAX = 100
CLAIM_BATCH = 100
BUSY = (Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL)


# --- writes -----------------------------------------------------------------------------------
def _clean(*, name: str, prompt: str, kind: str, cron: str, interval_s: int | None, env_id: str,
           overlap: str, now: datetime) -> dict:
    name = (name or "").strip()
    if not name:
        raise ServiceError("invalid_name", _("Give the schedule a name."), 400, field="name")
    if len(name) > NAME_MAX:
        raise ServiceError("invalid_name", _("A schedule's name is at most %(n)d characters.") % {"n": NAME_MAX},
                           400, field="name")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ServiceError("invalid_prompt", _("Write the prompt the schedule sends."), 400, field="prompt")
    if len(prompt) > MAX_MESSAGE_CHARS:
        raise ServiceError("invalid_prompt", _("The prompt is longer than %(n)d characters.")
                           % {"n": MAX_MESSAGE_CHARS}, 400, field="prompt")
    if kind not in Schedule.Kind.values:
        raise ServiceError("invalid_kind", _("Choose a cron expression or an interval."), 400, field="kind")
    cron = (cron or "").strip() if kind == Schedule.Kind.CRON else ""
    interval_s = interval_s if kind == Schedule.Kind.INTERVAL else None
    check_timing(kind=kind, cron=cron, interval_s=interval_s, now=now)
    if overlap not in Schedule.Overlap.values:
        raise ServiceError("invalid_overlap", _("Choose skip or queue."), 400, field="overlap")
    env_id = (env_id or "").strip()
    if env_id and not Environment.objects.filter(name=env_id).exists():
        raise ServiceError("invalid_environment", _("There is no environment named %(name)s.") % {"name": env_id},
                           400, field="env_id")
    return {"name": name, "prompt": prompt, "kind": kind, "cron": cron, "interval_s": interval_s,
            "env_id": env_id, "overlap": overlap}


def schedule_create(*, user, thread_id, name: str, prompt: str, kind: str, cron: str = "",
                    interval_s: int | None = None, env_id: str = "", overlap: str = Schedule.Overlap.SKIP,
                    paused: bool = False, now: datetime | None = None) -> Schedule:
    """A schedule of ``user`` sending ``prompt`` into ``thread_id`` (one of the user's own
    threads they may write in: anything else is ``Http404``). The workspace is the thread's.
    Raises ``ServiceError`` 400 with a ``field`` for a bad name, prompt, timing (``invalid_cron``,
    ``too_frequent``: under ``SCHEDULE_MIN_INTERVAL_S``), environment or overlap; and
    ``too_many_schedules`` (400) past ``SCHEDULE_MAX_PER_USER``."""
    now = now or timezone.now()
    thread = thread_get_for_user(user=user, thread_id=thread_id, write=True)
    if thread.temporary:
        raise ServiceError("invalid_thread", _("A temporary chat cannot have schedules."), 400, field="thread")
    fields = _clean(name=name, prompt=prompt, kind=kind, cron=cron, interval_s=interval_s, env_id=env_id,
                    overlap=overlap, now=now)
    if Schedule.objects.filter(owner=user).count() >= settings.SCHEDULE_MAX_PER_USER:
        raise ServiceError("too_many_schedules", _("You have %(n)d schedules, the most allowed; delete one first.")
                           % {"n": settings.SCHEDULE_MAX_PER_USER}, 400)
    schedule = Schedule(owner=user, workspace_id=thread.workspace_id, thread=thread, paused=bool(paused), **fields)
    schedule.next_fire_at = None if schedule.paused else _first_fire(schedule, now)
    schedule.save(force_insert=True)
    return schedule


def _first_fire(schedule: Schedule, now: datetime) -> datetime:
    return next_fire(kind=schedule.kind, cron=schedule.cron, interval_s=schedule.interval_s, after=now)


def _next_after_fire(schedule: Schedule, now: datetime) -> datetime:
    """The next fire after one at ``now``, never sooner than ``SCHEDULE_MIN_INTERVAL_S`` later:
    a schedule made before the minimum was raised fires no more often than the minimum now."""
    earliest = now + timedelta(seconds=settings.SCHEDULE_MIN_INTERVAL_S)
    following = _first_fire(schedule, now)
    if following < earliest:
        following = _first_fire(schedule, earliest - timedelta(microseconds=1))
    return following


@transaction.atomic
def schedule_update(*, schedule: Schedule, now: datetime | None = None, **changes) -> Schedule:
    """Change any of name, prompt, kind, cron, interval_s, env_id, overlap (the same checks as
    :func:`schedule_create`); a new timing moves ``next_fire_at`` to its first fire from now."""
    now = now or timezone.now()
    schedule = Schedule.objects.select_for_update().get(pk=schedule.pk)
    current = {k: getattr(schedule, k) for k in ("name", "prompt", "kind", "cron", "interval_s", "env_id", "overlap")}
    merged = {**current, **{k: v for k, v in changes.items() if k in current}}
    fields = _clean(now=now, **merged)
    timing_changed = any(fields[k] != current[k] for k in ("kind", "cron", "interval_s"))
    for key, value in fields.items():
        setattr(schedule, key, value)
    if timing_changed and not schedule.paused:
        schedule.next_fire_at = _first_fire(schedule, now)
    schedule.save()
    return schedule


@transaction.atomic
def schedule_pause(*, schedule: Schedule, reason: str = "") -> Schedule:
    """Stop firing (``next_fire_at`` cleared). A pending fire is dropped as skipped."""
    # Fires before the schedule: the order schedule_fire_start takes its locks in.
    ScheduleFire.objects.filter(schedule_id=schedule.pk, status=ScheduleFire.Status.PENDING).update(
        status=ScheduleFire.Status.SKIPPED, detail=_("The schedule was paused."))
    Schedule.objects.filter(pk=schedule.pk).update(paused=True, paused_reason=reason[:300], next_fire_at=None,
                                                   updated_at=timezone.now())
    schedule.refresh_from_db()
    return schedule


@transaction.atomic
def schedule_resume(*, schedule: Schedule, now: datetime | None = None) -> Schedule:
    """Fire again from now on: ``next_fire_at`` is the first fire after now (nothing missed
    while paused is caught up). The owner must still be able to write in the thread
    (``Http404`` otherwise)."""
    now = now or timezone.now()
    thread_get_for_user(user=schedule.owner, thread_id=schedule.thread_id, write=True)
    schedule = Schedule.objects.select_for_update().get(pk=schedule.pk)
    if schedule.paused:
        schedule.paused, schedule.paused_reason = False, ""
        schedule.next_fire_at = _first_fire(schedule, now)
        schedule.save(update_fields=["paused", "paused_reason", "next_fire_at", "updated_at"])
    return schedule


def schedule_delete(*, schedule: Schedule) -> None:
    """Delete the schedule and its history (the runs it started stay in the thread)."""
    schedule.delete()


# --- the tick ----------------------------------------------------------------------------------
def schedules_claim_due(*, now: datetime, limit: int = CLAIM_BATCH) -> list[int]:
    """Step 1 of a tick: claim up to ``limit`` due schedules in one transaction (skip-locked:
    a concurrent ticker takes the others) — a pending fire each, ``next_fire_at`` moved past
    ``now``. Returns the new fires' ids. A queue schedule that already has a pending fire
    gets a ``skipped`` row instead (one waiting run at most)."""
    made: list[int] = []
    with transaction.atomic():
        due = list(Schedule.objects.select_for_update(skip_locked=True)
                   .filter(paused=False, next_fire_at__lte=now).order_by("next_fire_at")[:limit])
        waiting = set(ScheduleFire.objects.filter(schedule__in=due, status=ScheduleFire.Status.PENDING)
                      .values_list("schedule_id", flat=True))
        for schedule in due:
            fire = ScheduleFire(schedule=schedule, due_at=schedule.next_fire_at, fired_at=now)
            if schedule.pk in waiting:
                fire.status = ScheduleFire.Status.SKIPPED
                fire.detail = _("A run of this schedule is already waiting to start.")
            fire.save()
            if fire.status == ScheduleFire.Status.PENDING:
                made.append(fire.pk)
            schedule.last_fired_at = now
            schedule.next_fire_at = _next_after_fire(schedule, now)
            schedule.save(update_fields=["last_fired_at", "next_fire_at"])
    return made


def schedules_fix_clock(*, now: datetime) -> int:
    """After the clock went back: schedules whose last fire is later than ``now`` get their
    next fire computed from ``now`` again (else they would wait as long as the jump). Returns
    how many were moved."""
    moved = 0
    for schedule in Schedule.objects.filter(paused=False, last_fired_at__gt=now):
        fresh = _first_fire(schedule, now)
        if schedule.next_fire_at is None or fresh < schedule.next_fire_at:
            moved += Schedule.objects.filter(pk=schedule.pk, paused=False).update(next_fire_at=fresh,
                                                                                  last_fired_at=now)
    return moved


def schedule_fire_start(*, fire_id: int) -> ScheduleFire | None:
    """Step 2: start pending fire ``fire_id`` as a send of its owner, or settle it (skipped,
    failed) — one transaction, the row locked skip-locked (None: another ticker holds it or it
    is not pending any more)."""
    with transaction.atomic():
        fire = (ScheduleFire.objects.select_for_update(skip_locked=True).select_related("schedule")
                .filter(pk=fire_id, status=ScheduleFire.Status.PENDING).first())
        if fire is None:
            return None
        schedule = fire.schedule
        owner = schedule.owner
        try:
            if not owner.is_active:
                raise Http404
            thread = thread_get_for_user(user=owner, thread_id=schedule.thread_id, write=True)
        except Http404:
            reason = _("The owner can no longer write in this chat (not a member of its workspace any more).")
            _settle(fire, ScheduleFire.Status.FAILED, reason)
            Schedule.objects.filter(pk=schedule.pk).update(paused=True, paused_reason=reason, next_fire_at=None)
            return fire
        if Run.objects.filter(thread_id=thread.pk, status__in=BUSY).exists():
            if schedule.overlap == Schedule.Overlap.QUEUE:
                return fire  # stays pending: started by a later tick once the thread is free
            _settle(fire, ScheduleFire.Status.SKIPPED, _("The previous run was still open (running or waiting "
                                                         "for approval)."))
            return fire
        if schedule.env_id and not Environment.objects.filter(name=schedule.env_id).exists():
            _settle(fire, ScheduleFire.Status.FAILED, _("The environment %(name)s no longer exists.")
                    % {"name": schedule.env_id})
            return fire
        try:
            with transaction.atomic():
                created = run_create(thread=thread, user=owner, content=schedule.prompt, env_id=schedule.env_id)
        except ServiceError as exc:  # RunRejected, DispatchRefused (budgets), …
            _settle(fire, ScheduleFire.Status.FAILED, str(exc.message))
            return fire
        fire.run = created.run
        _settle(fire, ScheduleFire.Status.STARTED, "")
        return fire


def _settle(fire: ScheduleFire, status: str, detail: str) -> None:
    fire.status, fire.detail = status, detail[:300]
    fire.save(update_fields=["status", "detail", "run"])


def schedules_tick(*, now: datetime | None = None) -> list[ScheduleFire]:
    """One tick at ``now`` (default: the clock): fix schedules after a backward clock jump,
    claim the due ones, then start every pending fire (new ones and those waiting for a busy
    thread). Returns the fires it settled or left pending this tick."""
    now = now or timezone.now()
    schedules_fix_clock(now=now)
    schedules_claim_due(now=now)
    out = []
    for fire_id in (ScheduleFire.objects.filter(status=ScheduleFire.Status.PENDING)
                    .order_by("fired_at").values_list("pk", flat=True)[:CLAIM_BATCH]):
        try:
            fire = schedule_fire_start(fire_id=fire_id)
        except Exception:  # one broken fire must not stop the others; it stays pending
            logger.exception("schedule fire %s could not start", fire_id)
            continue
        if fire is not None:
            out.append(fire)
    return out
