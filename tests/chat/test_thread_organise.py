"""Pin, archive and export a chat (REST)."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from tests.conftest import make_thread

pytestmark = pytest.mark.django_db(transaction=True)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_pinned_chats_come_first_and_archived_ones_leave_the_list(users, workspaces, offline):
    alice = users["alice"]
    older = make_thread(alice, workspaces["demo"], offline, title="older")
    newer = make_thread(alice, workspaces["demo"], offline, title="newer")
    client = api(alice)
    assert [t["title"] for t in client.get("/api/v1/threads/").json()["results"]] == ["newer", "older"]
    assert client.patch(f"/api/v1/threads/{older.pk}/", {"pinned": True}, format="json").json()["pinned"] is True
    assert [t["title"] for t in client.get("/api/v1/threads/").json()["results"]] == ["older", "newer"]
    assert client.patch(f"/api/v1/threads/{newer.pk}/", {"archived": True}, format="json").status_code == 200
    assert [t["title"] for t in client.get("/api/v1/threads/").json()["results"]] == ["older"]
    assert [t["title"] for t in client.get("/api/v1/threads/?archived=true").json()["results"]] == ["newer"]
    assert {t["title"] for t in client.get("/api/v1/threads/?archived=all").json()["results"]} == {"older", "newer"}
    assert api(users["bob"]).patch(f"/api/v1/threads/{older.pk}/", {"pinned": False}, format="json").status_code == 404


def test_export_as_markdown_and_json(users, workspaces, offline, converse):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], offline, title="With <b>statement</b>")
    converse(thread, alice, "How does the with statement work?")
    client = api(alice)
    md = client.get(f"/api/v1/threads/{thread.pk}/export/?as=markdown")
    assert md.status_code == 200 and md["Content-Type"].startswith("text/markdown")
    assert md["Content-Disposition"] == f'attachment; filename="chat-{thread.pk}.md"'
    text = md.content.decode()
    assert text.startswith("# With <b>statement</b>\n")  # Markdown source, not HTML: the reader escapes it
    assert "How does the with statement work?" in text
    assert "- tool `search_knowledge`" in text and ": succeeded" in text
    data = json.loads(client.get(f"/api/v1/threads/{thread.pk}/export/?as=json").content)
    assert data["format"] == "chatplatform.thread" and data["thread"]["id"] == str(thread.pk)
    roles = [m["role"] for m in data["messages"]]
    assert roles[0] == "user" and "assistant" in roles and "tool" in roles
    assert data["leaf_id"] == data["messages"][-1]["id"]
    assert all("content_html" not in m for m in data["messages"])
    assert data["messages"][1]["parent_id"] == data["messages"][0]["id"]
    bad = client.get(f"/api/v1/threads/{thread.pk}/export/?as=pdf")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid"


def test_cited_sources_lists_cited_items_once_and_counts_the_rest():
    from chat.export import cited_sources

    citations = [
        {"n": 1, "item_id": "a", "title": "The with statement"},
        {"n": 2, "item_id": "b", "title": "Coroutines"},
        {"n": 3, "item_id": "a", "title": "The with statement"},
        {"n": 4, "item_id": "c", "title": "Generators"},
        {"n": 5, "item_id": "d", "title": "Decorators"},
    ]
    assert cited_sources(citations, "It calls __exit__ [3], see [1]. [9] is no source.") == (
        [("The with statement", [1, 3])], 3)
    assert cited_sources(citations, "Hello!") == ([], 4)  # a greeting cites nothing
    assert cited_sources([], "[1]") == ([], 0)


def test_the_markdown_export_lists_only_cited_sources_like_the_page(users, workspaces, offline, converse):
    from agents.models import Run
    from chat.models import Message

    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], offline, title="Quiet sources")
    converse(thread, alice, "How does the with statement work?")
    answer = Message.objects.filter(thread=thread, role="assistant").exclude(content="").last()
    answer.citations = [{"n": 1, "item_id": "i1", "title": "Cited item"},
                        {"n": 2, "item_id": "i2", "title": "Only retrieved"},
                        {"n": 3, "item_id": "i3", "title": "Also only retrieved"}]
    answer.content = "Use a context manager [1]."
    answer.save(update_fields=["citations", "content"])
    assert Run.objects.filter(thread=thread).exists()
    text = api(alice).get(f"/api/v1/threads/{thread.pk}/export/?as=markdown").content.decode()
    assert "Sources:\n\n- [1] Cited item\n" in text
    assert "Only retrieved" not in text and "Also only retrieved" not in text
    assert "*2 more retrieved, not cited*" in text
