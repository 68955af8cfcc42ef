"""REST API: auth, scoping (another user's objects are 404), runs, errors, schema."""

import pytest
from rest_framework.test import APIClient

from agents.models import Run
from chat.models import Message, Thread
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice_thread(users, workspaces, offline):
    return make_thread(users["alice"], workspaces["demo"], offline, title="Alice's VPN notes")


def test_token_auth_round_trip(users):
    client = APIClient()
    response = client.post("/api/v1/auth/token/", {"username": "alice", "password": "pw-alice"}, format="json")
    assert response.status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    assert client.get("/api/v1/workspaces/").json()["results"][0]["slug"] == "demo"


def test_wrong_password_is_a_json_error(users):
    response = APIClient().post("/api/v1/auth/token/", {"username": "alice", "password": "nope"}, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"code", "message"}


def test_anonymous_requests_are_refused_with_the_error_shape(db):
    response = APIClient().get("/api/v1/threads/")
    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"] == "not_authenticated"


def test_workspaces_list_only_the_callers_with_role(users, api_for):
    data = api_for(users["carol"]).get("/api/v1/workspaces/").json()["results"]
    assert [(w["slug"], w["role"]) for w in data] == [("demo", "viewer")]


def test_thread_create_list_and_search(users, offline, api_for):
    client = api_for(users["alice"])
    created = client.post("/api/v1/threads/", {"workspace": "demo", "provider": "offline"}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert body["provider"] == "offline" and body["model"] == "rule-based" and body["grounded"] is True
    thread = Thread.objects.get(pk=body["id"])
    Message.objects.create(thread=thread, position=1, role="user", content="the quarterly OKR review")
    assert [t["id"] for t in client.get("/api/v1/threads/?search=okr").json()["results"]] == [body["id"]]
    assert client.get("/api/v1/threads/?search=nothing-like-this").json()["results"] == []


def test_thread_create_in_a_foreign_workspace_is_404(users, offline, api_for):
    response = api_for(users["dave"]).post("/api/v1/threads/", {"workspace": "demo"}, format="json")
    assert response.status_code == 404


@pytest.mark.parametrize("intruder", ["bob", "dave", "carol"])
def test_other_users_cannot_reach_alices_thread(users, alice_thread, intruder, api_for):
    client = api_for(users[intruder])
    base = f"/api/v1/threads/{alice_thread.pk}/"
    assert client.get(base).status_code == 404
    assert client.get(base + "messages/").status_code == 404
    assert client.post(base + "runs/", {"content": "hi"}, format="json").status_code == 404
    assert client.patch(base, {"title": "pwned"}, format="json").status_code == 404
    assert client.delete(base).status_code == 404
    assert client.get("/api/v1/threads/").json()["results"] == []
    alice_thread.refresh_from_db()
    assert alice_thread.title == "Alice's VPN notes"
    assert not Run.objects.exists()


def test_removed_member_loses_access_to_own_thread(users, alice_thread, api_for):
    users["alice"].memberships.all().delete()
    assert api_for(users["alice"]).get(f"/api/v1/threads/{alice_thread.pk}/").status_code == 404


def test_workspace_admin_reads_but_cannot_write(users, alice_thread, api_for):
    client = api_for(users["admin"])
    assert client.get(f"/api/v1/threads/{alice_thread.pk}/").status_code == 200
    assert client.patch(f"/api/v1/threads/{alice_thread.pk}/", {"title": "x"}, format="json").status_code == 404


def test_run_create_returns_202_and_the_run_completes(users, alice_thread, sink_for, api_for):
    client = api_for(users["alice"])
    sink = sink_for(alice_thread.pk)
    response = client.post(f"/api/v1/threads/{alice_thread.pk}/runs/", {"content": "with statement"}, format="json")
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"run_id", "user_message_id"}
    events = sink.until_terminal(body["run_id"])
    assert events[-1]["type"] == "run.completed"
    run = client.get(f"/api/v1/runs/{body['run_id']}/").json()
    assert run["status"] == "completed" and run["thread_id"] == str(alice_thread.pk)
    messages = client.get(f"/api/v1/threads/{alice_thread.pk}/messages/").json()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0]["id"] == body["user_message_id"]
    call = messages[1]["tool_calls"][0]
    assert call["name"] == "search_knowledge" and call["status"] == "succeeded"
    assert "workspace_id" not in call["arguments_summary"]
    assert api_for(users["bob"]).get(f"/api/v1/runs/{body['run_id']}/").status_code == 404


def test_run_create_validation_errors(users, alice_thread, api_for):
    client = api_for(users["alice"])
    url = f"/api/v1/threads/{alice_thread.pk}/runs/"
    empty = client.post(url, {"content": "  "}, format="json")
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "empty_message"
    huge = client.post(url, {"content": "x" * 32_001}, format="json")
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "message_too_long"
    missing = client.post(url, {}, format="json")
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid"
    assert not Run.objects.exists()


def test_assistant_html_is_sanitised(users, alice_thread, api_for):
    Message.objects.create(thread=alice_thread, position=1, role="assistant",
                           content="**bold** <script>alert(1)</script> [x](javascript:alert(1))")
    html = api_for(users["alice"]).get(f"/api/v1/threads/{alice_thread.pk}/messages/").json()[0]["content_html"]
    assert "<strong>bold</strong>" in html
    assert "<script>" not in html and 'href="javascript' not in html


