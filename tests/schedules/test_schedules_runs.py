"""A scheduled run goes through the real run path (embedded executor, fake OpenAI model): its
write tool call in production parks under the approval rules like an interactive one — in
the inbox of a workspace admin, never approved by the schedule — and the owner's roles at fire
time decide which tools are offered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.approvals.defaults import ensure_default_approval_policies
from agents.models import ApprovalPolicy, Environment, Role, Run, ToolCall, ToolPolicy
from chat.models import Membership
from schedules.models import ScheduleFire
from schedules.services import schedule_create, schedules_tick
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call, scoped_toolbox

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def box(roles):
    ensure_default_approval_policies(ApprovalPolicy)  # transactional tests flush the migration's rows
    toolbox, scope = scoped_toolbox()
    with scope:
        note = ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="writes_in_prod")
        ToolPolicy.objects.create(tool_name="kb_lookup", risk="read")
        note.allowed_roles.set([roles["member"], roles["admin"]])
        yield toolbox


def fire(users, thread, *, env_id="prod"):
    schedule = schedule_create(user=users["alice"], thread_id=thread.pk, name="nightly note", prompt="Write the note.",
                               kind="interval", interval_s=300, env_id=env_id, now=T0)
    fired = schedules_tick(now=T0 + timedelta(seconds=300))
    assert [f.status for f in fired] == ["started"]
    return schedule, fired[0].run


def test_a_scheduled_write_in_prod_parks_for_an_admin_and_runs_once_approved(
        box, users, workspaces, openai_provider, fake_openai, sink_for, api_for):
    Environment.objects.create(name="prod", tier="prod")
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(tool_call_chunks([call("c1", "note_write", {"text": "nightly"})]), text_chunks("Noted."))
    sink = sink_for(thread.pk)
    schedule, run = fire(users, thread)
    request = sink.until_parked(run.pk)[-1]
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == ToolCall.Status.AWAITING_APPROVAL and box.calls == []  # parked, not executed
    assert request["rule"] == "Production write" and request["env_context"] == "prod"

    # The approvers' inbox has it (a workspace admin), the owner's does not: the schedule's
    # owner is the requester, who may not approve a production write.
    assert [c["id"] for c in api_for(users["admin"]).get("/api/v1/approvals/").json()] == [str(ledger.pk)]
    assert api_for(users["alice"]).get("/api/v1/approvals/").json() == []

    # Still parked at the next fire: the schedule neither approves nor piles up another run.
    schedules_tick(now=T0 + timedelta(seconds=600))
    assert Run.objects.filter(thread=thread).count() == 1
    assert ToolCall.objects.get(pk=ledger.pk).status == ToolCall.Status.AWAITING_APPROVAL
    assert ScheduleFire.objects.filter(schedule=schedule, status="skipped").count() == 1

    decided = api_for(users["admin"]).post(f"/api/v1/tool-calls/{ledger.pk}/decision/", {"decision": "approve"},
                                           format="json")
    assert decided.status_code == 200, decided.content
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"
    assert box.names() == ["note_write"]
    sink.close()


def test_a_tool_whose_role_the_owner_lost_is_not_offered_at_fire_time(
        box, users, workspaces, openai_provider, fake_openai, sink_for):
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    schedule_create(user=users["alice"], thread_id=thread.pk, name="note", prompt="Write the note.",
                    kind="interval", interval_s=300, now=T0)
    Membership.objects.filter(user=users["alice"]).update(role=Role.objects.get(name="viewer"))  # demoted later
    fake_openai.script(text_chunks("I cannot write notes."))
    sink = sink_for(thread.pk)
    run = schedules_tick(now=T0 + timedelta(seconds=300))[0].run
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"
    sink.close()
    offered = {t["function"]["name"] for t in fake_openai.requests[-1].get("tools", [])}
    assert "note_write" not in offered and "kb_lookup" in offered
