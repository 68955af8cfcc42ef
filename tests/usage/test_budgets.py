"""Budgets: soft limits warn, hard limits stop a run before the provider is called (at send
time with 429 ``budget_exceeded`` + Retry-After, and between tool rounds with an in-thread
message), and concurrent rounds cannot overshoot by more than one round. Runs on SQLite and
again on PostgreSQL (``db_backends``)."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import close_old_connections
from django.test import Client
from django.utils import timezone

from agents.metering import DispatchRefused
from chat.models import Message
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.providers.wire_helpers import *  # noqa: F403
from usage.models import Budget, BudgetWindow, UsageRecord
from usage.services import (
    Hold,
    budget_admit,
    budget_release,
    usage_count,
    usage_record,
    window_bounds,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


def usage_chunk(prompt, completion) -> dict:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion}}


def spend(user, workspace, tokens: int, *, model="fake-model", provider="fake-openai") -> UsageRecord:
    """Usage stored this period (as if other runs had used it), counted as every writer does."""
    record = UsageRecord.objects.create(user=user, workspace=workspace, provider=provider, model=model,
                                        input_tokens=tokens, output_tokens=0, created_at=timezone.now())
    usage_count(record)
    return record


def test_hard_limit_reached_refuses_the_send_with_429_and_retry_after(users, workspaces, openai_provider,
                                                                        fake_openai, api_for):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    spend(users["bob"], workspaces["demo"], 1000)  # someone else in the workspace used it up
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)

    response = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "Hello"},
                                            format="json")

    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded" and "resets at" in error["message"]
    _, end = window_bounds("day")
    wait = int(response["Retry-After"])
    assert abs(wait - (end - timezone.now()).total_seconds()) < 5
    assert not Message.objects.filter(thread=thread).exists() and fake_openai.requests == []


def test_a_budget_of_another_workspace_or_user_does_not_apply(users, workspaces, openai_provider, fake_openai,
                                                               converse):
    Budget.objects.create(workspace=workspaces["other"], metric="tokens", period="day", hard_limit=1)
    Budget.objects.create(user=users["bob"], metric="tokens", period="month", hard_limit=1)
    spend(users["bob"], workspaces["other"], 50)
    fake_openai.script(text_chunks("fine") + [usage_chunk(10, 2)])
    run, events = converse(make_thread(users["alice"], workspaces["demo"], openai_provider), users["alice"], "Hi")
    assert types(events)[-1] == "run.completed"


def test_soft_limit_warns_once_and_the_run_goes_on(users, workspaces, openai_provider, fake_openai, converse):
    budget = Budget.objects.create(user=users["alice"], metric="tokens", period="month", soft_limit=100,
                                   hard_limit=100_000)
    fake_openai.script(text_chunks("one") + [usage_chunk(90, 20)], text_chunks("two") + [usage_chunk(90, 20)])
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)

    run, events = converse(thread, users["alice"], "First")
    assert types(events)[-1] == "run.completed"
    [warning] = [e for e in events if e["type"] == "budget.warning"]
    assert warning["budget_id"] == budget.pk and warning["spent"] == "110" and warning["soft_limit"] == "100"
    assert warning["scope"] == "user" and warning["resets_at"] == window_bounds("month")[1].isoformat()

    run, events = converse(thread, users["alice"], "Second")  # still above: no second warning this month
    assert types(events)[-1] == "run.completed" and "budget.warning" not in types(events)


def test_hard_limit_between_tool_rounds_stops_before_the_next_provider_call(users, workspaces, openai_provider,
                                                                             fake_openai, converse):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=5000)
    fake_openai.script(  # the provider counts more input than estimated: the spend passes the limit by that
        tool_call_chunks([("c1", "search_knowledge", '{"query": "x"}')]) + [usage_chunk(4500, 600)],
        text_chunks("never sent"),
    )
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = converse(thread, users["alice"], "Search, then answer")

    assert run.status == "failed" and run.error["code"] == "budget_exceeded"
    failed = events[-1]
    assert failed["type"] == "run.failed" and failed["error"]["code"] == "budget_exceeded"
    assert len(fake_openai.requests) == 1  # the second model request was never sent
    final = Message.objects.filter(run=run, role="assistant").order_by("-position").first()
    assert final.status == "error" and "5100 of 5000 tokens" in final.content and "resets at" in final.content
    assert BudgetWindow.objects.get().in_flight == 0  # the first round's hold was given back


def test_cost_budget_counts_only_priced_usage_in_its_currency(users, workspaces, openai_provider, fake_openai,
                                                               converse, api_for):
    from agents.models import LLMModel
    from usage.models import ModelPrice

    model = LLMModel.objects.create(provider=openai_provider, name="fake-model")
    ModelPrice.objects.create(model=model, input_per_mtok=Decimal(10), output_per_mtok=Decimal(10))
    Budget.objects.create(user=users["alice"], model=model, metric="cost", currency="USD", period="day",
                          hard_limit=Decimal("0.05"))
    fake_openai.script(text_chunks("pricey") + [usage_chunk(4000, 2000)])  # 6,000 tokens × $0.00001 = $0.06
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = converse(thread, users["alice"], "Hi")
    # Admitted with its output capped to the rest ($0.05 at $10/M: 5,000 tokens less the input
    # estimate); the provider counted more input than estimated, which is what may pass the limit.
    assert types(events)[-1] == "run.completed"
    assert 256 <= fake_openai.requests[0]["max_tokens"] < 5000

    response = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "Again"},
                                            format="json")
    assert response.status_code == 429 and "0.06 of 0.05 USD" in response.json()["error"]["message"]


def _race(admit, n: int = 2) -> list:
    """Call ``admit`` from ``n`` threads released at the same moment; their outcomes."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def worker(i):
        barrier.wait()
        try:
            results[i] = admit()
        except DispatchRefused as exc:
            results[i] = exc
        finally:
            close_old_connections()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_two_runs_racing_at_the_limit_cannot_both_go(users, workspaces, settings):
    settings.BUDGET_ROUND_RESERVE_TOKENS = 200
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    spend(users["alice"], workspaces["demo"], 900)  # 100 left: less than one reserve per racing round

    def admit():
        return budget_admit(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk, model_id=None, price=None)

    for _ in range(5):  # the same outcome every time, not by luck of timing
        outcomes = _race(admit, n=3)
        holds = [o for o in outcomes if isinstance(o, Hold)]
        refused = [o for o in outcomes if isinstance(o, DispatchRefused)]
        assert len(holds) == 1 and len(refused) == 2
        assert all(r.code == "budget_exceeded" and r.retry_after == settings.BUDGET_BUSY_RETRY_S for r in refused)
        assert BudgetWindow.objects.get().in_flight == 1
        budget_release(holds[0])
    assert BudgetWindow.objects.get().in_flight == 0


