"""Knowledge REST API: CRUD with the write policy, filters, search parameters, save from a
message (DESIGN §6), the error shape and the schema."""

import pytest
from rest_framework.test import APIClient

from agents.models import Provider
from chat.models import Message
from chat.services import message_create
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create
from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]


@pytest.fixture
def alice_item(workspaces, users):
    return knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="VPN setup",
                                 content="Install the client, then sign in with MFA.", type="howto", tags=["it"])


def test_member_creates_an_item_and_it_is_searchable(users, api_for):
    client = api_for(users["alice"])
    response = client.post("/api/v1/knowledge/items/", {
        "title": "Deploy checklist", "content": "Run migrations before the canary.", "type": "HowTo",
        "tags": ["Ops", " release "], "url": "https://wiki.example.com/deploy",
    }, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["workspace"], body["owner"], body["type"], body["tags"]) == ("demo", "alice", "howto", ["ops", "release"])
    assert body["can_edit"] is True and "<p>" in body["content_html"]
    hits = client.get("/api/v1/knowledge/search/?q=canary migrations").json()["results"]
    assert [h["item_id"] for h in hits] == [body["id"]]
    assert set(hits[0]) == {"item_id", "chunk_id", "title", "type", "snippet", "snippet_html", "score", "workspace_id"}
    assert hits[0]["snippet_html"] == "Run <mark>migrations</mark> before the <mark>canary</mark>."


