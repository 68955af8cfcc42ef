"""Workspace assistants (``assistants`` app): the REST API's doors and refusals, picking one
for a chat, and a run under one — its instructions in the system prompt, its tools narrowed by
the caller's role and its creator's role now, its knowledge scope, a disabled one refused."""

from __future__ import annotations

import pytest

from agents.models import LLMModel, Role, ToolPolicy
from agents.presets import preset_for_thread
from assistants.models import Assistant
from chat.models import Membership, Thread
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create
from tests.conftest import make_thread
from tests.scripted import says

pytestmark = pytest.mark.django_db


def create(api, **body):
    body = {"workspace": "demo", "name": "Helper", "provider": "offline", **body}
    return api.post("/api/v1/assistants/", body, format="json")


@pytest.fixture
def alice_api(api_for, users, offline):
    return api_for(users["alice"])


def test_create_list_update_delete(alice_api, api_for, users):
    made = create(alice_api, instructions="Answer in haiku.", tools=["search_knowledge"],
                  starter_prompts=["  What is  new? ", ""], visibility="workspace")
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["name"], body["provider"], body["model"], body["tools"], body["starter_prompts"]) == \
        ("Helper", "offline", "", ["search_knowledge"], ["What is new?"])
    assert body["model_id"] == f"assistant:{body['id']}" and body["can_edit"] is True
    # shared: bob (same workspace) sees it but may not change it
    bob = api_for(users["bob"])
    assert [a["id"] for a in bob.get("/api/v1/assistants/").json()] == [body["id"]]
    assert bob.patch(f"/api/v1/assistants/{body['id']}/", {"name": "Mine"}, format="json").status_code == 403
    changed = alice_api.patch(f"/api/v1/assistants/{body['id']}/", {"name": "Poet"}, format="json")
    assert changed.status_code == 200 and changed.json()["name"] == "Poet"
    assert alice_api.delete(f"/api/v1/assistants/{body['id']}/").status_code == 204
    assert not Assistant.objects.exists()


def test_other_workspace_and_private_assistants_are_404(alice_api, api_for, users):
    private = create(alice_api).json()
    for who in ("bob", "dave"):  # bob: same workspace, but private; dave: another workspace
        api = api_for(users[who])
        assert api.get(f"/api/v1/assistants/{private['id']}/").status_code == 404
        assert api.get("/api/v1/assistants/").json() == []
    shared = create(alice_api, name="Shared", visibility="workspace").json()
    dave = api_for(users["dave"])
    assert dave.get(f"/api/v1/assistants/{shared['id']}/").status_code == 404
    assert dave.delete(f"/api/v1/assistants/{shared['id']}/").status_code == 404
    assert alice_api.get("/api/v1/assistants/not-a-uuid/").status_code == 404


def test_bad_input_is_a_400_naming_the_field(alice_api):
    response = create(alice_api, name="  ")
    assert response.status_code == 400 and "name" in response.json()["error"]["message"]
    response = create(alice_api, starter_prompts=["a"] * 5)
    assert response.status_code == 400 and "starter_prompts" in response.json()["error"]["message"]
    response = create(alice_api, provider="nope")
    assert response.status_code == 400 and "provider" in response.json()["error"]["message"]
    response = create(alice_api, knowledge_items=["3f2b7c59-0000-4000-8000-000000000000"])
    assert response.status_code == 400 and "knowledge_items" in response.json()["error"]["message"]
    # Bidirectional overrides and isolates disguise what other members read ("Helper" + U+202E
    # + "gpj.exe" shows as "Helperexe.jpg"), as in folder and tag names.
    for field, value in (("name", "Helper\u202egpj.exe"), ("description", "Reads \u2067files"),
                         ("starter_prompts", ["Hi\u202d there"]), ("knowledge_tags", ["a\u2066b"])):
        response = create(alice_api, **{field: value})
        assert response.status_code == 400 and response.json()["error"]["message"].startswith(f"{field}: "), field
    made = create(alice_api, visibility="workspace").json()
    response = alice_api.patch(f"/api/v1/assistants/{made['id']}/", {"name": "Evil\u202e"}, format="json")
    assert response.status_code == 400 and Assistant.objects.get(pk=made["id"]).name == "Helper"
    Assistant.objects.all().delete()
    assert not Assistant.objects.exists()