def test_racing_rounds_overshoot_by_at_most_one_round(users, workspaces, openai_provider, settings):
    """Rounds admitted together while the rest covers a reserve each; once a round's usage
    pushes the spend past the limit, nobody else is admitted."""
    settings.BUDGET_ROUND_RESERVE_TOKENS = 100
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    from agents.models import Run

    run = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model")

    def admit():
        return budget_admit(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk, model_id=None, price=None)

    spent = 0
    while True:
        outcomes = _race(admit, n=4)
        holds = [o for o in outcomes if isinstance(o, Hold)]
        if not holds:
            break
        for hold in holds:  # each admitted round uses 90 tokens (within its reserve)
            usage_record(run=run, message=None, usage={"input_tokens": 60, "output_tokens": 30}, hold=hold)
            spent += 90
    assert spent == sum(r.total_tokens for r in UsageRecord.objects.all())
    assert 1000 <= spent < 1000 + 90 + 1  # past the limit by less than one round
    assert BudgetWindow.objects.get().in_flight == 0


def test_a_dead_workers_hold_is_forgotten(users, workspaces, settings):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    spend(users["alice"], workspaces["demo"], 950)
    args = {"user_id": users["alice"].pk, "workspace_id": workspaces["demo"].pk, "model_id": None, "price": None}
    budget_admit(**args)  # never released: its worker died
    with pytest.raises(DispatchRefused) as refused:
        budget_admit(**args)
    assert refused.value.message.startswith(  # the busy refusal names its period
        "The daily budget of this workspace usage is nearly used up (950 of 1000 tokens)")
    BudgetWindow.objects.update(hold_until=timezone.now() - timedelta(seconds=1))
    hold = budget_admit(**args)
    assert hold.window_ids and BudgetWindow.objects.get().in_flight == 1


