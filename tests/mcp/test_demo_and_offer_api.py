"""``make demo``'s external server (mcp-server-time) and the thread's offered-tools endpoint."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from chat.models import Thread, Workspace
from mcp_client import sync
from mcp_client.models import MCPServer

pytestmark = pytest.mark.django_db


def test_seed_demo_connects_the_time_server_and_the_chat_offers_its_tools(monkeypatch, django_user_model):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    assert "mcp: time connected; offered tools: convert_time, get_current_time" in out.getvalue()
    server = MCPServer.objects.get(slug="time")
    assert server.enabled and server.health_status == "connected"

    sync.warm_up()  # what the web process does on its first request
    alice = django_user_model.objects.get(username="alice")
    thread = Thread.objects.create(owner=alice, workspace=Workspace.objects.get(slug="demo"))
    client = APIClient()
    client.force_authenticate(alice)
    body = client.get(f"/api/v1/threads/{thread.pk}/tools/").json()
    offered = {t["name"]: t for t in body["tools"]}
    assert offered["get_current_time"]["source"] == "mcp:time"
    assert offered["get_current_time"]["risk"] == "read" and not offered["get_current_time"]["needs_approval"]
    assert "search_knowledge" in offered and body["role"] == "member"
    # another user's thread is a 404
    dave = django_user_model.objects.get(username="dave")
    client.force_authenticate(dave)
    response = client.get(f"/api/v1/threads/{thread.pk}/tools/")
    assert response.status_code == 404 and response.json()["error"]["code"]

    # seeding again keeps the admin's changes
    MCPServer.objects.filter(slug="time").update(allowlist=["get_current_time"])
    call_command("seed_demo", stdout=io.StringIO())
    assert MCPServer.objects.get(slug="time").allowlist == ["get_current_time"]
    sync.reset()
