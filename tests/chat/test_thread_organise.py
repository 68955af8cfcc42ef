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
