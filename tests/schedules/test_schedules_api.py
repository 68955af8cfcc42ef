"""Scheduled runs (issue 57): ``/api/v1/schedules/`` and the tick, driven with a given "now".

Runs are not executed here (``RUN_EXECUTOR=none``): a fired run stays queued, which is what
the overlap rules look at. The approval path with a real executor is in
``test_schedules_runs.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agents.models import Environment, Run
from chat.models import Membership, Message
from schedules.models import Schedule, ScheduleFire
from schedules.services import schedules_claim_due, schedules_tick
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db

URL = "/api/v1/schedules/"
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # a Monday


@pytest.fixture(autouse=True)
def no_execution(settings):
    settings.RUN_EXECUTOR = "none"
    settings.SCHEDULE_MIN_INTERVAL_S = 300


@pytest.fixture
def thread(users, workspaces, offline):
    return make_thread(users["alice"], workspaces["demo"], offline, title="Morning report")


def create(api, target, **fields):
    body = {"name": "report", "thread": str(target.pk), "prompt": "Summarise yesterday.", "kind": "interval",
            "interval_s": 300, **fields}
    return api.post(URL, body, format="json")


def make(user, thread, *, now=T0, **fields) -> Schedule:
    from schedules.services import schedule_create

    values = {"name": "report", "prompt": "Summarise yesterday.", "kind": "interval", "interval_s": 300, **fields}
    return schedule_create(user=user, thread_id=thread.pk, now=now, **values)


# --- creating: doors --------------------------------------------------------------------------
@pytest.mark.parametrize(("fields", "code", "needle"), [
    ({"kind": "cron", "cron": "* * * * *"}, "too_frequent", "every 60 s"),
    ({"kind": "cron", "cron": "*/2 * * * *"}, "too_frequent", "every 120 s"),
    ({"kind": "cron", "cron": "0,1 9 * * *"}, "too_frequent", "every 60 s"),
    ({"kind": "interval", "interval_s": 1}, "too_frequent", "minimum in this workspace is 300 s"),
    ({"kind": "cron", "cron": "* * * * * *"}, "invalid_cron", "five fields"),
    ({"kind": "cron", "cron": "61 * * * *"}, "invalid_cron", "not valid"),
    ({"kind": "cron", "cron": ""}, "invalid_cron", "five fields"),
    ({"kind": "cron", "cron": "-1 * * * *"}, "invalid_cron", "not valid"),
    ({"kind": "cron", "cron": "0 0 31 2 *"}, "invalid_cron", "never occurs"),
    ({"kind": "interval", "interval_s": None}, "invalid_interval", "seconds"),
    ({"prompt": "   "}, "invalid_prompt", "prompt"),
    ({"env_id": "nowhere"}, "invalid_environment", "nowhere"),
])
def test_bad_timing_and_input_are_400_with_a_precise_message(users, thread, api_for, fields, code, needle):
    response = create(api_for(users["alice"]), thread, **fields)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code
    assert needle in response.json()["error"]["message"]
    assert not Schedule.objects.exists()


def test_create_cron_schedule_shows_its_next_fire_and_belongs_to_the_caller(users, thread, api_for):
    Environment.objects.create(name="staging", tier="staging")
    response = create(api_for(users["alice"]), thread, kind="cron", cron="0 9 * * 1-5", env_id="staging",
                      overlap="queue", owner=users["bob"].pk, workspace="other")
    assert response.status_code == 201, response.content
    body = response.json()
    row = Schedule.objects.get(pk=body["id"])
    assert row.owner == users["alice"] and row.workspace.slug == "demo"  # owner/workspace fields are not read
    assert body["cron"] == "0 9 * * 1-5" and body["overlap"] == "queue" and body["env_id"] == "staging"
    assert body["interval_s"] is None and body["history"] == [] and body["paused"] is False
    nxt = datetime.fromisoformat(body["next_fire_at"])
    assert nxt > timezone.now() and (nxt.hour, nxt.minute) == (9, 0) and nxt.weekday() < 5


def test_cron_next_fire_is_the_next_matching_minute_in_utc(users, thread):
    schedule = make(users["alice"], thread, kind="cron", cron="0 9 * * 1-5", now=T0)  # Monday 10:00
    assert schedule.next_fire_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)  # Tuesday 09:00
    friday = make(users["alice"], thread, kind="cron", cron="30 8 * * 1-5", now=datetime(2026, 3, 6, 9, tzinfo=UTC))
    assert friday.next_fire_at == datetime(2026, 3, 9, 8, 30, tzinfo=UTC)  # over the weekend to Monday


def test_another_users_thread_or_schedule_is_404(users, thread, api_for, workspaces, offline):
    assert create(api_for(users["bob"]), thread).status_code == 404  # alice's thread, same workspace
    assert create(api_for(users["dave"]), thread).status_code == 404  # another workspace
    assert create(api_for(users["admin"]), thread).status_code == 404  # an admin may read, never write
    assert create(api_for(users["alice"]), thread, thread="not-a-uuid").status_code == 404
    schedule = make(users["alice"], thread)
    bob = api_for(users["bob"])
    for method, path in (("get", f"{URL}{schedule.pk}/"), ("patch", f"{URL}{schedule.pk}/"),
                         ("delete", f"{URL}{schedule.pk}/"), ("post", f"{URL}{schedule.pk}/pause/"),
                         ("post", f"{URL}{schedule.pk}/resume/")):
        response = getattr(bob, method)(path, {}, format="json")
        assert response.status_code == 404 and b"Summarise" not in response.content
    assert bob.get(URL).json() == []
    assert [s["id"] for s in api_for(users["alice"]).get(URL).json()] == [str(schedule.pk)]
    schedule.refresh_from_db()
    assert not schedule.paused


def test_update_checks_timing_and_moves_the_next_fire(users, thread, api_for):
    schedule = make(users["alice"], thread, now=timezone.now())
    alice = api_for(users["alice"])
    bad = alice.patch(f"{URL}{schedule.pk}/", {"interval_s": 10}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "too_frequent"
    ok = alice.patch(f"{URL}{schedule.pk}/", {"interval_s": 3600, "name": "hourly"}, format="json")
    assert ok.status_code == 200, ok.content
    schedule.refresh_from_db()
    assert schedule.name == "hourly" and schedule.interval_s == 3600
    assert timedelta(minutes=59) < schedule.next_fire_at - timezone.now() <= timedelta(hours=1)


def test_delete_removes_the_schedule(users, thread, api_for):
    schedule = make(users["alice"], thread)
    assert api_for(users["alice"]).delete(f"{URL}{schedule.pk}/").status_code == 204
    assert not Schedule.objects.exists()


# --- the tick ------------------------------------------------------------------------------------
def test_a_due_schedule_starts_one_run_as_its_owner_through_the_send_path(users, thread, api_for):
    Environment.objects.create(name="prod", tier="prod")
    schedule = make(users["alice"], thread, env_id="prod")
    assert schedules_tick(now=T0 + timedelta(seconds=299)) == []  # not due yet
    fired = schedules_tick(now=T0 + timedelta(seconds=300))
    assert [f.status for f in fired] == ["started"]
    run = Run.objects.get()
    assert run.user == users["alice"] and run.thread == thread and run.env_id == "prod"
    assert run.status == Run.Status.QUEUED
    assert Message.objects.get(run=run, role="user").content == "Summarise yesterday."
    schedule.refresh_from_db()
    assert schedule.next_fire_at == T0 + timedelta(seconds=600) and schedule.last_fired_at == T0 + timedelta(seconds=300)
    history = api_for(users["alice"]).get(f"{URL}{schedule.pk}/").json()["history"]
    assert [(h["status"], h["run_id"], h["run_status"]) for h in history] == [("started", str(run.pk), "queued")]


def test_missed_fires_after_downtime_run_once(users, thread):
    schedule = make(users["alice"], thread)
    later = T0 + timedelta(hours=10)  # 120 fires missed
    schedules_tick(now=later)
    schedules_tick(now=later + timedelta(seconds=5))
    assert ScheduleFire.objects.count() == 1 and Run.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.next_fire_at == later + timedelta(seconds=300)


def test_claim_is_once_a_second_claim_finds_nothing(users, thread):
    make(users["alice"], thread)
    now = T0 + timedelta(seconds=300)
    assert len(schedules_claim_due(now=now)) == 1
    assert schedules_claim_due(now=now) == []  # next_fire_at moved in the claim's transaction


def test_a_pending_fire_left_by_a_dead_ticker_starts_on_the_next_tick(users, thread):
    make(users["alice"], thread)
    schedules_claim_due(now=T0 + timedelta(seconds=300))  # the claiming process dies here
    assert not Run.objects.exists()
    fired = schedules_tick(now=T0 + timedelta(seconds=310))
    assert [f.status for f in fired] == ["started"] and Run.objects.count() == 1


def test_overlap_skip_does_not_pile_up_runs(users, thread):
    make(users["alice"], thread, overlap="skip")
    schedules_tick(now=T0 + timedelta(seconds=300))
    schedules_tick(now=T0 + timedelta(seconds=600))  # the first run is still queued
    assert Run.objects.count() == 1
    skipped = ScheduleFire.objects.get(status="skipped")
    assert "still open" in skipped.detail
    Run.objects.update(status=Run.Status.AWAITING_APPROVAL)  # parked for a person: still open
    schedules_tick(now=T0 + timedelta(seconds=900))
    assert Run.objects.count() == 1 and ScheduleFire.objects.filter(status="skipped").count() == 2
    Run.objects.update(status=Run.Status.COMPLETED)
    schedules_tick(now=T0 + timedelta(seconds=1200))
    assert Run.objects.count() == 2


def test_overlap_queue_waits_for_the_open_run_and_keeps_one_waiting(users, thread):
    make(users["alice"], thread, overlap="queue")
    schedules_tick(now=T0 + timedelta(seconds=300))
    schedules_tick(now=T0 + timedelta(seconds=600))  # queued behind the open run
    schedules_tick(now=T0 + timedelta(seconds=900))  # one waits already: this one is skipped
    assert Run.objects.count() == 1
    assert sorted(ScheduleFire.objects.values_list("status", flat=True)) == ["pending", "skipped", "started"]
    Run.objects.update(status=Run.Status.COMPLETED)
    fired = schedules_tick(now=T0 + timedelta(seconds=910))  # not due again: the waiting fire starts
    assert [f.status for f in fired] == ["started"] and Run.objects.count() == 2


def test_a_removed_members_schedule_stops(users, thread):
    schedule = make(users["alice"], thread)
    Membership.objects.filter(user=users["alice"]).delete()
    fired = schedules_tick(now=T0 + timedelta(seconds=300))
    assert [f.status for f in fired] == ["failed"] and not Run.objects.exists()
    schedule.refresh_from_db()
    assert schedule.paused and schedule.next_fire_at is None and "no longer" in schedule.paused_reason
    assert schedules_tick(now=T0 + timedelta(hours=1)) == []


def test_send_path_limits_apply_to_scheduled_runs(users, thread, settings):
    settings.MAX_ACTIVE_RUNS_PER_USER = 1
    other = make_thread(users["alice"], thread.workspace, thread.provider)
    Run.objects.create(thread=other, user=users["alice"], status=Run.Status.RUNNING, queued_at=T0)
    make(users["alice"], thread)
    fired = schedules_tick(now=T0 + timedelta(seconds=300))
    assert [f.status for f in fired] == ["failed"] and "being written" in fired[0].detail
    assert Run.objects.count() == 1


def test_pause_and_resume(users, thread, api_for):
    schedule = make(users["alice"], thread, now=timezone.now())
    alice = api_for(users["alice"])
    paused = alice.post(f"{URL}{schedule.pk}/pause/").json()
    assert paused["paused"] is True and paused["next_fire_at"] is None
    assert schedules_tick(now=timezone.now() + timedelta(days=1)) == []
    resumed = alice.post(f"{URL}{schedule.pk}/resume/").json()
    assert resumed["paused"] is False
    assert timedelta(seconds=299) < datetime.fromisoformat(resumed["next_fire_at"]) - timezone.now() <= timedelta(
        seconds=300)


def test_resume_refused_once_the_owner_lost_the_thread(users, thread, api_for):
    schedule = make(users["alice"], thread, paused=True)
    Membership.objects.filter(user=users["alice"]).delete()
    assert api_for(users["alice"]).post(f"{URL}{schedule.pk}/resume/").status_code == 404
    schedule.refresh_from_db()
    assert schedule.paused


def test_clock_jumping_back_does_not_stall_the_schedule(users, thread):
    schedule = make(users["alice"], thread, interval_s=3600)
    schedules_tick(now=T0 + timedelta(hours=1))
    schedule.refresh_from_db()
    assert schedule.next_fire_at == T0 + timedelta(hours=2)
    back = T0 - timedelta(hours=5)  # the clock is set back five hours
    schedules_tick(now=back)
    schedule.refresh_from_db()
    assert schedule.next_fire_at == back + timedelta(hours=1)  # not 7 hours away
    Run.objects.update(status=Run.Status.COMPLETED)
    schedules_tick(now=back + timedelta(hours=1))
    assert Run.objects.count() == 2


def test_clock_jumping_forward_fires_once(users, thread):
    make(users["alice"], thread)
    schedules_tick(now=T0 + timedelta(days=3))
    assert Run.objects.count() == 1 and ScheduleFire.objects.count() == 1


def test_schema_lists_the_schedule_endpoints(users, api_for):
    paths = api_for(users["alice"]).get("/api/schema/?format=json").json()["paths"]
    for path in ("/api/v1/schedules/", "/api/v1/schedules/{schedule_id}/", "/api/v1/schedules/{schedule_id}/pause/",
                 "/api/v1/schedules/{schedule_id}/resume/"):
        assert path in paths, path


# --- the page -----------------------------------------------------------------------------------
def test_page_creates_lists_and_keeps_input_on_error(users, thread, client):
    client.force_login(users["alice"])
    bad = client.post("/schedules/", {"action": "create", "name": "<b>nightly</b>", "thread": str(thread.pk),
                                      "prompt": "Summarise.", "kind": "cron", "cron": "* * * * *", "overlap": "queue"})
    assert bad.status_code == 200  # the page again, with the reason (the API answers 400)
    page = bad.content.decode()
    assert "minimum in this workspace is 300 s" in page and 'aria-invalid="true"' in page
    assert "&lt;b&gt;nightly&lt;/b&gt;" in page and "<b>nightly" not in page  # kept, escaped
    assert not Schedule.objects.exists()
    ok = client.post("/schedules/", {"action": "create", "name": "nightly", "thread": str(thread.pk),
                                     "prompt": "Summarise.", "kind": "interval", "interval_minutes": "60",
                                     "overlap": "queue"})
    assert ok.status_code == 302
    schedule = Schedule.objects.get()
    assert schedule.interval_s == 3600 and schedule.overlap == "queue" and schedule.owner == users["alice"]
    listed = client.get("/schedules/").content.decode()
    assert "nightly" in listed and "Run once the current run ends" in listed and schedule.next_fire_at.strftime(
        "%Y-%m-%d %H:%M") in listed
    assert client.post("/schedules/", {"action": "pause", "schedule": str(schedule.pk)}).status_code == 302
    schedule.refresh_from_db()
    assert schedule.paused


def test_page_actions_on_another_users_schedule_are_404(users, thread, client):
    schedule = make(users["alice"], thread)
    client.force_login(users["bob"])
    assert client.post("/schedules/", {"action": "delete", "schedule": str(schedule.pk)}).status_code == 404
    assert "report" not in client.get("/schedules/").content.decode().split("Your schedules")[1].split("New schedule")[0]
    assert Schedule.objects.filter(pk=schedule.pk).exists()


def test_a_raised_minimum_applies_to_schedules_made_before(users, thread, settings):
    schedule = make(users["alice"], thread, kind="cron", cron="*/5 * * * *")
    settings.SCHEDULE_MIN_INTERVAL_S = 1800
    schedules_tick(now=schedule.next_fire_at)
    fired_at = schedule.next_fire_at
    schedule.refresh_from_db()
    assert schedule.next_fire_at == fired_at + timedelta(minutes=30)  # not 5 minutes later


def test_admin_lists_shows_history_and_pauses(users, thread, client):
    schedule = make(users["alice"], thread)
    schedules_tick(now=T0 + timedelta(seconds=300))
    staff = users["admin"]
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    assert "report" in client.get("/admin/schedules/schedule/").content.decode()
    change = client.get(f"/admin/schedules/schedule/{schedule.pk}/change/").content.decode()
    assert "Started" in change and "Summarise yesterday." in change
    response = client.post("/admin/schedules/schedule/", {"action": "pause_selected",
                                                          "_selected_action": [str(schedule.pk)]})
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.paused and schedule.paused_reason == "Paused by an administrator."


def test_admin_cannot_rewrite_a_prompt_that_runs_as_its_owner(users, thread, client):
    schedule = make(users["alice"], thread)
    staff = users["admin"]
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    client.post(f"/admin/schedules/schedule/{schedule.pk}/change/", {"prompt": "Delete everything.", "name": "x"})
    schedule.refresh_from_db()
    assert schedule.prompt == "Summarise yesterday." and schedule.name == "report"


def test_the_ticker_survives_a_dropped_connection_and_is_off_in_tests(users, thread, monkeypatch, settings):
    from django.db import OperationalError

    from schedules import ticker

    calls = []

    def flaky(**_kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return []

    monkeypatch.setattr(ticker, "schedules_tick", flaky)
    ticker.tick_once()  # neither raises nor gives up: a fresh connection, one more try
    assert len(calls) == 2
    ticker.start_ticker()  # SCHEDULE_TICKER_ENABLED is false in tests: no thread
    assert not ticker._started
