"""The agent loop end to end on the offline provider (embedded executor, real channel layer)."""

import pytest

from agents.models import Run, ToolCall
from chat.models import Message
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create
from tests.conftest import joined_text, make_thread, types

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def with_topic(workspaces, users):
    return knowledge_item_create(
        workspace=workspaces["demo"], owner=users["admin"], title="The with statement",
        content='The "with" statement is used to wrap the execution of a block with methods defined by a context manager.',
    )


def test_offline_question_searches_and_quotes_with_citation(users, workspaces, offline, with_topic, converse):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    run, events = converse(thread, users["alice"], "How does the with statement work?")

    assert run.status == Run.Status.COMPLETED
    assert types(events)[0] == "run.started"
    assert types(events)[-1] == "run.completed"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    started = next(e for e in events if e["type"] == "tool.started")
    assert started["name"] == "search_knowledge"
    completed = next(e for e in events if e["type"] == "tool.completed")
    assert completed["status"] == "succeeded" and completed["is_error"] is False
    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert "wrap the execution of a block" in final.content
    assert final.content == joined_text(events)
    assert final.status == "complete"
    assert final.citations[0]["item_id"] == str(with_topic.pk)
    call = ToolCall.objects.get(run=run)
    # Scope arguments are pinned to the run's own workspace, thread and user.
    assert call.arguments["workspace_id"] == workspaces["demo"].pk
    assert call.arguments["user_id"] == users["alice"].pk
    assert call.status == ToolCall.Status.SUCCEEDED


def test_remember_saves_only_when_thread_allows_model_saves(users, workspaces, offline, converse):
    closed = make_thread(users["alice"], workspaces["demo"], offline)
    run, events = converse(closed, users["alice"], "remember: the VPN needs MFA since May")
    assert "tool.started" not in types(events)
    assert not KnowledgeItem.objects.exists()
    assert "model saves are off" in joined_text(events)

    open_ = make_thread(users["alice"], workspaces["demo"], offline, allow_model_save=True)
    run, events = converse(open_, users["alice"], "remember: the VPN needs MFA since May")
    saved = next(e for e in events if e["type"] == "knowledge.saved")
    item = KnowledgeItem.objects.get(pk=saved["item_id"])
    assert item.content == "the VPN needs MFA since May"
    assert item.workspace == workspaces["demo"] and item.owner == users["alice"]
    changed = next(e for e in events if e["type"] == "knowledge.changed")
    assert changed["item_ids"] == [str(item.pk)]
    # Saved items are shared with the workspace, and the answer says so (a person expecting a
    # private memory would not know).
    assert f"every member of {workspaces['demo'].name} can read it" in joined_text(events)


def test_thread_history_continues_after_a_turn(users, workspaces, offline, with_topic, converse):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    converse(thread, users["alice"], "How does the with statement work?")
    run, events = converse(thread, users["alice"], "context manager")
    assert run.status == Run.Status.COMPLETED
    roles = list(Message.objects.filter(thread=thread).values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
