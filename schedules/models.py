"""A schedule: a prompt sent into one of its owner's threads, as the owner, on a cron expression
or an interval; and its history (one ``ScheduleFire`` per fire, with the run it started)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class Schedule(models.Model):
    class Kind(models.TextChoices):
        CRON = "cron", _("Cron expression")
        INTERVAL = "interval", _("Interval")

    class Overlap(models.TextChoices):
        SKIP = "skip", _("Skip the fire")
        QUEUE = "queue", _("Run once the current run ends")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="schedules")
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="schedules")
    thread = models.ForeignKey("chat.Thread", on_delete=models.CASCADE, related_name="schedules")
    name = models.CharField(_("name"), max_length=100)
    prompt = models.TextField(_("prompt"))
    kind = models.CharField(_("kind"), max_length=8, choices=Kind.choices)
    cron = models.CharField(_("cron expression"), max_length=100, blank=True,
                            help_text=_("Five fields, UTC: minute hour day-of-month month day-of-week."))
    interval_s = models.PositiveIntegerField(_("interval (seconds)"), null=True, blank=True)
    env_id = models.CharField(_("environment"), max_length=100, blank=True,
                              help_text=_("The name of the environment the runs act on (as a send's env_id)."))
    overlap = models.CharField(_("when a run is still open"), max_length=8, choices=Overlap.choices,
                               default=Overlap.SKIP)
    paused = models.BooleanField(_("paused"), default=False)
    paused_reason = models.CharField(_("why paused"), max_length=300, blank=True)
    # The claim: the tick takes due rows by this column (conditional, skip-locked) and moves it
    # on in the same transaction. Null while paused.
    next_fire_at = models.DateTimeField(_("next fire"), null=True, blank=True)
    last_fired_at = models.DateTimeField(_("last fire"), null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "created_at"]
        indexes = [models.Index(fields=["next_fire_at"], name="schedule_due",
                                condition=models.Q(paused=False))]
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")

    def __str__(self) -> str:
        return self.name

    @property
    def expression(self) -> str:
        return self.cron if self.kind == self.Kind.CRON else f"every {self.interval_s} s"


class ScheduleFire(models.Model):
    """One fire of a schedule: when it was due, what happened (``status``) and the run it
    started. ``pending`` rows are durable claims not started yet (a worker died, or the thread
    was busy and the schedule queues)."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Waiting to start")
        STARTED = "started", _("Started")
        SKIPPED = "skipped", _("Skipped")
        FAILED = "failed", _("Not started")

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires")
    due_at = models.DateTimeField()
    fired_at = models.DateTimeField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    detail = models.CharField(max_length=300, blank=True)
    run = models.ForeignKey("agents.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-fired_at", "-id"]
        indexes = [models.Index(fields=["schedule", "-fired_at"], name="schedulefire_history"),
                   models.Index(fields=["fired_at"], name="schedulefire_pending",
                                condition=models.Q(status="pending"))]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.due_at:%Y-%m-%d %H:%M} ({self.status})"