def test_viewer_reads_but_cannot_write(users, alice_item, api_for):
    carol = api_for(users["carol"])
    assert carol.get(f"/api/v1/knowledge/items/{alice_item.pk}/").status_code == 200
    response = carol.post("/api/v1/knowledge/items/", {"content": "x"}, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert carol.patch(f"/api/v1/knowledge/items/{alice_item.pk}/", {"title": "x"}, format="json").status_code == 403
    assert carol.delete(f"/api/v1/knowledge/items/{alice_item.pk}/").status_code == 403
    assert KnowledgeItem.objects.filter(pk=alice_item.pk, title="VPN setup").exists()


def test_members_edit_their_own_items_and_admins_any(users, alice_item, api_for):
    url = f"/api/v1/knowledge/items/{alice_item.pk}/"
    assert api_for(users["bob"]).patch(url, {"title": "bob was here"}, format="json").status_code == 403
    assert api_for(users["bob"]).get(url).json()["can_edit"] is False
    response = api_for(users["alice"]).patch(url, {"content": "Use the new SSO portal.", "tags": ["IT", "sso"]},
                                                format="json")
    assert response.status_code == 200 and response.json()["tags"] == ["it", "sso"]
    hits = api_for(users["alice"]).get("/api/v1/knowledge/search/?q=portal").json()["results"]
    assert [h["item_id"] for h in hits] == [str(alice_item.pk)]  # re-chunked on edit
    assert api_for(users["admin"]).patch(url, {"title": "VPN (reviewed)"}, format="json").status_code == 200
    # Only the owner decides privacy.
    assert api_for(users["admin"]).patch(url, {"is_private": True}, format="json").status_code == 403
    assert api_for(users["admin"]).delete(url).status_code == 204
    assert not KnowledgeItem.objects.filter(pk=alice_item.pk).exists()


@pytest.mark.parametrize("payload, code, status", [
    ({"content": ""}, "invalid", 400),
    ({"content": "   "}, "invalid", 400),
    ({"content": "x", "type": "no spaces allowed"}, "invalid", 400),
    ({"content": "x", "url": "javascript:alert(1)"}, "invalid", 400),
    ({"content": "x", "workspace": "other"}, "not_found", 404),
])
def test_create_validation_uses_the_error_shape(users, payload, code, status, api_for):
    response = api_for(users["alice"]).post("/api/v1/knowledge/items/", payload, format="json")
    assert response.status_code == status
    assert response.json()["error"]["code"] == code and response.json()["error"]["message"]


def test_list_filters_by_type_tag_and_workspace(users, workspaces, alice_item, api_for):
    knowledge_item_create(workspace=workspaces["demo"], owner=users["bob"], title="Lunch", content="Pizza friday",
                          type="fact", tags=["food"])
    client = api_for(users["alice"])

    def listed(query):
        return [r["title"] for r in client.get("/api/v1/knowledge/items/" + query).json()["results"]]

    assert set(listed("")) == {"VPN setup", "Lunch"}
    assert listed("?type=howto") == ["VPN setup"]
    assert listed("?tag=food") == ["Lunch"]
    assert set(listed("?tag=food,it")) == {"VPN setup", "Lunch"}
    assert set(listed("?workspace=demo")) == {"VPN setup", "Lunch"}


@pytest.mark.parametrize("query", ["?q=vpn&top_k=0", "?q=vpn&top_k=51", "?q=vpn&top_k=many"])
def test_search_rejects_a_bad_top_k(users, query, api_for):
    response = api_for(users["alice"]).get("/api/v1/knowledge/search/" + query)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"


def test_search_filters_and_empty_query(users, alice_item, api_for):
    client = api_for(users["alice"])
    assert client.get("/api/v1/knowledge/search/?q=").json() == {"query": "", "results": []}
    assert client.get('/api/v1/knowledge/search/?q="*" NEAR(-:').status_code == 200
    assert len(client.get("/api/v1/knowledge/search/?q=mfa&type=howto&tag=it").json()["results"]) == 1
    assert client.get("/api/v1/knowledge/search/?q=mfa&type=fact").json()["results"] == []


def test_anonymous_is_refused(db):
    response = APIClient().get("/api/v1/knowledge/search/?q=x")
    assert response.status_code in (401, 403) and response.json()["error"]["code"] == "not_authenticated"


# --- save a message to the knowledge base -------------------------------------------------
@pytest.fixture
def openai_row(db):
    return Provider.objects.create(slug="some-openai", name="Some OpenAI", kind="openai_compatible",
                                   base_url="http://127.0.0.1:9/v1", api_key_env="NOPE", default_model="m")


@pytest.mark.parametrize("provider_kind", ["offline", "openai"])
def test_save_a_message_whatever_the_provider(users, workspaces, offline, openai_row, provider_kind, api_for):
    provider = offline if provider_kind == "offline" else openai_row
    thread = make_thread(users["alice"], workspaces["demo"], provider)
    message = message_create(thread_id=thread.pk, role=Message.Role.ASSISTANT,
                             content="## Rotating keys\n\nRotate the **API keys** every 90 days.")
    response = api_for(users["alice"]).post(f"/api/v1/messages/{message.pk}/save-to-knowledge/",
                                               {"type": "decision", "tags": ["security"]}, format="json")
    assert response.status_code == 201, response.json()
    item = KnowledgeItem.objects.get(pk=response.json()["id"])
    assert (item.title, item.type, item.tags, item.owner) == ("Rotating keys", "decision", ["security"], users["alice"])
    assert item.source_message == message and item.workspace == workspaces["demo"]
    assert item.content == message.content


def test_save_with_a_title_and_refusals(users, workspaces, offline, api_for):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    message = message_create(thread_id=thread.pk, role=Message.Role.USER, content="Our SLA is 99.9 %.")
    url = f"/api/v1/messages/{message.pk}/save-to-knowledge/"
    response = api_for(users["alice"]).post(url, {"type": "fact", "title": "SLA"}, format="json")
    assert response.status_code == 201 and response.json()["title"] == "SLA"
    assert api_for(users["bob"]).post(url, {"type": "fact"}, format="json").status_code == 404  # not his thread
    assert api_for(users["dave"]).post(url, {"type": "fact"}, format="json").status_code == 404
    missing = api_for(users["alice"]).post(url, {}, format="json")
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid"
    carol_thread = make_thread(users["carol"], workspaces["demo"], offline)
    carol_msg = message_create(thread_id=carol_thread.pk, role=Message.Role.USER, content="viewer note")
    forbidden = api_for(users["carol"]).post(f"/api/v1/messages/{carol_msg.pk}/save-to-knowledge/",
                                                {"type": "note"}, format="json")
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
    tool_msg = message_create(thread_id=thread.pk, role=Message.Role.TOOL, content="{}", tool_call_id="c1")
    assert api_for(users["alice"]).post(f"/api/v1/messages/{tool_msg.pk}/save-to-knowledge/",
                                           {"type": "note"}, format="json").status_code == 400
    assert api_for(users["alice"]).post("/api/v1/messages/not-a-uuid/save-to-knowledge/",
                                           {"type": "note"}, format="json").status_code == 404


def test_schema_lists_the_knowledge_endpoints(users, api_for):
    schema = api_for(users["alice"]).get("/api/schema/?format=json").json()
    for path in ("/api/v1/knowledge/items/", "/api/v1/knowledge/items/{item_id}/", "/api/v1/knowledge/search/",
                 "/api/v1/messages/{message_id}/save-to-knowledge/"):
        assert path in schema["paths"], path
