"""Bad input found by trying the platform as a new user: each gets a precise error and loses
nothing; the server never answers 5xx or drops the socket."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Run
from chat.models import Message
from config.asgi import application
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread(users, workspaces, offline):
    return make_thread(users["alice"], workspaces["demo"], offline)


@pytest.fixture
def alice_key(users):
    return Token.objects.get_or_create(user=users["alice"])[0].key


@pytest.mark.parametrize("frame", [
    '{"type": "message.send", "content": "x\\ud800y"}',
    '{"type": "message.send", "content": "hi", "env_id": "\\udfff"}',
    '{"type": "message.send", "content": "hi", "ui_context": {"objectName": "\\ud800"}}',
    '{"type": "message.send", "content": "hi", "ui_context": {"\\ud800": 1}}',
])
def test_lone_surrogates_on_the_websocket_get_an_error_and_the_socket_stays(thread, alice_key, frame):
    async def go():
        comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                     headers=[(b"authorization", f"Token {alice_key}".encode())])
        await comm.connect(timeout=5)
        await comm.send_to(text_data=frame)
        error = await comm.receive_json_from(timeout=5)
        await comm.send_json_to({"type": "does.not.exist"})
        still_open = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return error, still_open

    error, still_open = asyncio.run(go())
    assert error["type"] == "error" and error["code"] == "invalid_text"
    assert still_open["code"] == "unknown_type"
    assert not Message.objects.filter(thread=thread).exists()


def test_lone_surrogates_in_rest_ui_context_are_422(thread, users, api_for):
    body = json.dumps({"content": "hi", "ui_context": {"objectType": "thread", "objectName": "\ud800"}})
    response = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", body, content_type="application/json")
    assert response.status_code == 422 and response.json()["error"]["code"] == "ui_context_invalid"
    patch = api_for(users["alice"]).patch(f"/api/v1/threads/{thread.pk}/", json.dumps({"ui_context": {"objectName": "\udc00"}}),
                                      content_type="application/json")
    assert patch.status_code == 422


def test_a_socket_whose_credential_is_gone_cannot_act(thread, users, alice_key):
    async def go():
        comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                     headers=[(b"authorization", f"Token {alice_key}".encode())])
        await comm.connect(timeout=5)
        await sync_to_async(Token.objects.filter(key=alice_key).delete)()  # signed out
        await comm.send_json_to({"type": "message.send", "content": "still me?"})
        closed = await comm.receive_output(timeout=5)
        await comm.disconnect()
        return closed

    assert asyncio.run(go()) == {"type": "websocket.close", "code": 4403}
    assert not Run.objects.exists() and not Message.objects.exists()


def test_404s_name_only_the_object_asked_for(thread, users, converse, api_for):
    run, _ = converse(thread, users["alice"], "hello")
    message = Message.objects.filter(thread=thread).first()
    bob = api_for(users["bob"])
    assert bob.get(f"/api/v1/runs/{run.pk}/").json()["error"]["message"] == "No such run."
    assert bob.get("/api/v1/runs/00000000-0000-0000-0000-000000000000/").json()["error"]["message"] == "No such run."
    saved = bob.post(f"/api/v1/messages/{message.pk}/save-to-knowledge/", {"type": "note"}, format="json")
    assert saved.status_code == 404 and saved.json()["error"]["message"] == "No such message."


def test_an_admin_reading_a_thread_cannot_publish_it(thread, users, converse, api_for):
    converse(thread, users["alice"], "hello")
    message = Message.objects.filter(thread=thread).first()
    admin = api_for(users["admin"])
    assert admin.get(f"/api/v1/threads/{thread.pk}/messages/").status_code == 200
    assert admin.post(f"/api/v1/messages/{message.pk}/save-to-knowledge/", {"type": "note"}, format="json").status_code == 404


def test_oversized_rest_body_is_a_json_413(thread, users, api_for, caplog):
    huge = json.dumps({"content": "x" * (3 * 1024 * 1024)})
    response = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", huge, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    # The client's error: one warning line, not an ERROR with a traceback (a trial's log).
    logged = [r for r in caplog.records if r.name.startswith("django.security")]
    assert [(r.name, r.levelname, r.exc_info) for r in logged] == [
        ("django.security.RequestDataTooBig", "WARNING", None)]


def test_sse_of_a_finished_run_with_nothing_left_ends_at_once(thread, users, alice_key, converse, settings):
    settings.SSE_KEEPALIVE_S = 120
    run, events = converse(thread, users["alice"], "hello")

    async def go():
        response = await AsyncClient().get(f"/api/v1/runs/{run.pk}/events/", headers={
            "Authorization": f"Token {alice_key}", "Last-Event-ID": str(events[-1]["seq"])})
        chunks = [c async for c in response.streaming_content]
        return chunks

    assert asyncio.run(asyncio.wait_for(go(), 10)) == []


def test_login_attempts_are_throttled(users, settings):
    from django.core.cache import cache

    settings.LOGIN_RATE_LIMIT = "3/hour"  # read per request (chatplatform.login_throttle)
    cache.clear()  # other tests' logins from the same address count too
    client = APIClient()
    codes = [client.post("/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json").status_code
             for _ in range(5)]
    assert codes[:3] == [400, 400, 400] and codes[3:] == [429, 429]
