"""Reads for usage: aggregates over usage records for the usage pages, CSV and banners."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from .models import Budget, UsageRecord
from .services import budget_spent, budgets_for, window_bounds

#: What the usage page can group by: the label field of each group.
GROUPS = {
    "workspace": "workspace__name",
    "user": "user__username",
    "model": "model",
    "provider": "provider",
}


def usage_records(*, user=None, since: datetime, until: datetime) -> QuerySet[UsageRecord]:
    """Records in ``[since, until)``; ``user`` set: only that user's (their own page)."""
    records = UsageRecord.objects.filter(created_at__gte=since, created_at__lt=until)
    if user is not None:
        records = records.filter(user=user)
    return records


def usage_by_day(*, records: QuerySet[UsageRecord], group_by: str, since: date, until: date) -> dict:
    """Tokens and cost per UTC day and group, for a chart and a table.

    ``{"days": ["2026-11-01", …], "series": [{"label", "tokens": [int per day], "cost": [float
    per day]}], "rows": [{"day", "group", "requests", "input_tokens", "output_tokens",
    "cached_tokens", "reasoning_tokens", "cost", "currency"}], "totals": {"tokens", "cost"}}``.
    Cost is summed per currency; the chart shows the first currency seen.
    """
    field = GROUPS[group_by]
    rows = list(
        records.annotate(day=TruncDate("created_at"), group=F(field))
        .values("day", "group", "currency")
        .annotate(
            requests=Count("pk"),
            input_tokens=Coalesce(Sum("input_tokens"), 0),
            output_tokens=Coalesce(Sum("output_tokens"), 0),
            cached_tokens=Coalesce(Sum("cached_tokens"), 0),
            reasoning_tokens=Coalesce(Sum("reasoning_tokens"), 0),
            cost=Sum("cost"),
        )
        .order_by("day", "group")
    )
    days = [(since + timedelta(days=n)).isoformat() for n in range((until - since).days)]
    index = {d: n for n, d in enumerate(days)}
    series: dict[str, dict] = {}
    currency = next((r["currency"] for r in rows if r["currency"]), "")
    total_tokens, total_cost = 0, Decimal(0)
    for row in rows:
        row["day"] = row["day"].isoformat() if row["day"] else ""
        row["group"] = row["group"] or "—"
        tokens = row["input_tokens"] + row["output_tokens"]
        total_tokens += tokens
        entry = series.setdefault(row["group"], {"label": row["group"], "tokens": [0] * len(days),
                                                  "cost": [0.0] * len(days)})
        if row["day"] in index:
            entry["tokens"][index[row["day"]]] += tokens
            if row["cost"] is not None and row["currency"] == currency:
                entry["cost"][index[row["day"]]] += float(row["cost"])
        if row["cost"] is not None and row["currency"] == currency:
            total_cost += row["cost"]
        row["cost"] = _money(row["cost"]) if row["cost"] is not None else ""
    return {"days": days, "series": list(series.values()), "rows": rows, "currency": currency,
            "totals": {"tokens": total_tokens, "cost": _money(total_cost)}}


def _money(value) -> str:
    """A cost for display and CSV: six decimals (micro-units; a token costs less than a cent)."""
    return str(Decimal(value).quantize(Decimal("0.000001")))


def budget_status_for(*, user, thread) -> list[dict]:
    """The budgets that apply to ``user`` sending in ``thread`` (its workspace and model),
    with this window's spend and a state: ``ok`` | ``warning`` (soft limit reached) |
    ``exceeded`` (hard limit reached). Decimals as strings."""
    from agents.models import LLMModel

    model_id = None
    if thread.provider_id and thread.model:
        model_id = LLMModel.objects.filter(provider_id=thread.provider_id, name=thread.model).values_list(
            "pk", flat=True).first()
    out = []
    now = timezone.now()
    for budget in budgets_for(user_id=user.pk, workspace_id=thread.workspace_id, model_id=model_id):
        start, end = window_bounds(budget.period, now)
        spent = budget_spent(budget, start, end)
        state = "ok"
        if budget.hard_limit is not None and spent >= budget.hard_limit:
            state = "exceeded"
        elif budget.soft_limit is not None and spent >= budget.soft_limit:
            state = "warning"
        out.append({
            "budget_id": budget.pk, "scope": "user" if budget.user_id else "workspace", "metric": budget.metric,
            "period": budget.period, "spent": str(spent), "state": state,
            "soft_limit": str(budget.soft_limit) if budget.soft_limit is not None else None,
            "hard_limit": str(budget.hard_limit) if budget.hard_limit is not None else None,
            "currency": budget.currency if budget.metric == Budget.Metric.COST else "",
            "resets_at": end.isoformat(),
        })
    return out
