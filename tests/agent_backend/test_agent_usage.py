"""Usage and budgets for agent backends (provider kind ``agent_runs``): the remote run's
usage goes through the same meter as a model turn (usage record, cost at the model row's
price, the message's ``usage``, budget warnings), and a budget's hard limit stops the agent
before it is started and before an approval lets it go on. Against the scripted fake of the
Runs API (Hermes' wire format, real HTTP on loopback); on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.models import LLMModel, Run, ToolCall
from agents.runs.driver import run_turn
from agents.services import run_create
from chat.models import Message
from tests.conftest import make_thread, types
from tests.fakes.agent_runs_server import AwaitApproval
from usage.models import Budget, BudgetWindow, ModelPrice, UsageRecord
from usage.services import usage_count

from .test_runs_api_edges import approve_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


@pytest.fixture
def thread(users, workspaces, provider):
    return make_thread(users["admin"], workspaces["demo"], provider)


def priced(provider, *, input_per_mtok="2", output_per_mtok="10"):
    model = LLMModel.objects.create(provider=provider, name="hermes-agent")
    ModelPrice.objects.create(model=model, input_per_mtok=Decimal(input_per_mtok),
                              output_per_mtok=Decimal(output_per_mtok))
    return model


def completed(output: str, usage) -> list:
    return [{"event": "message.delta", "delta": output}, {"event": "run.completed", "output": output, "usage": usage}]


def test_the_remote_runs_usage_is_stored_with_its_cost(users, thread, provider, fake_agent, converse):
    priced(provider)
    fake_agent.script(completed("Disk usage is 41%.", {"input_tokens": 1200, "output_tokens": 300,
                                                       "total_tokens": 1500}))
    run, events = converse(thread, users["admin"], "disk?")
    assert run.status == Run.Status.COMPLETED
    answer = Message.objects.get(run=run, role="assistant")
    # 1200 × 2 / 1e6 + 300 × 10 / 1e6 = 0.0024 + 0.003
    assert answer.usage == {"input_tokens": 1200, "output_tokens": 300, "cached_tokens": None,
                            "reasoning_tokens": None, "cost": "0.00540000", "currency": "USD"}
    record = UsageRecord.objects.get(message=answer)
    assert (record.run_id, record.user_id, record.workspace_id) == (run.pk, users["admin"].pk, thread.workspace_id)
    assert (record.provider, record.model) == ("ops-agent", "hermes-agent")
    assert (record.input_tokens, record.output_tokens, record.cost) == (1200, 300, Decimal("0.0054"))


def test_a_remote_run_without_usage_is_stored_as_unknown_not_zero(users, thread, fake_agent, converse):
    fake_agent.script(completed("Done.", {}))
    run, _ = converse(thread, users["admin"], "go")
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.usage == {"input_tokens": None, "output_tokens": None, "cached_tokens": None,
                            "reasoning_tokens": None, "cost": None, "currency": ""}
    record = UsageRecord.objects.get(message=answer)
    assert record.input_tokens is None and record.output_tokens is None and record.cost is None


def test_agent_usage_counts_toward_budgets_and_warns(users, workspaces, thread, fake_agent, converse,
                                                     api_for):
    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", soft_limit=100,
                                   hard_limit=150)
    fake_agent.script(completed("First.", {"input_tokens": 90, "output_tokens": 70, "total_tokens": 160}))
    run, events = converse(thread, users["admin"], "first")
    assert types(events)[-1] == "run.completed"
    [warning] = [e for e in events if e["type"] == "budget.warning"]
    assert warning["budget_id"] == budget.pk and warning["spent"] == "160" and warning["hard_limit"] == "150"
    assert BudgetWindow.objects.get().in_flight == 0  # the remote run's hold was given back with its usage

    response = api_for(users["admin"]).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "again"},
                                            format="json")
    assert response.status_code == 429 and response.json()["error"]["code"] == "budget_exceeded"
    assert "160 of 150 tokens" in response.json()["error"]["message"] and int(response["Retry-After"]) > 0
    assert len(fake_agent.started) == 1


def test_hard_limit_reached_before_dispatch_never_starts_the_agent(users, workspaces, thread, fake_agent,
                                                                   settings):
    settings.RUN_EXECUTOR = "none"  # the send is accepted under the limit; the turn runs below
    Budget.objects.create(user=users["admin"], metric="tokens", period="month", hard_limit=1000)
    run = run_create(thread=thread, user=users["admin"], content="go").run
    # Another run of the same user used the rest meanwhile.
    usage_count(UsageRecord.objects.create(user=users["admin"], workspace=workspaces["demo"], provider="x",
                                           model="y", input_tokens=1000, output_tokens=0,
                                           created_at=timezone.now()))
    run_turn(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error["code"] == "budget_exceeded"
    assert fake_agent.started == []  # the provider was never called
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.status == "error" and "1000 of 1000 tokens" in answer.content and "resets at" in answer.content
    # Nothing is held: the refused admission wrote nothing (not even the window it would have opened).
    assert list(BudgetWindow.objects.values_list("in_flight", flat=True)) in ([], [0])


def test_a_run_parked_for_approval_holds_no_budget(users, workspaces, thread, fake_agent, sink_for):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=10_000)
    fake_agent.script([AwaitApproval("rm -r /srv/old"),
                       *completed("Removed.", {"input_tokens": 40, "output_tokens": 2, "total_tokens": 42})])
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=users["admin"], content="remove it").run
    events = sink.until_parked(run.pk)
    assert BudgetWindow.objects.get().in_flight == 0  # waiting for a person: the hold was given back
    assert approve_now(users["admin"], events[-1]["tool_call_id"]).status_code == 200
    rest = sink.until_terminal(run.pk)
    assert types(rest)[-1] == "run.completed" and fake_agent.approvals == ["once"]
    assert UsageRecord.objects.get(run=run).input_tokens == 40
    assert BudgetWindow.objects.get().in_flight == 0


def test_an_approval_over_budget_is_not_forwarded_and_stops_the_agent(users, workspaces, thread,
                                                                      fake_agent, sink_for):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=500)
    fake_agent.script([AwaitApproval("rm -r /srv/old"), *completed("Removed.", {})])
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=users["admin"], content="remove it").run
    events = sink.until_parked(run.pk)
    # While the card waited, other work used up the workspace's budget.
    usage_count(UsageRecord.objects.create(user=users["bob"], workspace=workspaces["demo"], provider="x",
                                           model="y", input_tokens=600, output_tokens=0,
                                           created_at=timezone.now() - timedelta(seconds=1)))
    assert approve_now(users["admin"], events[-1]["tool_call_id"]).status_code == 200
    rest = sink.until_terminal(run.pk)
    assert rest[-1]["type"] == "run.failed" and rest[-1]["error"]["code"] == "budget_exceeded"
    assert fake_agent.approvals == ["deny"]  # never "once": the agent did not go on
    assert fake_agent.stops == [Run.objects.get(pk=run.pk).backend_state["remote_run_id"]]
    ledger = ToolCall.objects.get(pk=events[-1]["tool_call_id"])
    assert ledger.status == ToolCall.Status.DENIED and "600 of 500 tokens" in ledger.summary
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.status == "error" and "resets at" in answer.content
