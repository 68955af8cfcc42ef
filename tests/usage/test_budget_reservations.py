"""A hard budget holds under concurrency: a model round reserves what it can really cost (its
input estimate plus the ``max_tokens`` it sends, cut to what is left of the budget), and the
reservation is settled to the real usage when the round ends. Before, a round reserved a
fixed 8,000 tokens and sent no ``max_tokens``: four concurrent runs against a 30,000-token
daily budget spent many times the limit. The fake upstream here is a real HTTP server that
answers every request with a tool call (so each run goes on round after round) and reports
the usage a model writing as long as it may would: input tokens counted from the request it
got (4 bytes a token, as BPE tokenizers average on English), output tokens equal to the
``max_tokens`` it was sent (20,000 when none). Runs on SQLite and again on PostgreSQL
(``db_backends``)."""

from __future__ import annotations

import json
import math
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.models import Run
from agents.round_cost import RoundCost
from agents.services import run_create
from chat.models import Message
from tests.conftest import make_thread
from tests.fakes.openai_server import tool_call_chunks, usage_chunk
from usage.models import Budget, BudgetWindow, UsageRecord

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]

LIMIT = 30_000
UNCAPPED_OUTPUT = 20_000  # what the model writes when no max_tokens is sent
QUESTION = "Look this up in the knowledge base and summarise what you find, in detail. " * 40  # ~3 KB


def provider_input_tokens(body: dict) -> int:
    """What the upstream counts as input: the request's messages and tools, 4 bytes a token."""
    wire = json.dumps(body.get("messages"), ensure_ascii=False) + json.dumps(body.get("tools") or [],
                                                                            ensure_ascii=False)
    return math.ceil(len(wire.encode("utf-8")) / 4)


def large_usage_tool_round(body: dict) -> list:
    output = body.get("max_tokens") or UNCAPPED_OUTPUT
    return tool_call_chunks([("c1", "search_knowledge", '{"query": "budgets"}')]) + [
        usage_chunk(provider_input_tokens(body), output)]


def wait_all_ended(run_ids, timeout: float = 90.0) -> list[Run]:
    deadline = time.monotonic() + timeout
    while True:
        runs = list(Run.objects.filter(pk__in=run_ids))
        if all(run.status in ("completed", "failed", "cancelled") for run in runs):
            return runs
        assert time.monotonic() < deadline, [run.status for run in runs]
        time.sleep(0.05)


@pytest.mark.parametrize("output_cap", [8192, 2000])
def test_four_concurrent_runs_spend_no_more_than_the_hard_limit(users, workspaces, openai_provider, fake_openai,
                                                                settings, output_cap):
    settings.BUDGET_ROUND_MAX_OUTPUT_TOKENS = output_cap  # 2000: more, smaller rounds race for the rest
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=LIMIT)
    fake_openai.script(*[large_usage_tool_round] * 200)
    threads = [make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False) for _ in range(4)]

    runs = [run_create(thread=thread, user=users["alice"], content=QUESTION).run for thread in threads]
    ended = wait_all_ended([run.pk for run in runs])

    spent = sum(record.total_tokens for record in UsageRecord.objects.all())
    sent = fake_openai.requests
    print(f"\nconcurrent: {spent} tokens spent in {len(sent)} rounds; max_tokens sent "
          f"{[body.get('max_tokens') for body in sent]}")
    assert len(sent) >= 2  # the runs did get rounds in
    # Every request carried a cap, and the upstream's input count stayed within the estimate,
    # so the stated bound (over only by input counted beyond the estimate) is zero here.
    assert spent <= LIMIT, f"{spent} tokens spent against a {LIMIT}-token limit in {len(sent)} rounds"
    assert all(isinstance(body.get("max_tokens"), int) and 256 <= body["max_tokens"] <= output_cap for body in sent)
    # The budget ran out: every run ended refused, none failed otherwise.
    assert {run.status for run in ended} == {"failed"}
    assert {run.error["code"] for run in ended} == {"budget_exceeded"}
    window = BudgetWindow.objects.get()
    assert window.spent == spent and window.in_flight == 0 and window.reserved == 0


