"""Titles written by the chat's model after the first answer (``agents/titles.py``, issue 54),
against the fake OpenAI upstream (real wire format, through the ``openai`` SDK)."""

from __future__ import annotations

import asyncio

import pytest

from agents.runs.executors import drain_embedded
from agents.services import run_create
from agents.titles import TITLE_OUTPUT_TOKENS, title_clean
from chat.models import Thread
from chat.services import TITLE_MAX_CHARS, title_from_message
from chatplatform.loops import run_coroutine
from tests.conftest import make_thread
from tests.fakes.openai_server import Failure, text_chunks

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How do context managers release resources when an exception happens inside the with block?"
CUT = title_from_message(QUESTION)


@pytest.fixture(autouse=True)
def titles_on(settings):
    settings.CHAT_TITLE_GENERATION = True


def answer(thread, user, content, sink_for):
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=user, content=content)
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.completed"
    assert drain_embedded(10) == 0  # the title is written in the turn's thread, after run.completed
    return sink


def test_the_first_answer_titles_the_chat_with_the_small_tier(users, workspaces, openai_provider, fake_openai,
                                                              sink_for):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    fake_openai.script(text_chunks("They call __exit__, which runs even on an exception."),
                       text_chunks('Title: "Context managers and exceptions".'))
    sink = answer(thread, alice, QUESTION, sink_for)
    thread.refresh_from_db()
    assert thread.title == "Context managers and exceptions"
    request = fake_openai.requests[-1]
    assert len(fake_openai.requests) == 2 and request["model"] == "fake-model"
    assert request["max_tokens"] == TITLE_OUTPUT_TOKENS or request.get("max_completion_tokens") == TITLE_OUTPUT_TOKENS
    assert "tools" not in request
    assert request["messages"][0]["role"] == "system" and "title" in request["messages"][0]["content"]
    assert QUESTION in request["messages"][1]["content"] and "__exit__" in request["messages"][1]["content"]
    # The thread's sockets are told (the next message on its group after run.completed).
    message = run_coroutine(asyncio.wait_for(sink.layer.receive(sink.channel), 5))
    assert message["event"] == {"type": "thread.renamed", "thread_id": str(thread.pk),
                                "title": "Context managers and exceptions"}
    # The second answer asks for no title.
    fake_openai.script(text_chunks("More."))
    answer(thread, alice, "And async with?", sink_for)
    assert len(fake_openai.requests) == 3
    thread.refresh_from_db()
    assert thread.title == "Context managers and exceptions"


def test_a_failed_title_request_keeps_the_cut_question(users, workspaces, openai_provider, fake_openai, sink_for):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    fake_openai.script(text_chunks("Answer."), Failure(status=500, message="upstream down"))
    answer(thread, alice, QUESTION, sink_for)
    assert len(fake_openai.requests) == 2  # asked once, no retry
    thread.refresh_from_db()
    assert thread.title == CUT


def test_a_renamed_chat_and_the_offline_provider_get_no_title_call(users, workspaces, openai_provider, offline,
                                                                   fake_openai, sink_for):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider, title="My own name")
    fake_openai.script(text_chunks("Answer."))
    answer(thread, alice, QUESTION, sink_for)
    assert len(fake_openai.requests) == 1
    assert Thread.objects.get(pk=thread.pk).title == "My own name"
    offline_thread = make_thread(alice, workspaces["demo"], offline)
    answer(offline_thread, alice, "How does the with statement work?", sink_for)
    assert len(fake_openai.requests) == 1
    assert Thread.objects.get(pk=offline_thread.pk).title == "How does the with statement work?"


def test_title_generation_can_be_turned_off(users, workspaces, openai_provider, fake_openai, sink_for, settings):
    settings.CHAT_TITLE_GENERATION = False
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(text_chunks("Answer."))
    answer(thread, users["alice"], QUESTION, sink_for)
    assert len(fake_openai.requests) == 1 and Thread.objects.get(pk=thread.pk).title == CUT


def test_the_title_call_is_metered_like_any_model_call(users, workspaces, openai_provider, fake_openai, sink_for):
    """The title request's tokens are a usage record of the run (no message) and count into the
    budgets; with the budget spent by the answer, no title is asked for."""
    from tests.fakes.openai_server import usage_chunk
    from usage.models import Budget, BudgetWindow, UsageRecord

    alice = users["alice"]
    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=10_000)
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    fake_openai.script([*text_chunks("They call __exit__."), usage_chunk(1200, 30)],
                       [*text_chunks("Context managers"), usage_chunk(310, 4)])
    answer(thread, alice, QUESTION, sink_for)
    assert Thread.objects.get(pk=thread.pk).title == "Context managers"
    records = UsageRecord.objects.filter(thread_id=thread.pk).order_by("created_at")
    assert [(r.message_id is None, r.input_tokens, r.output_tokens, r.user_id, r.model) for r in records] == [
        (False, 1200, 30, alice.pk, "fake-model"), (True, 310, 4, alice.pk, "fake-model")]
    window = BudgetWindow.objects.get(budget=budget)
    assert (window.spent, window.in_flight, window.reserved) == (1200 + 30 + 310 + 4, 0, 0)
    # The next chat's answer (more than it was estimated at) spends the budget: its title is
    # not asked for.
    budget.hard_limit = window.spent + 5000
    budget.save()
    spent = make_thread(alice, workspaces["demo"], openai_provider)
    fake_openai.script([*text_chunks("Answer."), usage_chunk(5000, 10)])
    answer(spent, alice, QUESTION, sink_for)
    assert len(fake_openai.requests) == 3
    assert Thread.objects.get(pk=spent.pk).title == CUT
    assert UsageRecord.objects.filter(thread_id=spent.pk).count() == 1


@pytest.mark.parametrize(("raw", "title"), [
    ('"Context managers"', "Context managers"),
    ("Title: Python generators.\nSecond line", "Python generators"),
    ("**Bold title**", "Bold title"),
    ("「上下文管理器」", "上下文管理器"),
    ("\n\n  Spaced   out  ", "Spaced out"),
    ("evil\u202etxt.exe", "eviltxt.exe"),
    ("", ""),
    ("   \n  ", ""),
])
def test_title_clean(raw, title):
    assert title_clean(raw) == title


def test_a_long_title_is_cut_at_a_word():
    title = title_clean("word " * 30)
    assert len(title) <= TITLE_MAX_CHARS and title.endswith("d…") and title.startswith("word word")
