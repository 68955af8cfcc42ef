"""Calendar windows in UTC: the day or month a moment falls in. Budgets, per-tool limits and
the temporary chats a limit still counts all use these, so they agree on where a window starts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone


def window_bounds(period: str, now: datetime | None = None) -> tuple[datetime, datetime]:
    """``(start, end)`` of the UTC ``"day"`` or ``"month"`` (any other period) containing
    ``now`` (default: now); ``end`` is the next window's start."""
    now = (now or timezone.now()).astimezone(UTC)
    if period == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end
