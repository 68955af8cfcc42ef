"""The knowledge item tools through the real loop: offer by role, scope, approvals."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import ToolCall
from agents.pipeline import policy_views, tool_pipeline, tool_policies_sync
from chat.models import Message
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks

pytestmark = pytest.mark.django_db(transaction=True)

KNOWLEDGE_TOOLS = {"search_knowledge", "get_knowledge_item", "list_knowledge_tags", "save_to_knowledge",
                   "update_knowledge_item", "delete_knowledge_item", "show_capabilities"}


@pytest.fixture
def policies(roles):
    tool_policies_sync()
    return policy_views()


@pytest.mark.parametrize(("role", "allow_save", "expected"), [
    ("viewer", False, {"search_knowledge", "get_knowledge_item", "list_knowledge_tags", "show_capabilities"}),
    ("viewer", True, {"search_knowledge", "get_knowledge_item", "list_knowledge_tags", "show_capabilities"}),
    ("member", False, {"search_knowledge", "get_knowledge_item", "list_knowledge_tags", "show_capabilities",
                       "update_knowledge_item", "delete_knowledge_item"}),
    ("member", True, KNOWLEDGE_TOOLS),
    ("admin", True, KNOWLEDGE_TOOLS),
])
def test_offered_tools_for_the_seeded_roles(policies, role, allow_save, expected):
    offer = tool_pipeline(role_name=role, object_type=None, allow_model_save=allow_save, policies=policies)
    assert set(offer.names) & KNOWLEDGE_TOOLS == expected


@pytest.fixture
def note(users, workspaces):
    return knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="VPN setup",
                                 content="Use the corporate VPN profile.", tags=["vpn", "it"])


def turn(fake, converse, thread, user, name, args, answer="Done."):
    fake.script(tool_call_chunks([("c1", name, json.dumps(args))]), text_chunks(answer))
    return converse(thread, user, "do it")


def test_get_and_list_tags_stay_in_the_runs_workspace(policies, users, workspaces, openai_provider, fake_openai, converse, note):
    foreign = knowledge_item_create(workspace=workspaces["other"], owner=users["dave"], title="Other", content="x")
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    turn(fake_openai, converse, thread, users["alice"], "get_knowledge_item", {"item_id": str(note.pk)})
    assert ToolCall.objects.get(call_id="c1").result["content"] == "Use the corporate VPN profile."
    thread2 = make_thread(users["alice"], workspaces["demo"], openai_provider)
    turn(fake_openai, converse, thread2, users["alice"], "get_knowledge_item", {"item_id": str(foreign.pk)})
    assert "No knowledge item" in Message.objects.get(thread=thread2, role="tool").content
    thread3 = make_thread(users["alice"], workspaces["demo"], openai_provider)
    turn(fake_openai, converse, thread3, users["alice"], "list_knowledge_tags", {})
    tags = {t["tag"]: t["items"] for t in ToolCall.objects.filter(run__thread=thread3).get().result["tags"]}
    assert tags == {"vpn": 1, "it": 1}


def test_update_waits_for_approval_then_changes_the_item(policies, users, workspaces, openai_provider, fake_openai, sink_for, note, api_for):
    from agents.services import run_create

    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(tool_call_chunks([("c1", "update_knowledge_item", json.dumps({"item_id": str(note.pk), "tags": ["vpn", "security"]}))]),
                       text_chunks("Updated."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="retag it")
    request = sink.until_parked(created.run.pk)[-1]
    assert request["risk_level"] == "guarded"
    note.refresh_from_db()
    assert note.tags == ["vpn", "it"]
    client = api_for(users["alice"])
    assert client.post(f"/api/v1/tool-calls/{request['tool_call_id']}/decision/", {"decision": "approve"},
                       format="json").status_code == 200
    rest = sink.until_terminal(created.run.pk)
    note.refresh_from_db()
    assert note.tags == ["vpn", "security"]
    assert next(e for e in rest if e["type"] == "knowledge.changed")["item_ids"] == [str(note.pk)]


def test_viewer_asking_to_delete_gets_a_permission_denial(policies, users, workspaces, openai_provider, fake_openai, converse, note):
    thread = make_thread(users["carol"], workspaces["demo"], openai_provider)
    run, events = turn(fake_openai, converse, thread, users["carol"], "delete_knowledge_item", {"item_id": str(note.pk)})
    denied = next(e for e in events if e["type"] == "permission.denied")
    assert denied["tool"] == "delete_knowledge_item" and denied["required_role"] == "member"
    assert "approval.requested" not in types(events)
    assert KnowledgeItem.objects.filter(pk=note.pk).exists()


def test_delete_is_dangerous_with_a_server_countdown(policies, users, workspaces, openai_provider, fake_openai, sink_for, note, api_for):
    from agents.services import run_create

    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(tool_call_chunks([("c1", "delete_knowledge_item", json.dumps({"item_id": str(note.pk)}))]),
                       text_chunks("Deleted."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="delete it")
    request = sink.until_parked(created.run.pk)[-1]
    assert request["dangerous"] is True and request["countdown_s"] == 10
    client = api_for(users["alice"])
    url = f"/api/v1/tool-calls/{request['tool_call_id']}/decision/"
    assert client.post(url, {"decision": "approve"}, format="json").status_code == 409
    ToolCall.objects.filter(pk=request["tool_call_id"]).update(requested_at=timezone.now() - timedelta(seconds=10))
    assert client.post(url, {"decision": "approve"}, format="json").status_code == 200
    sink.until_terminal(created.run.pk)
    assert not KnowledgeItem.objects.filter(pk=note.pk).exists()


def test_cards_name_the_item_by_title_but_never_a_private_one(policies, users, workspaces, openai_provider, fake_openai, sink_for, note, api_for):
    """The approval card, its tool row and the inbox name an item by its title (issue 54), with
    the requester's access — and only a title everyone who may see the call may see: a private
    item (its thread is open to workspace admins, the inbox to approvers) keeps its id."""
    from agents.services import run_create

    secret = knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="Alice's salary notes",
                                   content="x", is_private=True)
    shown = {}
    for item in (note, secret):
        thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
        fake_openai.script(tool_call_chunks([("c1", "update_knowledge_item",
                                              json.dumps({"item_id": str(item.pk), "tags": ["x"]}))]),
                           text_chunks("Left as it is."))
        sink = sink_for(thread.pk)
        created = run_create(thread=thread, user=users["alice"], content="retag it")
        events = sink.until_parked(created.run.pk)
        started = next(e for e in events if e["type"] == "tool.started")
        request = events[-1]
        inbox = api_for(users["admin"]).get("/api/v1/tool-calls/?status=awaiting_approval").json()["results"]
        row = next(r for r in inbox if r["id"] == request["tool_call_id"])
        messages = api_for(users["alice"]).get(f"/api/v1/threads/{thread.pk}/messages/").json()
        call = next(c for m in messages for c in m.get("tool_calls") or [])
        shown[item.title] = {started["arguments_summary"], request["arguments_summary"], row["arguments_summary"],
                             call["arguments_summary"], json.dumps(row["arguments_shown"])}
        assert row["arguments"] == {"item_id": str(item.pk), "tags": ["x"]}  # the machine's view keeps the id
        api_for(users["alice"]).post(f"/api/v1/tool-calls/{request['tool_call_id']}/decision/", {"decision": "deny"},
                                     format="json")
        sink.until_terminal(created.run.pk)
    assert shown["VPN setup"] == {"item='VPN setup', tags=[\"x\"]", '{"item": "VPN setup", "tags": ["x"]}'}
    assert shown["Alice's salary notes"] == {f"item_id='{secret.pk}', tags=[\"x\"]",
                                             f'{{"item_id": "{secret.pk}", "tags": ["x"]}}'}
