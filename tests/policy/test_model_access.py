"""Only models enabled in the admin may be used, by the roles allowed to use them (issue 17):
run create, edit, regenerate, the websocket send and the OpenAI-compatible API refuse any
other model before anything is written or sent upstream; the model pickers and ``/v1/models``
list only what the caller may use."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.authtoken.models import Token

from agents.models import LLMModel, Run
from chat.models import Message, Thread
from config.asgi import application
from tests.conftest import make_thread
from tests.fakes.openai_server import text_chunks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def catalogue(openai_provider, roles, settings):
    """``fake-model`` (the provider's default, enabled for everyone), ``big-model`` (admins
    only), ``retired`` (disabled); anything else is listed nowhere."""
    settings.RUN_EXECUTOR = "none"  # the refusals are the point; no turn needs to run
    LLMModel.objects.create(provider=openai_provider, name="fake-model")
    big = LLMModel.objects.create(provider=openai_provider, name="big-model")
    big.allowed_roles.set([roles["admin"]])
    LLMModel.objects.create(provider=openai_provider, name="retired", enabled=False)
    return openai_provider


def send(api_for, user, thread):
    return api_for(user).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "Hello"}, format="json")


@pytest.mark.parametrize(("user", "model", "allowed"), [
    ("alice", "fake-model", True),
    ("alice", "big-model", False),   # admins only
    ("admin", "big-model", True),
    ("admin", "retired", False),     # disabled for everyone
    ("admin", "unlisted-x", False),  # a name nobody enabled: the organisation's key is not spent on it
])
def test_run_create_refuses_a_model_not_enabled_for_the_callers_role(users, workspaces, catalogue, api_for, user,
                                                                      model, allowed, fake_openai):
    thread = make_thread(users[user], workspaces["demo"], catalogue, model=model)
    response = send(api_for, users[user], thread)
    if allowed:
        assert response.status_code == 202
        return
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "model_not_allowed" and repr(model) in error["message"]
    assert not Message.objects.filter(thread=thread).exists() and not Run.objects.filter(thread=thread).exists()
    assert fake_openai.requests == []


def test_the_providers_default_model_without_a_row_is_usable(users, workspaces, openai_provider, api_for):
    assert not LLMModel.objects.exists()
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)  # model = default_model
    assert send(api_for, users["alice"], thread).status_code == 202


def test_the_role_is_the_callers_role_in_the_threads_workspace(users, workspaces, catalogue, roles, api_for):
    from chat.models import Membership

    # alice is an admin elsewhere, a member here: big-model is still refused here.
    Membership.objects.create(user=users["alice"], workspace=workspaces["other"], role=roles["admin"])
    thread = make_thread(users["alice"], workspaces["demo"], catalogue, model="big-model")
    assert send(api_for, users["alice"], thread).json()["error"]["code"] == "model_not_allowed"
    elsewhere = make_thread(users["alice"], workspaces["other"], catalogue, model="big-model")
    assert send(api_for, users["alice"], elsewhere).status_code == 202


def test_edit_and_regenerate_refuse_a_model_no_longer_allowed(users, workspaces, catalogue, roles, api_for,
                                                              settings):
    thread = make_thread(users["alice"], workspaces["demo"], catalogue, model="fake-model")
    question = Message.objects.create(thread=thread, position=1, role="user", content="Q")
    Message.objects.create(thread=thread, position=2, role="assistant", content="A", parent=question,
                           status="complete")
    # The admin restricts the model after the conversation started.
    LLMModel.objects.get(name="fake-model").allowed_roles.set([roles["admin"]])
    client = api_for(users["alice"])
    for path, body in ((f"/api/v1/messages/{question.pk}/edit/", {"content": "Q2"}),
                       (f"/api/v1/messages/{question.pk}/regenerate/", {})):
        response = client.post(path, body, format="json")
        assert response.status_code == 403, (path, response.content)
        assert response.json()["error"]["code"] == "model_not_allowed"
    assert Message.objects.filter(thread=thread).count() == 2 and not Run.objects.exists()


async def test_websocket_send_gets_an_error_event(users, workspaces, catalogue):
    from asgiref.sync import sync_to_async

    thread = await sync_to_async(make_thread)(users["alice"], workspaces["demo"], catalogue, model="big-model")
    key = (await sync_to_async(Token.objects.get_or_create)(user=users["alice"]))[0].key
    comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                 headers=[(b"authorization", f"Token {key}".encode())])
    connected, _ = await comm.connect(timeout=5)
    assert connected
    await comm.send_json_to({"type": "message.send", "content": "Hello"})
    event = await comm.receive_json_from(timeout=10)
    while event["type"] != "error":
        event = await comm.receive_json_from(timeout=10)
    assert event["code"] == "model_not_allowed" and event["status"] == 403 and "'big-model'" in event["message"]
    await comm.disconnect()
    assert not await sync_to_async(Run.objects.filter(thread=thread).exists)()


def test_the_model_picker_lists_only_allowed_models(users, workspaces, catalogue, api_for):
    def names(user, query=""):
        response = api_for(users[user]).get(f"/api/v1/providers/fake-openai/models/{query}")
        assert response.status_code == 200, response.content
        return [m["name"] for m in response.json()["models"]]

    assert names("alice") == ["fake-model"]
    assert names("admin") == ["big-model", "fake-model"]
    assert names("admin", f"?workspace={workspaces['demo'].pk}") == ["big-model", "fake-model"]
    assert api_for(users["alice"]).get(
        f"/api/v1/providers/fake-openai/models/?workspace={workspaces['other'].pk}").status_code == 404


@pytest.fixture
def compat(users, catalogue, offline):
    """The OpenAI-compatible API through Django's request handling, with an API token."""

    def client(user) -> Client:
        key = Token.objects.get_or_create(user=users[user])[0].key
        return Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    return client


