"""Usage per response and per run, from every provider's wire format, with cost at the
model's price: the real SDKs against the loopback fakes, through the real loop."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.models import LLMModel
from chat.models import Message
from tests.conftest import make_thread, types
from tests.fakes.anthropic_server import message_delta
from tests.fakes.ollama_server import done, text_parts
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.providers.wire_helpers import *  # noqa: F403
from tests.providers.wire_helpers import assert_completed
from usage.models import ModelPrice, UsageRecord
from usage.services import usage_cost

pytestmark = pytest.mark.django_db(transaction=True)


def price(provider, model, *, input_: str, output: str, cached: str | None = None, currency="USD") -> ModelPrice:
    row, _ = LLMModel.objects.get_or_create(provider=provider, name=model)
    return ModelPrice.objects.create(model=row, input_per_mtok=Decimal(input_), output_per_mtok=Decimal(output),
                                     cached_input_per_mtok=Decimal(cached) if cached else None, currency=currency)


def openai_usage(prompt, completion, *, cached=None, reasoning=None) -> dict:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return {"choices": [], "usage": usage}


def test_openai_usage_chunk_with_details_is_stored_with_its_cost(users, workspaces, openai_provider, fake_openai,
                                                                  converse):
    price(openai_provider, "fake-model", input_="2.50", output="10", cached="1.25")
    fake_openai.script(text_chunks("Hi there") + [openai_usage(1200, 300, cached=1000, reasoning=120)])
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = converse(thread, users["alice"], "Hello")

    final = assert_completed(run, events)
    # 200 uncached × 2.50 + 1000 cached × 1.25 + 300 × 10, per million
    expected = (Decimal(200) * Decimal("2.50") + Decimal(1000) * Decimal("1.25") + Decimal(300) * 10) / 1_000_000
    assert final.usage == {"input_tokens": 1200, "output_tokens": 300, "cached_tokens": 1000,
                           "reasoning_tokens": 120, "cost": str(expected.quantize(Decimal("0.00000001"))),
                           "currency": "USD"}
    [record] = UsageRecord.objects.filter(run=run)
    assert record.message_id == final.pk and record.cost == expected and record.user == users["alice"]
    assert record.workspace == workspaces["demo"] and (record.provider, record.model) == ("fake-openai", "fake-model")


def test_a_run_with_a_tool_round_stores_usage_per_response(users, workspaces, openai_provider, fake_openai, converse):
    fake_openai.script(
        tool_call_chunks([("c1", "search_knowledge", '{"query": "x"}')]) + [openai_usage(50, 7)],
        text_chunks("Done.") + [openai_usage(80, 3)],
    )
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = converse(thread, users["alice"], "Look it up")
    assert_completed(run, events)

    assistants = list(Message.objects.filter(run=run, role="assistant").order_by("position"))
    assert [(m.usage["input_tokens"], m.usage["output_tokens"]) for m in assistants] == [(50, 7), (80, 3)]
    records = UsageRecord.objects.filter(run=run).order_by("created_at")
    assert [(r.input_tokens, r.output_tokens, r.message_id) for r in records] == [
        (50, 7, assistants[0].pk), (80, 3, assistants[1].pk)]
    assert all(r.cost is None for r in records)  # no price on the model: no cost, not zero


def test_no_usage_chunk_means_null_counts_not_a_guess(users, workspaces, openai_provider, fake_openai, converse):
    fake_openai.script(text_chunks("No usage here"))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = converse(thread, users["alice"], "Hi")
    final = assert_completed(run, events)
    assert final.usage == {"input_tokens": None, "output_tokens": None, "cached_tokens": None,
                           "reasoning_tokens": None, "cost": None, "currency": ""}
    [record] = UsageRecord.objects.filter(run=run)
    assert record.input_tokens is None and record.output_tokens is None and record.cost is None


def test_anthropic_message_start_and_delta_usage_with_cache_reads(users, workspaces, anthropic_provider,
                                                                   fake_anthropic, converse):
    price(anthropic_provider, "claude-fake-1", input_="3", output="15", cached="0.30")
    start = {"type": "message_start", "message": {
        "id": "msg_u", "type": "message", "role": "assistant", "model": "claude-fake-1", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 40, "cache_read_input_tokens": 500, "cache_creation_input_tokens": 60,
                  "output_tokens": 1}}}
    fake_anthropic.script([start,
                           {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                           {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
                           {"type": "content_block_stop", "index": 0},
                           message_delta("end_turn", output_tokens=25)])
    thread = make_thread(users["alice"], workspaces["demo"], anthropic_provider)
    run, events = converse(thread, users["alice"], "Hello")

    final = assert_completed(run, events)
    # input = 40 + 500 cache reads + 60 cache writes; output from the cumulative message_delta
    assert (final.usage["input_tokens"], final.usage["cached_tokens"], final.usage["output_tokens"]) == (600, 500, 25)
    assert final.usage["reasoning_tokens"] is None  # the Messages API gives no reasoning count
    expected = (Decimal(100) * 3 + Decimal(500) * Decimal("0.30") + Decimal(25) * 15) / 1_000_000
    assert Decimal(final.usage["cost"]) == expected == UsageRecord.objects.get(run=run).cost


def test_ollama_eval_counts_are_stored_and_priced(users, workspaces, ollama_provider, fake_ollama, converse):
    price(ollama_provider, "qwen2.5:14b", input_="0.10", output="0.40", currency="EUR")
    fake_ollama.script(text_parts("Local answer.") + [done(prompt=321, completion=54)])
    thread = make_thread(users["alice"], workspaces["demo"], ollama_provider)
    run, events = converse(thread, users["alice"], "Hello")
    final = assert_completed(run, events)
    record = UsageRecord.objects.get(run=run)
    assert (record.input_tokens, record.output_tokens, record.cached_tokens) == (321, 54, None)
    assert record.cost == (Decimal(321) * Decimal("0.10") + Decimal(54) * Decimal("0.40")) / 1_000_000
    assert record.currency == "EUR" and final.usage["currency"] == "EUR"


def test_a_later_price_change_does_not_rewrite_stored_cost(users, workspaces, openai_provider, fake_openai, converse):
    row = price(openai_provider, "fake-model", input_="1", output="1")
    fake_openai.script(text_chunks("a") + [openai_usage(1000, 1000)])
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, _ = converse(thread, users["alice"], "Hello")
    row.input_per_mtok = row.output_per_mtok = Decimal(100)
    row.save()
    assert UsageRecord.objects.get(run=run).cost == Decimal("0.002")


def test_offline_runs_are_recorded(users, workspaces, offline, converse):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    run, events = converse(thread, users["alice"], "How does the with statement work?")
    assert types(events)[-1] == "run.completed"
    assert UsageRecord.objects.filter(run=run).count() == Message.objects.filter(run=run, role="assistant").count()


@pytest.mark.parametrize(("usage", "expected"), [
    ({"input_tokens": None, "output_tokens": None}, None),
    ({"input_tokens": 1_000_000, "output_tokens": 0}, Decimal("2")),
    ({"input_tokens": 1_000_000, "output_tokens": 0, "cached_tokens": 1_000_000}, Decimal("0.5")),
    ({"input_tokens": 10, "output_tokens": None}, Decimal("0.00002")),
])
def test_usage_cost_rules(usage, expected):
    row = ModelPrice(input_per_mtok=Decimal(2), output_per_mtok=Decimal(8), cached_input_per_mtok=Decimal("0.5"))
    assert usage_cost(price=row, usage=usage) == expected
    assert usage_cost(price=None, usage=usage) is None