def test_budget_status_for_the_thread_banner(users, workspaces, openai_provider):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", soft_limit=100,
                          hard_limit=1000)
    Budget.objects.create(user=users["alice"], metric="tokens", period="month", hard_limit=200)
    spend(users["alice"], workspaces["demo"], 150)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    client = Client()
    client.force_login(users["alice"])
    body = client.get(f"/usage/budgets/{thread.pk}/").json()
    states = {(b["scope"], b["period"]): (b["state"], b["spent"]) for b in body["budgets"]}
    assert states == {("workspace", "day"): ("warning", "150"), ("user", "month"): ("ok", "150")}

    client.force_login(users["dave"])  # not a member of the thread's workspace: the thread does not exist for him
    assert client.get(f"/usage/budgets/{thread.pk}/").status_code == 404


def test_a_recovered_run_gives_back_the_hold_its_dead_worker_left(users, workspaces, openai_provider, settings):
    # The hold is recorded on the run; the run's next attempt (or the reaper failing it) gives
    # it back at once — before, new admissions kept extending the window's hold_until, so the
    # dead round's share stayed refused to others ("busy") for as long as the budget was busy.
    from agents.metering import meter
    from agents.models import Run
    from agents.runs.driver import run_fail_interrupted

    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    spend(users["alice"], workspaces["demo"], 950)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    dead = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model",
                              status=Run.Status.RUNNING, lease_owner="gone:1:1",
                              lease_expires_at=timezone.now() - timedelta(seconds=5))
    meter().before_round(run=dead)  # its worker died mid-round: never released
    window = BudgetWindow.objects.get()
    assert window.in_flight == 1 and window.reserved == 8000  # a round of unknown cost: the fixed reserve
    assert Run.objects.get(pk=dead.pk).budget_hold == [[window.pk, "8000"]]
    args = {"user_id": users["alice"].pk, "workspace_id": workspaces["demo"].pk, "model_id": None, "price": None}
    with pytest.raises(DispatchRefused):  # the phantom round is still counted
        budget_admit(**args)
    assert run_fail_interrupted(run_id=dead.pk, expected_lease=dead.lease_expires_at)
    window.refresh_from_db()
    assert (window.in_flight, window.reserved) == (0, 0) and Run.objects.get(pk=dead.pk).budget_hold == []
    hold = budget_admit(**args)  # the rest is free for others again
    # A late release by the dead round's own worker (it was only frozen) gives nothing back twice.
    budget_release(Hold([window.pk], dead.pk, [Decimal(8000)]))
    assert BudgetWindow.objects.get().in_flight == 1
    budget_release(hold)
    assert BudgetWindow.objects.get().in_flight == 0


