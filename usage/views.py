"""Usage pages (staff: everyone's; members: their own), the CSV export, the budget status
of a thread, and the protected Prometheus endpoint."""

from __future__ import annotations

import csv
import ipaddress
import secrets
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import render
from django.utils.translation import pgettext_lazy
from django.views.decorators.http import require_GET

from chat.selectors import thread_get_for_user

from .metrics import register_database_collector
from .selectors import GROUPS, budget_status_for, usage_by_day, usage_records

MAX_DAYS = 366


def _window(request) -> tuple[datetime, datetime, int, str]:
    """``days`` (1–366, default 30) and ``group`` (workspace|user|model|provider) from the query."""
    try:
        days = min(MAX_DAYS, max(1, int(request.GET.get("days", 30))))
    except ValueError:
        days = 30
    group = request.GET.get("group", "model")
    if group not in GROUPS:
        group = "model"
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    until = today + timedelta(days=1)
    return until - timedelta(days=days), until, days, group


def _usage(request, *, own: bool) -> tuple[dict, datetime, datetime, int, str]:
    since, until, days, group = _window(request)
    records = usage_records(user=request.user if own else None, since=since, until=until)
    data = usage_by_day(records=records, group_by=group, since=since.date(), until=until.date())
    return data, since, until, days, group


# The groupings as the page names them (the query keeps the English keys).
GROUP_LABELS = {"workspace": pgettext_lazy("usage grouped by", "workspace"), "user": pgettext_lazy("usage grouped by", "user"),
                "model": pgettext_lazy("usage grouped by", "model"), "provider": pgettext_lazy("usage grouped by", "provider")}


def _page(request, *, own: bool):
    data, _, _, days, group = _usage(request, own=own)
    return render(request, "usage/usage.html", {
        "own": own, "days": days, "group": group, "group_label": GROUP_LABELS.get(group, group),
        "groups": [(g, GROUP_LABELS.get(g, g)) for g in GROUPS], "data": data,
        "day_choices": [7, 30, 90, 365],
    })


@staff_member_required
@require_GET
def usage_admin(request):
    """Everyone's usage, grouped by workspace, user, model or provider (staff only)."""
    return _page(request, own=False)


@login_required
@require_GET
def usage_mine(request):
    """The signed-in user's own usage."""
    return _page(request, own=True)


def _csv(request, *, own: bool) -> HttpResponse:
    data, since, until, _, group = _usage(request, own=own)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{group}-{since:%Y%m%d}-{until:%Y%m%d}.csv"'
    writer = csv.writer(response)
    writer.writerow(["day", group, "requests", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens",
                     "cost", "currency"])
    for row in data["rows"]:
        writer.writerow([row["day"], _csv_safe(row["group"]), row["requests"], row["input_tokens"],
                         row["output_tokens"], row["cached_tokens"], row["reasoning_tokens"], row["cost"],
                         row["currency"]])
    return response


def _csv_safe(value: str) -> str:
    """Spreadsheets run cells starting with = + - @ as formulas: quote them as text."""
    return "'" + value if value[:1] in ("=", "+", "-", "@") else value


@staff_member_required
@require_GET
def usage_admin_csv(request):
    return _csv(request, own=False)


@login_required
@require_GET
def usage_mine_csv(request):
    return _csv(request, own=True)


@login_required
@require_GET
def budget_status(request, thread_id):
    """``{"budgets": [...]}`` for the thread's banner (see ``selectors.budget_status_for``);
    another user's thread is a 404."""
    thread = thread_get_for_user(user=request.user, thread_id=thread_id, metadata=True)  # usage is metadata
    return JsonResponse({"budgets": budget_status_for(user=request.user, thread=thread)})


def _metrics_allowed(request) -> bool:
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and secrets.compare_digest(header, f"Bearer {token}"):
        return True
    if "X-Forwarded-For" in request.headers or "Forwarded" in request.headers:
        # Proxied: the peer address is the proxy's (often loopback), not the client's.
        return False
    try:
        client = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    for allowed in settings.METRICS_ALLOWED_IPS:
        try:
            if client in ipaddress.ip_network(allowed, strict=False):
                return True
        except ValueError:
            continue
    return False


@require_GET
def metrics(request):
    """Prometheus exposition for allowlisted addresses (``METRICS_ALLOWED_IPS``, direct
    connections only: a request that came through a proxy needs the token) or a bearer
    ``METRICS_TOKEN``; everyone else gets 403."""
    if not _metrics_allowed(request):
        return HttpResponseForbidden("metrics are not public\n", content_type="text/plain")
    from django_prometheus.exports import ExportToDjangoView

    register_database_collector()
    return ExportToDjangoView(request)
