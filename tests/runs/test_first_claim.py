"""A run's first claim skips the look-ups that only a resumed run needs (issue 18: fewer
statements before the model request).

On its first claim a run has no assistant message or grounding of its own, so the turn goes
straight to a new assistant message and to retrieval; a recovered run (``attempts`` > 0, its
``started_at`` set by the claim before) still looks for both and resumes its own message.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Run
from agents.runs.driver import run_turn
from chat.models import Message
from knowledge.models import RunSources
from tests.conftest import make_thread
from tests.fakes.openai_server import text_chunks

pytestmark = pytest.mark.django_db(transaction=True)


def _turn_sql(run) -> list[str]:
    with CaptureQueriesContext(connection) as captured:  # the turn runs on this thread
        run_turn(run_id=run.pk)
    return [q["sql"] for q in captured.captured_queries]


def _looks_for_its_message(sql: list[str], run) -> bool:
    return any('FROM "chat_message"' in s and '"chat_message"."run_id" =' in s and "ORDER BY" in s
               and '"position" DESC' in s and run.pk.hex in s.replace("-", "") for s in sql)


def _looks_for_its_sources(sql: list[str]) -> bool:
    return any(s.lstrip().startswith("SELECT") and 'FROM "knowledge_runsources"' in s for s in sql)


def test_a_first_claim_looks_for_no_earlier_message_or_sources(users, workspaces, openai_provider, fake_openai):
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(text_chunks("Hello there."))
    run = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model")
    question = Message.objects.create(thread=thread, run=run, position=1, role="user", content="hi")
    Run.objects.filter(pk=run.pk).update(user_message=question)
    sql = _turn_sql(run)
    run.refresh_from_db()
    assert run.status == "completed"
    assert not _looks_for_its_message(sql, run)
    assert not _looks_for_its_sources(sql)
    reply = Message.objects.get(run=run, role="assistant")
    assert (reply.status, reply.content) == ("complete", "Hello there.")
    assert RunSources.objects.filter(run=run, grounded_at__isnull=False).exists()  # retrieval still ran


def test_a_recovered_run_resumes_its_own_message_and_sources(users, workspaces, openai_provider, fake_openai):
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(text_chunks("Second try."))
    run = Run.objects.create(thread=thread, user=users["alice"], provider=openai_provider, model="fake-model",
                             status="running", attempts=1, started_at=timezone.now() - timedelta(seconds=30),
                             lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(seconds=1))
    Message.objects.create(thread=thread, run=run, position=1, role="user", content="hi")
    half = Message.objects.create(thread=thread, run=run, position=2, role="assistant", status="streaming",
                                  content="Half an ans")
    RunSources.objects.create(run=run, sources=[], block="", grounded_at=timezone.now(), grounding_note="kept")
    sql = _turn_sql(run)
    run.refresh_from_db()
    assert run.status == "completed"
    assert _looks_for_its_message(sql, run) and _looks_for_its_sources(sql)
    half.refresh_from_db()
    assert (half.status, half.content) == ("truncated", "Half an ans")  # the earlier attempt's text kept
    replies = list(Message.objects.filter(run=run, role="assistant").order_by("position"))
    assert [m.content for m in replies] == ["Half an ans", "Second try."]
    assert RunSources.objects.get(run=run).grounding_note == "kept"  # not retrieved again
