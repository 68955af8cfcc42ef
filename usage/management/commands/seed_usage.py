"""``manage.py seed_usage [--sample-days N]``: the demo's budget defaults (idempotent), and
with ``--sample-days`` sample usage records for the demo users over the last N days (to see
the usage page's charts without running models; marked as provider ``sample``).

Budget defaults (workspace *demo*): 1 000 000 tokens a month (warning at 800 000) for the workspace;
200 000 tokens a day (warning at 150 000) per user. "Per user of a workspace" is not
expressible as one row: each member of demo gets a daily budget of their own.
"""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from chat.models import Membership, Workspace
from usage.models import Budget, UsageRecord
from usage.services import budget_windows_recount

WORKSPACE_MONTH = {"soft_limit": Decimal(800_000), "hard_limit": Decimal(1_000_000)}
USER_DAY = {"soft_limit": Decimal(150_000), "hard_limit": Decimal(200_000)}


class Command(BaseCommand):
    help = "Seed the demo's budget defaults (and optionally sample usage)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sample-days", type=int, default=0, help="add sample usage for the last N days")

    def handle(self, *args, sample_days: int = 0, **options) -> None:
        demo = Workspace.objects.filter(slug="demo").first()
        if demo is None:
            self.stderr.write("no demo workspace: run seed_demo first")
            return
        Budget.objects.get_or_create(name="demo: workspace tokens per month", defaults={
            "workspace": demo, "metric": "tokens", "period": "month", **WORKSPACE_MONTH})
        members = Membership.objects.filter(workspace=demo).select_related("user")
        for m in members:
            Budget.objects.get_or_create(name=f"demo: {m.user.username} tokens per day", defaults={
                "workspace": demo, "user": m.user, "metric": "tokens", "period": "day", **USER_DAY})
        self.stdout.write(f"budgets: {Budget.objects.filter(name__startswith='demo:').count()} demo budgets")
        if sample_days > 0:
            self._sample(demo, sample_days)

    def _sample(self, demo, days: int) -> None:
        rng = random.Random(15)  # the same sample every time
        users = list(get_user_model().objects.filter(username__in=["alice", "bob", "admin"]))
        models = [("sample", "small-model", Decimal("0.15"), Decimal("0.60")),
                  ("sample", "large-model", Decimal("2.50"), Decimal("10.00"))]
        UsageRecord.objects.filter(provider="sample").delete()
        now = timezone.now()
        rows = []
        for day in range(days):
            for user in users:
                for provider, model, pin, pout in models:
                    for _ in range(rng.randint(0, 4)):
                        inp, out = rng.randint(200, 6000), rng.randint(50, 1500)
                        cost = (Decimal(inp) * pin + Decimal(out) * pout) / Decimal(1_000_000)
                        rows.append(UsageRecord(
                            user=user, workspace=demo, provider=provider, model=model, input_tokens=inp,
                            output_tokens=out, cost=cost.quantize(Decimal("0.00000001")), currency="USD",
                            created_at=now - timedelta(days=day, minutes=rng.randint(0, 600))))
        UsageRecord.objects.bulk_create(rows)
        for budget in Budget.objects.filter(windows__isnull=False).distinct():
            budget_windows_recount(budget)  # records added in bulk: the open windows count them
        self.stdout.write(f"usage: {len(rows)} sample records over {days} days")
