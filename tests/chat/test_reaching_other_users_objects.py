"""shared/cases/platform/04: objects looked up by id are always scoped to the caller.

alice owns a thread, a run waiting for approval and a private knowledge item; bob (same
workspace), dave (other workspace) and erin (removed from alice's workspace) try everything.
Every REST call is a 404, the websocket is refused, the approval is not executed, and
nothing changes.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient
from rest_framework.authtoken.models import Token

from agents.models import Run, ToolCall, ToolPolicy
from agents.services import run_create
from chat.models import Membership, Message, Thread
from config.asgi import application
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create
from tests.conftest import make_thread
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call, scoped_toolbox

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scene(users, workspaces, roles, openai_provider, fake_openai, sink_for, django_user_model):
    box, scope = scoped_toolbox()
    with scope:
        note = ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="always")
        note.allowed_roles.set([roles["member"], roles["admin"]])  # write tools: only roles named
        erin = django_user_model.objects.create_user(username="erin", password="pw-erin")
        Membership.objects.create(user=erin, workspace=workspaces["demo"], role=roles["member"])
        thread = make_thread(users["alice"], workspaces["demo"], openai_provider, title="alice's plans")
        item = knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="alice private",
                                     content="salary notes", is_private=True)
        fake_openai.script(tool_call_chunks([call("c1", "note_write", {"text": "x"})]), text_chunks("ok"))
        sink = sink_for(thread.pk)
        created = run_create(thread=thread, user=users["alice"], content="write it")
        sink.until_parked(created.run.pk)
        Membership.objects.filter(user=erin).delete()  # erin is removed from the workspace
        yield {"thread": thread, "run": created.run, "item": item, "box": box,
               "tool_call": ToolCall.objects.get(call_id="c1"), "intruders": [users["bob"], users["dave"], erin]}


def snapshot(scene):
    thread = Thread.objects.get(pk=scene["thread"].pk)
    item = KnowledgeItem.objects.get(pk=scene["item"].pk)
    return (thread.title, Message.objects.filter(thread=thread).count(), Run.objects.filter(thread=thread).count(),
            ToolCall.objects.get(pk=scene["tool_call"].pk).status, item.title, item.content)


def test_every_rest_call_is_a_404_and_nothing_changes(scene, api_for):
    before = snapshot(scene)
    t, r, i, tc = scene["thread"].pk, scene["run"].pk, scene["item"].pk, scene["tool_call"].pk
    for intruder in scene["intruders"]:
        client = api_for(intruder)
        calls = [
            client.get(f"/api/v1/threads/{t}/"),
            client.get(f"/api/v1/threads/{t}/messages/"),
            client.post(f"/api/v1/threads/{t}/runs/", {"content": "hi"}, format="json"),
            client.patch(f"/api/v1/threads/{t}/", {"title": "pwned"}, format="json"),
            client.post(f"/api/v1/threads/{t}/duplicate/"),
            client.delete(f"/api/v1/threads/{t}/"),
            client.get(f"/api/v1/runs/{r}/"),
            client.post(f"/api/v1/runs/{r}/cancel/"),
            client.post(f"/api/v1/tool-calls/{tc}/decision/", {"decision": "approve"}, format="json"),
            client.get(f"/api/v1/knowledge/items/{i}/"),
            client.patch(f"/api/v1/knowledge/items/{i}/", {"title": "pwned"}, format="json"),
            client.delete(f"/api/v1/knowledge/items/{i}/"),
        ]
        assert [c.status_code for c in calls] == [404] * len(calls), intruder.username
        for response in calls:
            assert "alice" not in response.content.decode()  # existence and data never revealed
        assert client.get("/api/v1/tool-calls/?status=awaiting_approval").json()["results"] == []
        assert client.get("/api/v1/threads/").json()["results"] == []
    assert snapshot(scene) == before
    assert scene["box"].calls == []


def test_sse_and_websocket_are_refused(scene):
    keys = [Token.objects.get_or_create(user=u)[0].key for u in scene["intruders"]]
    thread_id, run_id = scene["thread"].pk, scene["run"].pk

    async def go():
        out = []
        for key in keys:
            response = await AsyncClient().get(f"/api/v1/runs/{run_id}/events/", headers={"Authorization": f"Token {key}"})
            out.append(response.status_code)
            comm = WebsocketCommunicator(application, f"/ws/threads/{thread_id}/",
                                         headers=[(b"authorization", f"Token {key}".encode())])
            await comm.connect(timeout=5)
            out.append((await comm.receive_output(timeout=5))["code"])
            await comm.disconnect()
        return out

    assert asyncio.run(go()) == [404, 4404] * len(keys)


def test_a_socket_opened_before_removal_gets_no_further_events(scene, users):
    """erin-like case for a live socket: bob is removed from the workspace while connected to
    his own thread; the next run's events are not delivered and the socket closes."""
    from agents.models import Provider

    offline = Provider.objects.create(slug="offline-04", name="Offline", kind="offline", default_model="rule-based")
    bob_thread = make_thread(users["bob"], scene["thread"].workspace, offline)
    key = Token.objects.get_or_create(user=users["bob"])[0].key

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/threads/{bob_thread.pk}/",
                                     headers=[(b"authorization", f"Token {key}".encode())])
        connected, _ = await comm.connect(timeout=5)
        assert connected
        from asgiref.sync import sync_to_async

        await sync_to_async(Membership.objects.filter(user=users["bob"]).delete)()
        # A run in that thread (e.g. queued before the removal) must not reach him.
        await sync_to_async(lambda: run_create(thread=bob_thread, user=users["bob"], content="hello"))()
        first = await comm.receive_output(timeout=10)
        await comm.disconnect()
        return first

    first = asyncio.run(go())
    assert first == {"type": "websocket.close", "code": 4403}
    assert json.dumps(first).count("text.delta") == 0