def test_v1_models_lists_only_what_the_callers_roles_may_use(compat):
    member_ids = [m["id"] for m in compat("alice").get("/v1/models").json()["data"]]
    admin_ids = [m["id"] for m in compat("admin").get("/v1/models").json()["data"]]
    assert "fake-openai/fake-model" in member_ids and "fake-openai/big-model" not in member_ids
    assert "fake-openai/big-model" in admin_ids
    assert not any(i.endswith("/retired") for i in member_ids + admin_ids)


def test_v1_chat_completions_refuses_a_model_not_enabled_for_the_caller(compat, fake_openai):
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    alice = compat("alice")
    for model in ("fake-openai/big-model", "fake-openai/unlisted-x", "fake-openai/retired"):
        response = alice.post("/v1/chat/completions", {**body, "model": model}, content_type="application/json")
        assert response.status_code == 404, response.content
        error = response.json()["error"]
        assert error["code"] == "model_not_found" and "not enabled for you" in error["message"]
    assert fake_openai.requests == [] and not Run.objects.exists()


def test_an_allowed_model_runs(users, workspaces, catalogue, fake_openai, converse, settings):
    settings.RUN_EXECUTOR = "embedded"
    fake_openai.script(text_chunks("Hi there"))
    run, events = converse(make_thread(users["admin"], workspaces["demo"], catalogue, model="big-model"),
                           users["admin"], "Hello")
    assert run.status == "completed" and fake_openai.requests[0]["model"] == "big-model"


@pytest.mark.parametrize(("user", "model", "allowed"), [
    ("alice", "fake-model", True), ("alice", "big-model", False), ("admin", "big-model", True),
    ("admin", "retired", False), ("alice", "gpt-9000", False),
])
def test_a_thread_takes_only_a_model_the_callers_role_may_use(users, workspaces, catalogue, api_for, user, model,
                                                              allowed):
    """Set on a thread (create or PATCH), a model the caller may not use is refused then — it
    used to be saved, and every later send refused (found from a fresh clone)."""
    client = api_for(users[user])
    thread = make_thread(users[user], workspaces["demo"], catalogue, model="fake-model")
    patched = client.patch(f"/api/v1/threads/{thread.pk}/", {"model": model}, format="json")
    created = client.post("/api/v1/threads/", {"workspace": "demo", "provider": catalogue.slug, "model": model},
                          format="json")
    thread.refresh_from_db()
    if allowed:
        assert (patched.status_code, created.status_code, thread.model) == (200, 201, model)
        return
    assert patched.status_code == 403 and patched.json()["error"]["code"] == "model_not_allowed"
    assert created.status_code == 403 and created.json()["error"]["code"] == "model_not_allowed"
    assert repr(model) in patched.json()["error"]["message"]
    assert thread.model == "fake-model"  # unchanged
    assert list(Thread.objects.filter(owner=users[user]).values_list("pk", flat=True)) == [thread.pk]  # none created