def test_providers_never_expose_keys(users, db, monkeypatch, api_for):
    from agents.models import Provider
    from agents.provider_keys import encrypt_key

    monkeypatch.setenv("PLANTED_KEY_VAR", "sk-planted-secret-123")
    Provider.objects.create(slug="p1", name="P1", kind="openai_compatible", base_url="http://127.0.0.1:9/v1",
                            api_key_env="PLANTED_KEY_VAR")
    Provider.objects.create(slug="p2", name="P2", kind="openai_compatible", base_url="http://127.0.0.1:9/v1",
                            api_key_encrypted=encrypt_key("sk-stored-secret-456"))
    Provider.objects.create(slug="p3", name="P3", kind="openai_compatible", api_key_env="UNSET_VAR_XYZ")
    client = api_for(users["alice"])
    response = client.get("/api/v1/providers/")
    text = response.content.decode()
    assert "sk-planted-secret-123" not in text and "sk-stored-secret-456" not in text
    status = {p["slug"]: p["status"] for p in response.json()}
    assert status == {"p1": "ok", "p2": "ok", "p3": "not configured: set UNSET_VAR_XYZ"}


def test_schema_lists_the_design_endpoints(users, api_for):
    schema = api_for(users["alice"]).get("/api/schema/?format=json").json()
    for path in [
        "/api/v1/auth/token/", "/api/v1/workspaces/", "/api/v1/threads/", "/api/v1/threads/{thread_id}/",
        "/api/v1/threads/{thread_id}/messages/", "/api/v1/threads/{thread_id}/runs/", "/api/v1/runs/{run_id}/",
        "/api/v1/runs/{run_id}/cancel/", "/api/v1/providers/", "/api/v1/providers/{slug}/models/",
        "/api/v1/threads/{thread_id}/duplicate/", "/api/v1/runs/{run_id}/events/", "/api/v1/tool-calls/",
        "/api/v1/tool-calls/{tool_call_id}/decision/",
    ]:
        assert path in schema["paths"], path


def test_schema_offers_the_api_token_beside_the_session(users, api_for):
    """/api/docs/ can authorise with an API token: the schema names the credential seam's
    scheme (HTTP bearer) on the operations, not only the session cookie."""
    schema = api_for(users["alice"]).get("/api/schema/?format=json").json()
    assert schema["components"]["securitySchemes"]["tokenAuth"]["scheme"] == "bearer"
    threads = schema["paths"]["/api/v1/threads/"]["get"]
    assert {"tokenAuth": []} in threads["security"] and {"cookieAuth": []} in threads["security"]


def test_saving_a_stale_thread_never_breaks_message_positions(users, alice_thread, converse):
    stale = Thread.objects.get(pk=alice_thread.pk)
    converse(alice_thread, users["alice"], "with statement")
    stale.title = "renamed from an old copy"
    stale.save()
    run, events = converse(alice_thread, users["alice"], "and again")
    assert run.status == "completed"
    positions = list(Message.objects.filter(thread=alice_thread).values_list("position", flat=True))
    assert positions == list(range(1, len(positions) + 1))


def test_duplicate_copies_settings_and_messages_with_a_fresh_id(users, alice_thread, converse, api_for):
    converse(alice_thread, users["alice"], "with statement")
    alice_thread.allow_model_save = True
    alice_thread.save(update_fields=["allow_model_save"])
    response = api_for(users["alice"]).post(f"/api/v1/threads/{alice_thread.pk}/duplicate/")
    assert response.status_code == 201
    copy = Thread.objects.get(pk=response.json()["id"])
    assert copy.pk != alice_thread.pk and copy.title == "Alice's VPN notes (copy)" and copy.allow_model_save
    def shape(thread):  # tool calls as the model made them (the copy adds an outcome snapshot)
        return [(role, content, [(c["id"], c["name"], c["arguments"]) for c in calls], call_id)
                for role, content, calls, call_id in Message.objects.filter(thread=thread).order_by("position")
                .values_list("role", "content", "tool_calls", "tool_call_id")]

    assert shape(copy) == shape(alice_thread) and len(shape(copy)) == 4
    assert api_for(users["bob"]).post(f"/api/v1/threads/{alice_thread.pk}/duplicate/").status_code == 404


def test_delete_cascades(users, alice_thread, converse, api_for):
    converse(alice_thread, users["alice"], "with statement")
    assert api_for(users["alice"]).delete(f"/api/v1/threads/{alice_thread.pk}/").status_code == 204
    assert not Message.objects.filter(thread_id=alice_thread.pk).exists()
    assert not Run.objects.filter(thread_id=alice_thread.pk).exists()


def test_api_docs_page_serves_its_assets_locally(users, api_for):
    client = api_for(users["alice"])
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "swagger-ui" in html
    import re

    assets = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"(?:src|href)='([^']+)'", html)
    assert assets and all(a.startswith("/") for a in assets), assets  # served here, no CDN


@pytest.mark.parametrize("workspace", ["²", "99999999999999999999999", "٣", "demo\x00"])
def test_odd_workspace_identifiers_are_404_not_500(users, workspace, api_for):
    client = api_for(users["alice"])
    assert client.post("/api/v1/threads/", {"workspace": workspace}, format="json").status_code in (400, 404)
    # A NUL character in a query parameter is refused up front (issue 17, bad input).
    assert client.get("/api/v1/threads/", {"workspace": workspace}).status_code == (400 if "\x00" in workspace else 200)
