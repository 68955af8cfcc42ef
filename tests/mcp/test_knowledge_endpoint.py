"""The knowledge base as an MCP server (``/mcp/``), driven by the official ``mcp`` client
against the real ASGI application served on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
import uvicorn
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from rest_framework.authtoken.models import Token

from agents.models import AuditEvent
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create
from tests.mcp.conftest import free_port

pytestmark = pytest.mark.django_db(transaction=True)

READ_TOOLS = {"search_knowledge", "get_knowledge_item", "list_knowledge_tags"}
WRITE_TOOLS = {"save_knowledge_item", "update_knowledge_item"}


@pytest.fixture(scope="module")
def server_url():
    from config.asgi import application

    port = free_port()
    config = uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp/"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def corpus(users, workspaces):
    demo, other = workspaces["demo"], workspaces["other"]
    return {
        "public": knowledge_item_create(workspace=demo, owner=users["bob"], title="VPN setup guide",
                                        content="Install the VPN client, then import the zebra profile.",
                                        tags=["vpn", "howto"]),
        "private": knowledge_item_create(workspace=demo, owner=users["bob"], title="Bob's zebra diary",
                                         content="Private zebra notes of bob.", is_private=True, tags=["secret"]),
        "hidden": knowledge_item_create(workspace=demo, owner=users["alice"], title="Zebra archive",
                                        content="Old zebra material kept for the assistant.", is_hidden=True,
                                        tags=["vpn"]),
        "foreign": knowledge_item_create(workspace=other, owner=users["dave"], title="Other team zebra plan",
                                         content="The other team's zebra plan.", tags=["other"]),
    }


def token_for(user) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def mcp(url: str, token: str, steps, scheme: str = "Bearer"):
    """Run ``steps(session)`` in a fresh MCP client session authenticated with ``token``."""

    async def go():
        client = create_mcp_http_client(headers={"Authorization": f"{scheme} {token}"})
        async with client, streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await steps(session)

    return asyncio.run(go())


def tool_names(url, token):
    async def steps(session):
        return {t.name for t in (await session.list_tools()).tools}

    return mcp(url, token, steps)


def call(url, token, name, arguments, scheme="Bearer"):
    """``(is_error, payload)``: the structured result, or the error text."""

    async def steps(session):
        result = await session.call_tool(name, arguments)
        if result.is_error:
            return True, result.content[0].text
        return False, result.structured_content or json.loads(result.content[0].text)

    return mcp(url, token, steps, scheme)


def test_no_token_or_a_bad_one_is_401(server_url, users):
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        request = urllib.request.Request(server_url, method="POST", data=b"{}", headers={
            "Content-Type": "application/json", **headers})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 401
        body = json.loads(err.value.read())
        assert body["error"]["code"] == "not_authenticated" and "Bearer" in body["error"]["message"]
        assert err.value.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_unreachable_database_is_the_json_503(server_url, users, monkeypatch):
    """The token look-up finds no database (PostgreSQL down, its pool empty past
    ``DB_POOL_TIMEOUT_S``): the API's JSON 503 with ``Retry-After``, not a bare text 500 (found
    stopping PostgreSQL from a fresh clone: ``/mcp/`` was the one endpoint that answered 500)."""
    from django.db import OperationalError

    def no_database(key):
        raise OperationalError("couldn't get a connection after 10.00 sec")

    monkeypatch.setattr("chatplatform.credentials.authenticate_key", no_database)  # the one credential look-up
    request = urllib.request.Request(server_url, method="POST", data=b"{}", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {token_for(users['alice'])}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 503 and err.value.headers["Retry-After"] == "5"
    assert json.loads(err.value.read())["error"]["code"] == "service_unavailable"


@pytest.mark.parametrize(("who", "tools"), [("carol", READ_TOOLS), ("alice", READ_TOOLS | WRITE_TOOLS),
                                            ("admin", READ_TOOLS | WRITE_TOOLS)])
def test_tools_per_role(server_url, users, who, tools):
    assert tool_names(server_url, token_for(users[who])) == tools


def test_both_token_schemes(server_url, users, corpus):
    key = token_for(users["alice"])
    for scheme in ("Bearer", "Token"):
        error, out = call(server_url, key, "get_knowledge_item", {"item_id": str(corpus["public"].pk)}, scheme)
        assert not error and out["title"] == "VPN setup guide"


@pytest.mark.parametrize("who", ["alice", "carol", "admin"])
def test_search_has_the_rest_visibility(server_url, users, corpus, who):
    error, out = call(server_url, token_for(users[who]), "search_knowledge", {"query": "zebra", "top_k": 20})
    assert not error
    titles = {r["title"] for r in out["results"]}
    # workspace members see shared and hidden (AI-OK) items; never a colleague's private one
    # nor another workspace's
    assert titles == {"VPN setup guide", "Zebra archive"}


def test_the_owner_finds_their_private_item_and_other_workspaces_stay_out(server_url, users, corpus):
    error, out = call(server_url, token_for(users["bob"]), "search_knowledge", {"query": "zebra", "top_k": 20})
    assert {r["title"] for r in out["results"]} == {"VPN setup guide", "Zebra archive", "Bob's zebra diary"}
    error, out = call(server_url, token_for(users["dave"]), "search_knowledge", {"query": "zebra"})
    assert {r["title"] for r in out["results"]} == {"Other team zebra plan"}


@pytest.mark.parametrize("who", ["alice", "carol", "admin"])
def test_get_item_visibility(server_url, users, corpus, who):
    key = token_for(users[who])
    assert call(server_url, key, "get_knowledge_item", {"item_id": str(corpus["hidden"].pk)})[1]["hidden"] is True
    for hidden_from_them in ("private", "foreign"):
        error, text = call(server_url, key, "get_knowledge_item", {"item_id": str(corpus[hidden_from_them].pk)})
        assert error and f"No knowledge item '{corpus[hidden_from_them].pk}'" in text


@pytest.mark.parametrize("who", ["alice", "carol", "admin"])
def test_list_tags(server_url, users, corpus, who):
    error, out = call(server_url, token_for(users[who]), "list_knowledge_tags", {})
    assert not error and {t["tag"]: t["items"] for t in out["tags"]} == {"vpn": 2, "howto": 1}


def test_save_by_role(server_url, users, workspaces, corpus):
    error, out = call(server_url, token_for(users["alice"]), "save_knowledge_item",
                      {"title": "Printer howto", "content": "Use tray 2.", "tags": ["printer"]})
    assert not error and out["workspace"] == "demo" and out["owner"] == "alice"
    item = KnowledgeItem.objects.get(pk=out["item_id"])
    assert item.owner == users["alice"] and item.workspace == workspaces["demo"]
    # a viewer is not offered the tool, and calling it anyway changes nothing
    error, text = call(server_url, token_for(users["carol"]), "save_knowledge_item",
                       {"title": "Nope", "content": "x"})
    assert error
    assert not KnowledgeItem.objects.filter(title="Nope").exists()
    # dave may write in his own workspace only
    error, text = call(server_url, token_for(users["dave"]), "save_knowledge_item",
                       {"title": "Sneaky", "content": "x", "workspace": "demo"})
    assert error and "No workspace 'demo'" in text
    assert not KnowledgeItem.objects.filter(title="Sneaky").exists()


def test_update_by_role(server_url, users, corpus):
    public = str(corpus["public"].pk)
    error, text = call(server_url, token_for(users["alice"]), "update_knowledge_item",
                       {"item_id": public, "title": "Hijacked"})
    assert error and "Only the item's owner or a workspace admin can change it." in text
    error, out = call(server_url, token_for(users["admin"]), "update_knowledge_item",
                      {"item_id": public, "title": "VPN setup guide (2026)"})
    assert not error and out["title"] == "VPN setup guide (2026)"
    error, out = call(server_url, token_for(users["bob"]), "update_knowledge_item", {"item_id": public, "hidden": True})
    assert not error and out["hidden"] is True
    error, text = call(server_url, token_for(users["admin"]), "update_knowledge_item",
                       {"item_id": str(corpus["private"].pk), "title": "x"})
    assert error and "No knowledge item" in text  # bob's private item is not even visible to an admin
    assert KnowledgeItem.objects.get(pk=corpus["private"].pk).title == "Bob's zebra diary"


def test_every_call_is_audited_with_the_caller(server_url, users, corpus):
    call(server_url, token_for(users["carol"]), "get_knowledge_item", {"item_id": str(corpus["public"].pk)})
    call(server_url, token_for(users["carol"]), "get_knowledge_item", {"item_id": str(corpus["private"].pk)})
    rows = list(AuditEvent.objects.filter(kind="mcp_call").order_by("created_at", "pk"))
    assert [(r.user.username, r.tool_name, r.detail["ok"]) for r in rows] == [
        ("carol", "get_knowledge_item", True), ("carol", "get_knowledge_item", False)]
    assert rows[0].workspace_id == corpus["public"].workspace_id
    assert rows[1].detail["error"].startswith("No knowledge item")
