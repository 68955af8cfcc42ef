"""Drafts of policy changes, their simulations, the versions of the live policy set, and the
workspace setting that asks for four eyes (DESIGN §4 "Policy simulation")."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class WorkspacePolicySettings(models.Model):
    """A workspace's word on policy edits. Tool policies and approval rules apply platform
    wide, so a change needs a second admin's approval when *any* workspace asks for it."""

    workspace = models.OneToOneField("chat.Workspace", on_delete=models.CASCADE, related_name="policy_settings")
    four_eyes = models.BooleanField(
        _("four eyes for policy edits"), default=False,
        help_text=_("A policy change is applied only after a second admin approves it."),
    )

    class Meta:
        verbose_name = _("workspace policy setting")
        verbose_name_plural = _("workspace policy settings")

    def __str__(self) -> str:
        return str(self.workspace)


class PolicyDraft(models.Model):
    """Changed tool policies and approval rules, not applied yet.

    ``changes``: ``{"tool_policies": {tool: {field: value}}, "approval_rules": {name:
    {field: value} | null}}`` (``policies.drafts`` validates it; null deletes a rule, a new
    name creates one). ``simulated_fingerprint``: the live policy set's fingerprint when the
    draft was last simulated; approving and applying are refused once the live set changed
    since (re-simulate). Status changes only through ``policies.services``.
    """

    class Status(models.TextChoices):
        OPEN = "open", _("open")
        APPROVED = "approved", _("approved")
        APPLIED = "applied", _("applied")
        DISCARDED = "discarded", _("discarded")

    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="policy_drafts",
                                  help_text=_("Whose recorded calls the simulations replay."))
    title = models.CharField(_("title"), max_length=200)
    reason = models.TextField(_("why"), blank=True, max_length=2000)
    changes = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    simulated_fingerprint = models.CharField(max_length=32, blank=True)
    last_simulation = models.ForeignKey("PolicySimulation", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    approved_at = models.DateTimeField(null=True, blank=True)
    applied_version = models.ForeignKey("PolicyVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("policy draft")
        verbose_name_plural = _("policy drafts")

    def __str__(self) -> str:
        return self.title


class PolicySimulation(models.Model):
    """One replay of a workspace's recorded tool calls against a draft policy set.

    ``groups``: one entry per distinct decision situation — ``{"tool", "role", "env",
    "agent_call", "provider_id", "recorded": {...}, "recorded_rule": {...}, "simulated":
    {...}, "current": {...}, "change", "recorded_differs", "count"}`` (``policies.simulation``); the individual
    calls are read back page by page from the ledger (``policies.selectors``), never copied.
    ``covered_from``..``until``: the calls counted (later than ``since`` when truncated).
    """

    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="policy_simulations")
    draft = models.ForeignKey(PolicyDraft, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="simulations")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    changes = models.JSONField(default=dict)
    days = models.PositiveSmallIntegerField()
    since = models.DateTimeField()
    until = models.DateTimeField()
    covered_from = models.DateTimeField()
    truncated = models.BooleanField(default=False)
    truncated_reason = models.CharField(max_length=20, blank=True)  # "rows" | "time"
    rows_scanned = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    live_fingerprint = models.CharField(max_length=32)
    groups = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("policy simulation")
        verbose_name_plural = _("policy simulations")

    def __str__(self) -> str:
        return f"{self.workspace} {self.created_at:%Y-%m-%d %H:%M}"


class PolicyVersion(models.Model):
    """The live policy set after one change: who, when, what changed, why; rollback restores
    ``snapshot`` (through a new draft, so four eyes hold for rollbacks too)."""

    number = models.PositiveIntegerField(unique=True)
    snapshot = models.JSONField()
    fingerprint = models.CharField(max_length=32)
    changes = models.JSONField(default=dict, help_text=_("What changed from the previous version."))
    reason = models.TextField(blank=True)
    draft = models.ForeignKey(PolicyDraft, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    applied_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]
        verbose_name = _("policy version")
        verbose_name_plural = _("policy versions")

    def __str__(self) -> str:
        return f"v{self.number}"
