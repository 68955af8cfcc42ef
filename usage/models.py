"""Usage records (tokens and cost per model response), model prices, budgets and their
windows, per-tool call limits."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


class ModelPrice(models.Model):
    """The price of one model, per million tokens. Cost is computed when usage is stored and
    kept on the record: a later price change does not rewrite history."""

    model = models.OneToOneField("agents.LLMModel", on_delete=models.CASCADE, related_name="price")
    input_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, help_text="per 1 M input tokens")
    output_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, help_text="per 1 M output tokens")
    cached_input_per_mtok = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True,
        help_text="per 1 M input tokens read from the prompt cache; empty: the input price",
    )
    currency = models.CharField(max_length=3, default="USD")

    def __str__(self) -> str:
        return f"{self.model}: {self.input_per_mtok}/{self.output_per_mtok} {self.currency} per M"


class UsageRecord(models.Model):
    """One model response's usage (an assistant message), or an agent backend's per-run
    report (no message). Token counts the provider did not give are NULL."""

    run = models.ForeignKey("agents.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="usage_records")
    message = models.OneToOneField("chat.Message", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="usage_record")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage_records")
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="usage_records")
    thread_id = models.UUIDField(null=True, blank=True)
    provider = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    output_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    reasoning_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True,
                               help_text="NULL: the model has no price")
    currency = models.CharField(max_length=3, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["workspace", "created_at"], name="usage_ws_time"),
            models.Index(fields=["user", "created_at"], name="usage_user_time"),
        ]

    def __str__(self) -> str:
        return f"{self.model}: {self.input_tokens}/{self.output_tokens} tokens"

    @property
    def total_tokens(self) -> int:
        return (self.input_tokens or 0) + (self.output_tokens or 0)


class Period(models.TextChoices):
    DAY = "day", "per day (UTC)"
    MONTH = "month", "per month (UTC)"


class Budget(models.Model):
    """A spending limit for a workspace and/or a user, optionally for one model.

    ``metric`` tokens counts input + output tokens; cost counts the stored cost in
    ``currency``. Crossing ``soft_limit`` warns in the thread (``budget.warning``); at
    ``hard_limit`` no further model request is sent until the period resets.
    """

    class Metric(models.TextChoices):
        TOKENS = "tokens"
        COST = "cost"

    name = models.CharField(max_length=100, blank=True)
    workspace = models.ForeignKey("chat.Workspace", null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="budgets")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="budgets")
    model = models.ForeignKey("agents.LLMModel", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="budgets", help_text="empty: every model")
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTH)
    metric = models.CharField(max_length=8, choices=Metric.choices, default=Metric.TOKENS)
    currency = models.CharField(max_length=3, default="USD", help_text="for cost budgets")
    soft_limit = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    hard_limit = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        scope = " / ".join(str(x) for x in (self.workspace, self.user, self.model) if x) or "?"
        return self.name or f"{scope}: {self.metric} {self.period}"

    def clean(self) -> None:
        if self.workspace_id is None and self.user_id is None:
            raise ValidationError("A budget applies to a workspace, a user, or both: set at least one.")
        if self.soft_limit is None and self.hard_limit is None:
            raise ValidationError("Set a soft limit, a hard limit, or both.")
        if self.soft_limit is not None and self.hard_limit is not None and self.soft_limit > self.hard_limit:
            raise ValidationError("The soft limit must not be above the hard limit.")
        for limit in (self.soft_limit, self.hard_limit):
            if limit is not None and limit < Decimal(0):
                raise ValidationError("Limits are not negative.")


class BudgetWindow(models.Model):
    """One budget period (a UTC day or month) of one budget: the row concurrent rounds lock
    while they check and take a hold, the period's spend so far, and the soft-limit warning
    flag. ``spent`` starts as the sum of the usage records already in the period (when the
    row is made) and grows with every record stored in the same transaction
    (``usage.services.usage_record``), so a check reads one row instead of summing records."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="windows")
    starts_at = models.DateTimeField()
    spent = models.DecimalField(max_digits=24, decimal_places=8, default=0,
                                help_text="tokens, or cost in the budget's currency, of the period so far")
    in_flight = models.PositiveIntegerField(default=0, help_text="rounds admitted, usage not yet stored")
    reserved = models.DecimalField(
        max_digits=24, decimal_places=8, default=0,
        help_text="what the rounds in flight may still cost (tokens, or cost): their input estimates and "
                  "output caps, settled to their real usage when they end")
    hold_until = models.DateTimeField(null=True, blank=True, help_text="holds older than this are stale")
    warned = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["budget", "starts_at"], name="budgetwindow_unique")]

    def __str__(self) -> str:
        return f"{self.budget} from {self.starts_at:%Y-%m-%d}"


class ToolLimit(models.Model):
    """At most ``max_calls`` calls of one tool per user per period (optionally in one
    workspace). A call over the limit is not executed: it goes to approval instead."""

    tool_name = models.CharField(max_length=200)
    workspace = models.ForeignKey("chat.Workspace", null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="tool_limits", help_text="empty: every workspace")
    max_calls = models.PositiveIntegerField()
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.DAY)

    class Meta:
        ordering = ["tool_name"]

    def __str__(self) -> str:
        return f"{self.tool_name}: {self.max_calls} per user {self.period}"
