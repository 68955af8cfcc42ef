"""The schedule claim under concurrency, on PostgreSQL: several tickers at once fire each due
schedule exactly once (``SELECT … FOR UPDATE SKIP LOCKED`` + ``next_fire_at`` moved in the
claim's transaction)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections

from agents.models import Run
from chat.models import Membership
from schedules.models import ScheduleFire
from schedules.services import schedule_create, schedules_claim_due, schedules_tick
from tests.conftest import make_thread

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def run_together(target, n: int) -> list:
    """``target()`` in ``n`` threads released at once; their results (an exception re-raised)."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def go(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target()
        except Exception as exc:  # noqa: BLE001 - reported below
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def test_concurrent_tickers_fire_each_due_schedule_once(users, workspaces, offline, settings, django_user_model,
                                                        roles):
    if connection.vendor != "postgresql":
        pytest.skip("the claim race needs PostgreSQL row locks")
    settings.RUN_EXECUTOR = "none"
    settings.MAX_ACTIVE_RUNS_PER_USER = 100
    settings.RUN_RATE_LIMIT = "100000/60"
    owners = []
    for i in range(12):  # one owner and thread each: the runs do not serialise on one user's lock
        user = django_user_model.objects.create_user(username=f"owner{i}", password="pw")
        Membership.objects.create(user=user, workspace=workspaces["demo"], role=roles["member"])
        thread = make_thread(user, workspaces["demo"], offline)
        schedule_create(user=user, thread_id=thread.pk, name=f"s{i}", prompt="tick", kind="interval",
                        interval_s=300, now=T0)
        owners.append(user)
    now = T0 + timedelta(seconds=300)

    claimed = run_together(lambda: schedules_claim_due(now=now, limit=5), 4)
    flat = [fire for batch in claimed for fire in batch]
    assert len(flat) == len(set(flat)) == 12  # 4 tickers × 5 at most: every schedule once, none twice
    assert ScheduleFire.objects.count() == 12

    run_together(lambda: schedules_tick(now=now + timedelta(seconds=1)), 4)  # starting races too
    assert Run.objects.count() == 12
    assert set(ScheduleFire.objects.values_list("status", flat=True)) == {"started"}
    assert sorted(Run.objects.values_list("user__username", flat=True)) == sorted(u.username for u in owners)
