"""Knowledge pages (list, search, item view, create/edit/delete, "Ask about this"), the live
feed of ``knowledge.changed``, and model-driven saves."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient, Client

from agents.tools import ToolContext, ToolError
from chat.models import Thread
from chatplatform.loops import run_coroutine
from knowledge.events import knowledge_group
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create, knowledge_item_update
from knowledge.tools import save_to_knowledge
from tests.conftest import make_thread, types

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def items(workspaces, users):
    demo = workspaces["demo"]
    return {
        "plain": knowledge_item_create(workspace=demo, owner=users["alice"], title="Coffee machine",
                                       content="Descale the **coffee** machine monthly.\n\n<script>alert(1)</script>",
                                       type="howto", tags=["office"]),
        "hidden": knowledge_item_create(workspace=demo, owner=users["alice"], title="Coffee supplier",
                                        content="Order coffee beans from the usual supplier.", is_hidden=True),
    }


def test_list_search_and_filters(users, items):
    page = browser(users["bob"])
    html = page.get("/knowledge/").content.decode()
    assert "Coffee machine" in html and "Coffee supplier" not in html
    assert "Coffee supplier" in page.get("/knowledge/?hidden=1").content.decode()
    found = page.get("/knowledge/?q=descale").content.decode()
    assert "Coffee machine" in found
    assert "Nothing in the knowledge base matches" in page.get("/knowledge/?q=zzzz").content.decode()
    assert "Coffee machine" not in page.get("/knowledge/?type=fact").content.decode()
    assert "Coffee machine" in page.get("/knowledge/?tag=office").content.decode()
    partial = page.get("/knowledge/?q=coffee&partial=1").content.decode()
    assert "<html" not in partial and "Coffee machine" in partial


def test_item_page_renders_sanitised_markdown(users, items):
    html = browser(users["bob"]).get(f"/knowledge/{items['plain'].pk}/").content.decode()
    assert "<strong>coffee</strong>" in html
    assert "<script>alert(1)</script>" not in html
    assert 'id="kb-ask"' in html and 'id="kb-edit"' not in html  # bob may not edit alice's item
    assert 'id="kb-edit"' in browser(users["admin"]).get(f"/knowledge/{items['plain'].pk}/").content.decode()


def test_create_edit_delete_through_the_pages(users, workspaces):
    page = browser(users["alice"])
    response = page.post("/knowledge/new/", {"workspace": "demo", "title": "Parking", "content": "Level -2 is ours.",
                                             "type": "fact", "tags": "office, Car"})
    item = KnowledgeItem.objects.get(title="Parking")
    assert response.status_code == 302 and response["Location"] == f"/knowledge/{item.pk}/"
    assert item.tags == ["office", "car"] and item.owner == users["alice"]
    response = page.post(f"/knowledge/{item.pk}/edit/", {"title": "Parking garage", "content": "Level -2 is ours.",
                                                         "type": "fact", "tags": "office"})
    assert response.status_code == 302
    item.refresh_from_db()
    assert (item.title, item.tags) == ("Parking garage", ["office"])
    assert browser(users["bob"]).post(f"/knowledge/{item.pk}/delete/").status_code == 403
    assert page.post(f"/knowledge/{item.pk}/delete/").status_code == 302
    assert not KnowledgeItem.objects.filter(pk=item.pk).exists()


def test_failed_create_keeps_the_input(users):
    response = browser(users["alice"]).post("/knowledge/new/", {"workspace": "demo", "title": "Bad type",
                                                                "content": "Keep me", "type": "not valid!"})
    html = response.content.decode()
    assert response.status_code == 200 and "type must be" in html and "Keep me" in html
    assert not KnowledgeItem.objects.exists()


def test_viewer_cannot_open_the_create_page(users):
    assert browser(users["carol"]).get("/knowledge/new/").status_code == 403


def test_ask_about_this_opens_a_thread_naming_the_item(users, items, offline):
    response = browser(users["bob"]).post(f"/knowledge/{items['plain'].pk}/ask/")
    thread = Thread.objects.get(owner=users["bob"])
    assert response.status_code == 302 and response["Location"] == f"/chat/{thread.pk}/"
    assert thread.ui_context["objectType"] == "knowledge_item"
    assert thread.ui_context["objectId"] == str(items["plain"].pk)
    assert thread.ui_context["objectName"] == "Coffee machine"
    assert thread.provider == offline and thread.title == "About: Coffee machine"


def test_chat_page_links_the_knowledge_base_and_loads_the_save_action(users, workspaces, offline):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    html = browser(users["alice"]).get(f"/chat/{thread.pk}/").content.decode()
    assert 'href="/knowledge/"' in html and "knowledge/save.js" in html


# --- model-driven saves -------------------------------------------------------------------
def tool_ctx(user, workspace) -> ToolContext:
    return ToolContext(workspace_id=workspace.pk, thread_id="t", user_id=user.pk, run_id="r", role="member",
                       allow_model_save=True)


def test_save_tool_refuses_viewers_and_bad_arguments(users, workspaces):
    with pytest.raises(ToolError, match="can read the knowledge base but not save"):
        save_to_knowledge(ctx=tool_ctx(users["carol"], workspaces["demo"]), title="x", content="y")
    with pytest.raises(ToolError, match="type must be"):
        save_to_knowledge(ctx=tool_ctx(users["alice"], workspaces["demo"]), title="x", content="y", type="bad type!")
    out = save_to_knowledge(ctx=tool_ctx(users["alice"], workspaces["demo"]), title="Wifi", content="Password rotates",
                            tags=["Office"])
    item = KnowledgeItem.objects.get(pk=out.result["item_id"])
    assert item.owner == users["alice"] and item.tags == ["office"]
    assert out.knowledge_saved == [(str(item.pk), "Wifi")] and out.changed_item_ids == [str(item.pk)]


@pytest.mark.django_db(transaction=True)
def test_model_save_in_a_turn_emits_saved_and_changed(users, workspaces, offline, converse):
    thread = make_thread(users["alice"], workspaces["demo"], offline, allow_model_save=True)
    run, events = converse(thread, users["alice"], "remember: the printer is on floor 3")
    saved = next(e for e in events if e["type"] == "knowledge.saved")
    changed = next(e for e in events if e["type"] == "knowledge.changed")
    assert changed["item_ids"] == [saved["item_id"]]
    assert types(events)[-1] == "run.completed"


# --- the live feed ------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_committed_changes_are_published_to_the_workspace_group(users, workspaces):
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = run_coroutine(layer.new_channel())
    run_coroutine(layer.group_add(knowledge_group(workspaces["demo"].pk), channel))
    try:
        item = knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="t", content="c")
        message = run_coroutine(asyncio.wait_for(layer.receive(channel), 5))
        assert message["event"] == {"type": "knowledge.changed", "item_ids": [str(item.pk)],
                                    "workspace_id": workspaces["demo"].pk}
        knowledge_item_update(item=item, title="t2")
        assert run_coroutine(asyncio.wait_for(layer.receive(channel), 5))["event"]["item_ids"] == [str(item.pk)]
    finally:
        run_coroutine(layer.group_discard(knowledge_group(workspaces["demo"].pk), channel))


@pytest.mark.django_db(transaction=True)
def test_feed_streams_knowledge_changed_to_the_pages(users, workspaces, settings):
    settings.KNOWLEDGE_EVENTS_MAX_S = 3.0
    settings.SSE_KEEPALIVE_S = 0.5

    async def go():
        client = AsyncClient()
        await sync_to_async(client.force_login)(users["bob"])
        response = await client.get("/knowledge/events/")
        assert response["Content-Type"] == "text/event-stream"
        stream = response.streaming_content.__aiter__()
        assert "connected" in (await stream.__anext__()).decode()

        async def change():
            await asyncio.sleep(0.2)
            return await sync_to_async(knowledge_item_create)(workspace=workspaces["demo"], owner=users["alice"],
                                                              title="Fresh", content="Brand new.")

        creating = asyncio.ensure_future(change())
        while True:
            chunk = (await asyncio.wait_for(stream.__anext__(), 5)).decode()
            if chunk.startswith("event: knowledge.changed"):
                break
        item = await creating
        await stream.aclose()
        await sync_to_async(connections.close_all)()  # the executor thread's connection
        return chunk, item

    from chatplatform.loops import bind_server_loop

    async def main():
        bind_server_loop(asyncio.get_running_loop())  # as daphne does: publish on the serving loop
        try:
            return await go()
        finally:
            bind_server_loop(None)

    chunk, item = asyncio.run(main())
    data = json.loads(chunk.split("data: ", 1)[1])
    assert data["type"] == "knowledge.changed" and data["item_ids"] == [str(item.pk)]


def test_feed_requires_a_session(db):
    async def go():
        return await AsyncClient().get("/knowledge/events/")

    assert asyncio.run(go()).status_code == 401
