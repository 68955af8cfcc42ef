"""Scheduled runs in production mode (issue 57): PostgreSQL, Redis, two real Celery workers
whose schedule tickers both tick (the "beat" of this platform: a daemon thread per worker),
the fake OpenAI upstream as the ``openai`` provider.

A schedule in the ``prod-eu`` environment fires once (not once per worker); its run's write
tool call parks in the approvals inbox of a workspace admin — never approved by the schedule
—, the next fires are skipped while it waits (no pile-up), and the admin's approval there
lets the run finish with the tool executed once.
"""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call

from . import flows
from .harness import started_with_fake_model

pytestmark = pytest.mark.services

TICK_S = 0.3
INTERVAL_S = 2


@pytest.fixture(scope="module")
def platform(upstream):
    yield from started_with_fake_model("services", upstream, EXTRA_TOOL_MODULES="tests.e2e.ui_tools",
                                       SCHEDULE_TICK_S=str(TICK_S), SCHEDULE_MIN_INTERVAL_S=str(INTERVAL_S))


def fires(platform, schedule_id) -> list[tuple[str, str | None]]:
    return platform.sql("SELECT status, run_id::text FROM schedules_schedulefire WHERE schedule_id = %s "
                        "ORDER BY id", schedule_id)


def test_a_scheduled_prod_write_fires_once_parks_in_the_inbox_and_runs_once_approved(platform, upstream):
    platform.add_worker(2)  # two workers, two tickers: the claim keeps each fire single
    platform.sql("INSERT INTO agents_environment (name, tier) VALUES ('prod-eu', 'prod')")
    alice, admin = flows.login_token(platform, "alice"), flows.login_token(platform, "admin")
    thread_id = flows.create_thread(platform, alice, provider="openai")
    upstream.script(tool_call_chunks([call("c1", "ui_write", {"setting": "retention=30d"})]),
                    text_chunks("Changed it in production."))

    with flows.http(platform, alice) as client:
        made = client.post("/api/v1/schedules/", json={
            "name": "nightly retention", "thread": thread_id, "prompt": "Set the retention in production.",
            "kind": "interval", "interval_s": INTERVAL_S, "env_id": "prod-eu", "overlap": "skip"})
        assert made.status_code == 201, made.text
        too_fast = client.post("/api/v1/schedules/", json={
            "name": "x", "thread": thread_id, "prompt": "x", "kind": "interval", "interval_s": 1})
        assert too_fast.status_code == 400 and too_fast.json()["error"]["code"] == "too_frequent"
    schedule_id = made.json()["id"]

    def parked_in_admins_inbox():
        with flows.http(platform, admin) as client:
            inbox = client.get("/api/v1/approvals/").json()
        return inbox[0] if inbox else None

    item = flows.wait_for(parked_in_admins_inbox, "the scheduled run's call in admin's inbox", timeout=60)
    assert item["tool_name"] == "ui_write" and item["approval"]["rule"] == "Production write"
    with flows.http(platform, alice) as client:  # the owner may not approve a production write
        assert client.get("/api/v1/approvals/").json() == []

    # Two more intervals pass with both tickers running: skipped, not piled up, not approved.
    flows.wait_for(lambda: sum(1 for s, _ in fires(platform, schedule_id) if s == "skipped") >= 2,
                   "two skipped fires while the run waits", timeout=30)
    started = [run for status, run in fires(platform, schedule_id) if status == "started"]
    assert len(started) == 1
    assert platform.sql("SELECT count(*) FROM agents_run WHERE thread_id = %s", thread_id) == [(1,)]
    assert platform.sql("SELECT status FROM agents_toolcall WHERE run_id = %s", started[0]) == [("awaiting_approval",)]

    with flows.http(platform, alice) as client:  # stop further fires before approving
        assert client.post(f"/api/v1/schedules/{schedule_id}/pause/").json()["paused"] is True
    with flows.http(platform, admin) as client:
        decided = client.post(f"/api/v1/tool-calls/{item['id']}/decision/", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
    flows.wait_for(lambda: platform.sql("SELECT status FROM agents_run WHERE id = %s", started[0]) == [("completed",)],
                   "the approved run to complete", timeout=60)
    assert platform.sql("SELECT status FROM agents_toolcall WHERE run_id = %s", started[0]) == [("succeeded",)]
    with flows.http(platform, alice) as client:
        history = client.get(f"/api/v1/schedules/{schedule_id}/").json()["history"]
    assert [h["run_status"] for h in history if h["status"] == "started"] == ["completed"]