def test_a_tool_outside_the_creators_role_is_refused_by_name(api_for, users, offline):
    carol = api_for(users["carol"])  # a viewer: write tools are not hers
    response = create(carol, tools=["search_knowledge", "save_to_knowledge"])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tool_not_allowed"
    assert "'save_to_knowledge'" in response.json()["error"]["message"]
    assert create(carol, tools=["bogus_tool"]).json()["error"]["code"] == "unknown_tool"
    assert create(carol, tools=["search_knowledge"]).status_code == 201


def test_a_model_the_creator_may_not_use_is_refused(alice_api, offline, roles):
    row = LLMModel.objects.create(provider=offline, name="admins-only", enabled=True)
    row.allowed_roles.set([roles["admin"]])
    response = create(alice_api, model="admins-only")
    assert response.status_code == 400 and response.json()["error"]["code"] == "model_not_allowed"


def test_feature_and_disable_are_a_workspace_admins(alice_api, api_for, users):
    made = create(alice_api, visibility="workspace").json()
    url = f"/api/v1/assistants/{made['id']}/moderate/"
    assert alice_api.post(url, {"featured": True}, format="json").status_code == 403
    admin = api_for(users["admin"])
    assert (made["can_moderate"], admin.get(f"/api/v1/assistants/{made['id']}/").json()["can_moderate"]) == \
        (False, True)
    response = admin.post(url, {"featured": True, "disabled": True}, format="json")
    assert response.status_code == 200 and (response.json()["featured"], response.json()["disabled"]) == (True, True)
    # the picker leaves a disabled one out; the list keeps it (marked) for its owner
    choices = alice_api.get("/api/v1/models/?workspace=demo").json()
    assert choices["assistants"] == []
    assert [a["disabled"] for a in alice_api.get("/api/v1/assistants/").json()] == [True]


def test_picking_an_assistant_sets_its_model_and_a_plain_model_leaves_it(alice_api, api_for, users, offline,
                                                                          workspaces):
    made = create(alice_api, model="rule-based").json()
    choices = alice_api.get("/api/v1/models/?workspace=demo").json()["assistants"]
    assert [(c["id"], c["name"], c["usable"]) for c in choices] == [(f"assistant:{made['id']}", "Helper", True)]
    thread = alice_api.post("/api/v1/threads/", {"workspace": "demo", "assistant": made["id"]}, format="json")
    assert thread.status_code == 201, thread.content
    assert (thread.json()["assistant"], thread.json()["provider"]) == (made["id"], "offline")
    url = f"/api/v1/threads/{thread.json()['id']}/"
    assert alice_api.patch(url, {"provider": "offline", "model": "rule-based"}, format="json").json()["assistant"] is None
    assert alice_api.patch(url, {"assistant": made["id"]}, format="json").json()["assistant"] == made["id"]
    # another user's private assistant, and another workspace's: 404, nothing changed
    bob_private = create(api_for(users["bob"]), name="Bob's").json()
    assert alice_api.patch(url, {"assistant": bob_private["id"]}, format="json").status_code == 404
    dave = api_for(users["dave"])
    other = dave.post("/api/v1/assistants/", {"workspace": "other", "name": "Theirs", "provider": "offline"},
                      format="json").json()
    assert alice_api.patch(url, {"assistant": other["id"]}, format="json").status_code == 404
    assert alice_api.post("/api/v1/threads/", {"workspace": "demo", "assistant": other["id"]},
                          format="json").status_code == 404
    assert Thread.objects.get(pk=thread.json()["id"]).assistant_id is not None


