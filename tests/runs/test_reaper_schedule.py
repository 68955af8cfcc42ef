"""The reaper passes when a deadline comes, not every period: a pass learns the earliest lease
expiry, unclaimed-queue deadline and approval expiry still ahead, and the deployment's
processes share when the next pass is due through the cache, one standing in for another
that died. Marked ``db_backends``: SQLite with the local-memory cache, and again on PostgreSQL
with Redis as the shared cache."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from agents.models import Run, ToolCall
from agents.runs import reaper
from agents.runs.reaper import SLACK_S, reaper_next_due, reaper_pass, reaper_wake
from chat.models import Message
from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


@pytest.fixture(autouse=True)
def schedule(settings):
    settings.RUN_REAPER_PERIOD_S = 2.0
    settings.RUN_LEASE_S = 10.0
    settings.RUN_QUEUED_DEADLINE_S = 30.0
    settings.RUN_EXECUTOR = "none"  # a re-queued run stays queued for the test to read
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def threads(users, workspaces, openai_provider):
    return [make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False) for _ in range(3)]


def test_the_next_pass_is_due_at_the_earliest_deadline_within_a_period_and_a_lease(settings):
    now = 1_000_000.0
    assert reaper_next_due(now + 7.0, now) == now + 7.0 + SLACK_S
    assert reaper_next_due(now + 0.5, now) == now + 2.0  # never sooner than a period
    assert reaper_next_due(now - 3.0, now) == now + 2.0
    assert reaper_next_due(now + 100.0, now) == now + 10.0  # a run claimed meanwhile has a 10 s lease
    assert reaper_next_due(None, now) == now + 10.0  # nothing active: still look once a lease
    settings.RUN_QUEUED_DEADLINE_S = 5.0  # a run queued meanwhile is due sooner than a lease
    assert reaper_next_due(None, now) == now + 5.0


def test_a_pass_with_nothing_due_changes_nothing_and_is_next_due_at_the_earliest_deadline(threads, users):
    now = timezone.now()
    running = Run.objects.create(thread=threads[0], user=users["alice"], status="running", attempts=1,
                                 lease_owner="w1", lease_expires_at=now + timedelta(seconds=7))
    queued = Run.objects.create(thread=threads[1], user=users["alice"], status="queued",
                                queued_at=now - timedelta(seconds=24))  # unclaimed, due in 6 s
    Run.objects.create(thread=threads[2], user=users["alice"], status="completed",  # finished: no deadline
                       lease_expires_at=now - timedelta(hours=1), queued_at=now - timedelta(hours=1))

    assert reaper_pass() == (queued.queued_at + timedelta(seconds=30)).timestamp() + SLACK_S
    Run.objects.filter(pk=queued.pk).update(queued_at=now)  # claimed and queued again: due in 30 s
    assert reaper_pass() == running.lease_expires_at.timestamp() + SLACK_S
    assert {(r.pk, r.status, r.attempts) for r in Run.objects.filter(pk__in=[running.pk, queued.pk])} == {
        (running.pk, "running", 1), (queued.pk, "queued", 0)}


def test_a_pass_acts_on_what_is_due_and_looks_again_a_period_later(threads, users):
    dead = Run.objects.create(thread=threads[0], user=users["alice"], status="running", attempts=1,
                              lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(seconds=1))
    before = time.time()
    due = reaper_pass()
    after = time.time()
    dead.refresh_from_db()
    assert (dead.status, dead.attempts, dead.lease_owner) == ("queued", 2, "")  # re-queued
    assert before + 2.0 <= due <= after + 2.0


def test_a_parked_call_s_expiry_brings_the_pass_forward_and_is_expired_when_due(threads, users):
    now = timezone.now()
    parked = Run.objects.create(thread=threads[0], user=users["alice"], status="awaiting_approval", attempts=1)
    assistant = Message.objects.create(thread=threads[0], run=parked, position=2, role="assistant",
                                       status="complete", tool_calls=[{"id": "c1", "name": "note_write",
                                                                       "arguments": "{}"}])
    ledger = ToolCall.objects.create(run=parked, message=assistant, call_id="c1", tool_name="note_write",
                                     status="awaiting_approval", arguments={}, expires_at=now + timedelta(seconds=4))
    Run.objects.create(thread=threads[1], user=users["alice"], status="running", attempts=1, lease_owner="w1",
                       lease_expires_at=now + timedelta(seconds=8))
    assert reaper_pass() == ledger.expires_at.timestamp() + SLACK_S

    ToolCall.objects.filter(pk=ledger.pk).update(expires_at=now - timedelta(seconds=1))
    reaper_pass()
    ledger.refresh_from_db()
    assert ledger.status == "denied"


def test_processes_share_the_schedule_and_one_stands_in_when_the_passer_dies(monkeypatch):
    """Process A passes and stores when the next pass is due; B, waking meanwhile, stands in a
    period after that instead of passing too; once A stops passing (killed), B passes."""
    passes = []
    monkeypatch.setattr(reaper, "reaper_pass", lambda: passes.append(len(passes)) or 1000.0 + 9 * len(passes))
    assert reaper_wake(1000.0) == 1009.0 and passes == [0]  # A: nothing shared yet, passes
    assert reaper_wake(1001.0) == 1011.0 and passes == [0]  # B: A passes at 1009; B stands in at 1011
    assert reaper_wake(1009.0) == 1018.0 and passes == [0, 1]  # A, on time
    assert reaper_wake(1011.0) == 1020.0 and passes == [0, 1]  # B: A passed; stand in after its next
    # A is killed before 1018: B's stand-in finds the due time passed and takes the pass.
    assert reaper_wake(1020.0) == 1027.0 and passes == [0, 1, 2]


def test_a_process_whose_cache_is_down_keeps_its_own_schedule(monkeypatch):
    def down(*args, **kwargs):
        raise ConnectionError("cache down")

    passes = []
    monkeypatch.setattr(reaper, "reaper_pass", lambda: passes.append(1) or 1009.0)
    for method in ("get", "add", "set"):
        monkeypatch.setattr(cache, method, down)
    assert [reaper_wake(1000.0), reaper_wake(1009.0)] == [1009.0, 1009.0] and len(passes) == 2


def test_a_failed_pass_is_logged_and_tried_again_a_period_later(monkeypatch, caplog):
    def broken():
        raise RuntimeError("database went away")

    monkeypatch.setattr(reaper, "reaper_pass", broken)
    assert reaper_wake(1000.0) == 1002.0
    assert "reaper pass failed" in caplog.text and cache.get(reaper.NEXT_KEY) is None


def test_a_pass_without_a_database_is_one_warning_line(monkeypatch, caplog):
    """An outage is not a bug: each skipped pass says so in one line (a traceback per pass
    made most of the 6,842 lines a worker logged during four minutes of outages)."""
    from django.db import OperationalError

    def no_database():
        raise OperationalError("connection failed: connection to server at 127.0.0.1 failed: Connection refused")

    monkeypatch.setattr(reaper, "reaper_pass", no_database)
    assert reaper_wake(1000.0) == 1002.0
    [record] = [r for r in caplog.records if r.name == "agents.runs.reaper"]
    assert record.levelname == "WARNING" and not record.exc_info
    assert record.getMessage() == ("reaper pass skipped: no database connection (OperationalError: connection "
                                   "failed: connection to server at 127.0.0.1 failed: Connection refused)")