def test_a_run_claimed_again_after_its_worker_died_starts_without_the_old_hold(users, workspaces, openai_provider,
                                                                               scripted_model):
    from agents.metering import meter
    from agents.models import Run
    from agents.runs.driver import run_turn
    from chat.services import message_create
    from tests.scripted import says

    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=100_000)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    question = message_create(thread_id=thread.pk, role=Message.Role.USER, content="hi")
    run = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model",
                             user_message=question, attempts=1)  # requeued by the reaper
    meter().before_round(run=run)  # the first attempt's round: its worker died
    assert BudgetWindow.objects.get().in_flight == 1
    scripted_model.script(says("Hello"))
    run_turn(run_id=run.pk)
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    assert BudgetWindow.objects.get().in_flight == 0  # the old hold and the new round's: both given back


def test_the_window_counts_every_record_once_while_records_race_its_making(users, workspaces, openai_provider):
    # The window's spend is summed once when its row is made, then counted up by each record:
    # records stored while admissions make the row must neither be lost nor counted twice.
    import itertools

    from agents.models import Run

    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=10**9)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model")
    turn = itertools.count()

    def store_or_admit():
        if next(turn) % 2:
            return usage_record(run=run, message=None, usage={"input_tokens": 7, "output_tokens": 3})
        return budget_admit(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk, model_id=None, price=None)

    for _ in range(4):
        BudgetWindow.objects.all().delete()  # each round races the making of the row again
        _race(store_or_admit, n=6)
        assert BudgetWindow.objects.get().spent == sum(r.total_tokens for r in UsageRecord.objects.all())
    assert UsageRecord.objects.count() == 12


def test_a_model_budgets_window_is_made_from_that_models_records_only(users, workspaces, openai_provider):
    # Records name their model by provider slug and name; a budget names the model row. The
    # window made at the first admission sums only the records of that provider's model.
    from agents.models import LLMModel
    from usage.services import budgets_spent

    model = LLMModel.objects.create(provider=openai_provider, name="fake-model")
    other = LLMModel.objects.create(provider=openai_provider, name="other-model")
    slug = openai_provider.slug
    spend(users["alice"], workspaces["demo"], 300, model="fake-model", provider=slug)
    spend(users["bob"], workspaces["demo"], 200, model="other-model", provider=slug)
    spend(users["alice"], workspaces["demo"], 100, model="fake-model", provider=f"{slug}-elsewhere")
    mine = Budget.objects.create(workspace=workspaces["demo"], model=model, metric="tokens", period="day",
                                 hard_limit=1000)
    theirs = Budget.objects.create(workspace=workspaces["demo"], model=other, metric="tokens", period="day",
                                   hard_limit=1000)
    start, end = window_bounds("day")
    assert budgets_spent([(mine, start, end), (theirs, start, end)]) == [300, 200]
    budget_release(budget_admit(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk, model_id=model.pk,
                                price=None))
    assert BudgetWindow.objects.get().budget == mine and BudgetWindow.objects.get().spent == 300


def test_editing_a_budget_recounts_its_window_from_the_records(users, workspaces):
    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    spend(users["alice"], workspaces["demo"], 300)
    spend(users["bob"], workspaces["demo"], 200)
    args = {"user_id": users["alice"].pk, "workspace_id": workspaces["demo"].pk, "model_id": None, "price": None}
    budget_release(budget_admit(**args))
    assert BudgetWindow.objects.get().spent == 500  # the workspace's
    budget.user = users["alice"]  # now alice's own usage in the workspace
    budget.save()
    assert BudgetWindow.objects.get().spent == 300
    spend(users["alice"], workspaces["demo"], 700)
    with pytest.raises(DispatchRefused):
        budget_admit(**args)


def test_windows_made_before_the_spend_column_are_counted_by_the_migration(users, workspaces):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("usage.migrations.0002_budgetwindow_spent")
    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    spend(users["alice"], workspaces["demo"], 120)
    spend(users["bob"], workspaces["other"], 999)  # another workspace's
    budget_release(budget_admit(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk, model_id=None,
                                price=None))
    BudgetWindow.objects.update(spent=0)  # as the column's default left an existing row
    migration.count_existing(apps, None)
    assert BudgetWindow.objects.get(budget=budget).spent == 120
