"""Budget windows keep their spend on the row (``usage.services.usage_count``): what an
admin does to a budget while a round streams, and a record's locks against an admission.
Found by a review of the change; each failed before its fix. Runs on SQLite and again on
PostgreSQL (``db_backends``)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import close_old_connections

from llm.base import Usage
from tests.conftest import make_thread
from usage import services
from usage.models import Budget, BudgetWindow, UsageRecord

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


def _run(users, workspaces, provider):
    from agents.models import Run

    thread = make_thread(users["alice"], workspaces["demo"], provider)
    return Run.objects.create(thread=thread, user=users["alice"], provider=provider, model="fake-model")


class _Emitter:
    def __init__(self):
        self.events = []

    def emit(self, type_, **fields):
        self.events.append((type_, fields))


def test_a_record_giving_back_a_window_it_does_not_count_cannot_deadlock_an_admission(users, workspaces, openai_provider,
                                                                      monkeypatch):
    """A cost budget and a tokens budget on an unpriced model: the record counts only the
    tokens window but gives back both of the hold's. It locked the counted one first and the
    other in its UPDATE — out of primary-key order — while an admission locking in order
    waited for it: PostgreSQL's "deadlock detected", and the admission's run failed."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    Budget.objects.create(workspace=workspaces["demo"], metric="cost", currency="USD", period="day",
                          hard_limit=10)  # its window is made first: lower pk
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=10**9)
    r1, r2 = _run(users, workspaces, openai_provider), _run(users, workspaces, openai_provider)
    args = {"user_id": users["alice"].pk, "workspace_id": workspaces["demo"].pk, "model_id": None, "price": None}
    hold = services.budget_admit(**args, run_id=r1.pk)
    cost_w, tokens_w = sorted(hold.window_ids)

    paused = threading.Event()
    real_set = services._window_set

    def slow_set(*a, **kw):  # after the FOR UPDATE, before the first UPDATE runs
        if threading.current_thread().name == "record" and not paused.is_set():
            paused.set()
            time.sleep(1.0)
        return real_set(*a, **kw)

    monkeypatch.setattr(services, "_window_set", slow_set)
    errors = {}

    def record():
        try:
            services.usage_record(run=r1, message=None, usage={"input_tokens": 10, "output_tokens": 5},
                                  hold=hold, price=None)
        except Exception as exc:  # noqa: BLE001
            errors["record"] = exc
        finally:
            close_old_connections()

    def admit():
        paused.wait(5)
        try:
            services.budget_admit(**args, run_id=r2.pk)
        except Exception as exc:  # noqa: BLE001
            errors["admit"] = exc
        finally:
            close_old_connections()

    threads = [threading.Thread(target=record, name="record"), threading.Thread(target=admit, name="admit")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == {}, {k: f"{type(v).__name__}: {v}" for k, v in errors.items()}
    assert paused.is_set()  # the admission came while the record held its windows
    windows = {w.pk: w for w in BudgetWindow.objects.all()}
    assert windows[tokens_w].spent == 15 and windows[cost_w].spent == 0  # unpriced: no cost counted
    assert windows[tokens_w].in_flight == windows[cost_w].in_flight == 1  # r1's round given back, r2's held


def test_a_budget_switched_to_cost_mid_turn_is_not_charged_tokens_as_money(users, workspaces, openai_provider):
    from agents.metering import meter

    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day",
                                   hard_limit=100_000)
    run = _run(users, workspaces, openai_provider)
    hold = meter().before_round(run=run)  # the turn reads its budgets once
    budget.metric, budget.currency, budget.hard_limit = "cost", "USD", 5  # an admin edits it meanwhile
    budget.save()  # recounts: 0 USD
    meter().after_round(run=run, message=None, usage=Usage(input_tokens=300, output_tokens=200), hold=hold,
                        emitter=_Emitter())
    # the model is unpriced: the record has no cost, so the cost window must stay at 0
    assert UsageRecord.objects.get().cost is None
    assert BudgetWindow.objects.get(budget=budget).spent == 0


def test_a_budget_made_mid_turn_counts_the_turns_record(users, workspaces, openai_provider):
    from agents.metering import meter

    run = _run(users, workspaces, openai_provider)
    hold = meter().before_round(run=run)  # no budget yet
    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    services.budget_check(user_id=users["bob"].pk, workspace_id=workspaces["demo"].pk, model_id=None)  # makes the row
    meter().after_round(run=run, message=None, usage=Usage(input_tokens=600, output_tokens=300), hold=hold,
                        emitter=_Emitter())
    assert services.budget_spent(budget, *services.window_bounds("day")) == 900
    assert BudgetWindow.objects.get(budget=budget).spent == 900


def test_a_budget_deleted_mid_round_keeps_the_record(users, workspaces, openai_provider):
    from agents.metering import meter

    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=1000)
    run = _run(users, workspaces, openai_provider)
    hold = meter().before_round(run=run)  # the round is admitted; the turn keeps its budgets
    budget.delete()  # an admin removes the budget while the model streams
    meter().after_round(run=run, message=None, usage=Usage(input_tokens=10, output_tokens=5), hold=hold,
                        emitter=_Emitter())
    assert UsageRecord.objects.get().total_tokens == 15  # the paid response's record is kept
    assert not BudgetWindow.objects.exists()