def test_the_request_is_capped_to_what_is_left(users, workspaces, openai_provider, fake_openai, converse):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=LIMIT)
    record = UsageRecord.objects.create(user=users["bob"], workspace=workspaces["demo"], provider="fake-openai",
                                        model="fake-model", input_tokens=24_000, output_tokens=0,
                                        created_at=timezone.now())
    from usage.services import usage_count

    usage_count(record)
    fake_openai.script(large_usage_tool_round, large_usage_tool_round)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    run, events = converse(thread, users["alice"], "Hi")

    first = fake_openai.requests[0]
    # 6,000 tokens left: the cap is what is left after the request's own input estimate.
    assert 256 <= first["max_tokens"] < 6_000 - provider_input_tokens(first)
    spent = sum(r.total_tokens for r in UsageRecord.objects.all())
    assert spent <= LIMIT
    assert run.status == "failed" and run.error["code"] == "budget_exceeded"
    assert "too little for another reply" in run.error["message"]


def test_a_round_with_too_little_left_is_refused_before_the_provider_is_called(users, workspaces, openai_provider,
                                                                             fake_openai, converse):
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=LIMIT)
    record = UsageRecord.objects.create(user=users["bob"], workspace=workspaces["demo"], provider="fake-openai",
                                        model="fake-model", input_tokens=LIMIT - 100, output_tokens=0,
                                        created_at=timezone.now())
    from usage.services import usage_count

    usage_count(record)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    run, events = converse(thread, users["alice"], "Hi")
    assert fake_openai.requests == []
    assert run.status == "failed" and run.error["code"] == "budget_exceeded"
    final = Message.objects.filter(run=run, role="assistant").order_by("-position").first()
    assert "the 100 tokens left are too little for another reply" in final.content


def test_a_dead_workers_reservation_is_given_back_by_the_reaper(users, workspaces, openai_provider):
    from agents.metering import meter
    from agents.runs.driver import run_fail_interrupted

    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=LIMIT)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    dead = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model",
                              status=Run.Status.RUNNING, lease_owner="gone:1:1",
                              lease_expires_at=timezone.now() - timedelta(seconds=5))
    hold = meter().before_round(run=dead, cost=RoundCost(input_tokens=5_000, max_output_tokens=None))
    assert hold.max_output_tokens == 8192  # BUDGET_ROUND_MAX_OUTPUT_TOKENS: the request set none
    window = BudgetWindow.objects.get()
    assert window.reserved == Decimal(5_000 + 8192) and window.in_flight == 1
    # A second round sees the first one's reservation: it is capped to the rest.
    alive = Run.objects.create(thread=make_thread(users["alice"], workspaces["demo"], openai_provider),
                               user=users["alice"], provider=openai_provider, model="fake-model")
    other = meter().before_round(run=alive, cost=RoundCost(input_tokens=12_000, max_output_tokens=None))
    assert other.max_output_tokens == LIMIT - (5_000 + 8192) - 12_000
    from usage.services import budget_release

    budget_release(other)
    assert run_fail_interrupted(run_id=dead.pk, expected_lease=dead.lease_expires_at)  # the reaper
    window.refresh_from_db()
    assert window.reserved == 0 and window.in_flight == 0 and Run.objects.get(pk=dead.pk).budget_hold == []


def test_a_cost_budget_on_an_unpriced_model_leaves_the_request_uncapped(users, workspaces, openai_provider):
    """Nothing the round spends counts against it, so it lowers no cap and reserves nothing."""
    from agents.metering import meter

    Budget.objects.create(workspace=workspaces["demo"], metric="cost", currency="USD", period="day",
                          hard_limit=Decimal("0.01"))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model")
    hold = meter().before_round(run=run, cost=RoundCost(input_tokens=50_000, max_output_tokens=None))
    assert hold.max_output_tokens is None
    assert BudgetWindow.objects.get().reserved == 0


def test_a_round_that_fails_gives_its_reservation_back(users, workspaces, openai_provider, fake_openai, converse):
    from tests.fakes.openai_server import Failure

    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=LIMIT)
    fake_openai.script(Failure(status=400, message="bad request"))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    run, events = converse(thread, users["alice"], "Hi")
    assert run.status == "failed" and len(fake_openai.requests) == 1
    assert fake_openai.requests[0]["max_tokens"] > 0  # the round was admitted and reserved
    window = BudgetWindow.objects.get()
    assert (window.spent, window.in_flight, window.reserved) == (0, 0, 0)