def test_an_assistant_whose_model_the_caller_may_not_use_is_refused_clearly(alice_api, api_for, users, offline,
                                                                             roles):
    LLMModel.objects.create(provider=offline, name="rule-based", enabled=True)
    made = create(alice_api, model="rule-based", visibility="workspace").json()
    row = LLMModel.objects.get(name="rule-based")
    row.allowed_roles.set([roles["member"]])  # carol is a viewer
    carol = api_for(users["carol"])
    response = carol.post("/api/v1/threads/", {"workspace": "demo", "assistant": made["id"]}, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "model_not_allowed"
    assert "Helper" in response.json()["error"]["message"]
    assert not Thread.objects.filter(owner=users["carol"]).exists()


@pytest.mark.django_db(transaction=True)
def test_a_run_uses_the_callers_roles_and_the_creators_roles_now(alice_api, api_for, users, offline, workspaces,
                                                                  roles, scripted_model, converse):
    ToolPolicy.objects.filter(tool_name="save_to_knowledge").delete()
    made = create(alice_api, instructions="Always answer like a pirate.", visibility="workspace",
                  tools=["search_knowledge", "list_knowledge_tags", "save_to_knowledge"]).json()
    assistant = Assistant.objects.get(pk=made["id"])
    # carol (viewer) runs alice's assistant: only what carol may use is offered
    thread = make_thread(users["carol"], workspaces["demo"], offline, assistant=assistant)
    scripted_model.script(says("Arr."))
    run, _ = converse(thread, users["carol"], "hello")
    assert run.status == "completed"
    request = scripted_model.requests[-1]
    assert "Always answer like a pirate." in request.system and 'assistant "Helper"' in request.system
    assert sorted(t.name for t in request.tools) == ["list_knowledge_tags", "search_knowledge"]
    # alice loses her write role: the write tool is gone for every caller, also a member's run
    Membership.objects.filter(user=users["alice"]).update(role=Role.objects.get(name="viewer"))
    bob_thread = make_thread(users["bob"], workspaces["demo"], offline, assistant=assistant)
    preset = preset_for_thread(thread=bob_thread, user=users["bob"])
    assert preset.tools == frozenset({"search_knowledge", "list_knowledge_tags"})
    tools = api_for(users["bob"]).get(f"/api/v1/threads/{bob_thread.pk}/tools/").json()
    assert "save_to_knowledge" not in [t["name"] for t in tools["tools"]]


@pytest.mark.django_db(transaction=True)
def test_a_disabled_assistant_refuses_sends_but_its_chat_can_switch_model(alice_api, api_for, users, offline,
                                                                          workspaces, scripted_model, converse):
    made = create(alice_api).json()
    thread = make_thread(users["alice"], workspaces["demo"], offline, assistant_id=made["id"])
    scripted_model.script(says("First answer."))
    run, _ = converse(thread, users["alice"], "hello")
    assert run.status == "completed"
    Assistant.objects.filter(pk=made["id"]).update(disabled=True)
    url = f"/api/v1/threads/{thread.pk}/"
    refused = alice_api.post(url + "runs/", {"content": "again"}, format="json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "assistant_disabled"
    assert "disabled" in refused.json()["error"]["message"]
    assert len(alice_api.get(url + "messages/").json()) == 2  # the history stays
    assert alice_api.patch(url, {"provider": "offline", "model": "rule-based"}, format="json").status_code == 200
    scripted_model.script(says("Second answer."))
    assert alice_api.post(url + "runs/", {"content": "again"}, format="json").status_code == 202


@pytest.mark.db_backends  # the scope is SQL of each backend (knowledge/search.py)
def test_the_knowledge_scope_narrows_retrieval(alice_api, users, offline, workspaces):
    from knowledge.selectors import knowledge_search

    a = knowledge_item_create(owner=users["alice"], workspace=workspaces["demo"], title="Rocket fuel",
                              content="Rocket fuel is liquid oxygen.", tags=["space"])
    knowledge_item_create(owner=users["alice"], workspace=workspaces["demo"], title="Rocket cake",
                          content="Rocket cake is a sponge cake.", tags=["food"])
    b = knowledge_item_create(owner=users["alice"], workspace=workspaces["demo"], title="Rocket launch",
                              content="Rocket launch at dawn.", tags=[])
    made = create(alice_api, knowledge_tags=["space"], knowledge_items=[str(b.pk)]).json()
    thread = make_thread(users["alice"], workspaces["demo"], offline, assistant_id=made["id"])
    scope = preset_for_thread(thread=thread, user=users["alice"]).knowledge
    hits = knowledge_search(workspace=workspaces["demo"], user=users["alice"], query="rocket", scope=scope)
    assert sorted(h.item_id for h in hits) == sorted([str(a.pk), str(b.pk)])
    assert KnowledgeItem.objects.count() == 3


def test_v1_lists_and_refuses_assistants_like_models(alice_api, api_for, users, offline):
    from chatplatform.errors import ServiceError
    from openai_api.services import completion_start, model_list

    made = create(alice_api, visibility="workspace").json()
    private = create(alice_api, name="Mine").json()
    assert {f"assistant:{made['id']}", f"assistant:{private['id']}"} <= {m["id"] for m in model_list(user=users["alice"])}
    assert f"assistant:{private['id']}" not in {m["id"] for m in model_list(user=users["bob"])}
    assert not [m for m in model_list(user=users["dave"]) if m["id"].startswith("assistant:")]
    body = {"model": f"assistant:{private['id']}", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(ServiceError) as refused:  # another user's private one: as an unknown model
        completion_start(user=users["bob"], body=body)
    assert (refused.value.code, refused.value.status) == ("model_not_found", 404)
    Assistant.objects.filter(pk=made["id"]).update(disabled=True)
    assert f"assistant:{made['id']}" not in {m["id"] for m in model_list(user=users["alice"])}
    with pytest.raises(ServiceError) as refused:
        completion_start(user=users["bob"], body={**body, "model": f"assistant:{made['id']}"})
    assert (refused.value.code, refused.value.status) == ("assistant_disabled", 403)
    assert not Thread.objects.filter(owner=users["bob"]).exists()


def test_show_capabilities_lists_only_the_assistants_tools(alice_api, users, offline, workspaces):
    from agents.builtin_tools import show_capabilities
    from agents.tools import ToolContext

    made = create(alice_api, tools=["show_capabilities", "list_knowledge_tags"]).json()
    assert "id" in made, made
    thread = make_thread(users["alice"], workspaces["demo"], offline, assistant_id=made["id"])
    ctx = ToolContext(workspace_id=workspaces["demo"].pk, thread_id=str(thread.pk), user_id=users["alice"].pk,
                      run_id="r", role="member")
    shown = show_capabilities(ctx=ctx)
    assert sorted(t["name"] for t in shown["available"]) == ["list_knowledge_tags", "show_capabilities"]
    assert {"name": "search_knowledge", "reason": "not one of the assistant's tools"} in shown["unavailable"]


def test_the_admin_lists_features_and_disables(alice_api, client, django_user_model):
    made = create(alice_api).json()
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root")
    client.force_login(root)
    assert "Helper" in client.get("/admin/assistants/assistant/").content.decode()
    client.post("/admin/assistants/assistant/", {"action": "disable", "_selected_action": [made["id"]]})
    assert Assistant.objects.get(pk=made["id"]).disabled is True


def test_the_schema_names_the_assistant_and_share_link_visibility_enums(alice_api):
    """Both choice sets are called "visibility": without a name each got a hashed one
    (``Visibility315Enum``) that changes with the choices, breaking generated clients."""
    schemas = alice_api.get("/api/schema/?format=json").json()["components"]["schemas"]
    assert schemas["AssistantVisibilityEnum"]["enum"] == ["private", "workspace"]
    assert schemas["ShareVisibilityEnum"]["enum"] == ["workspace", "public"]
    assert not [name for name in schemas if name.startswith("Visibility")]
