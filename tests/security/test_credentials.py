"""One credential rule for every door (``chatplatform.credentials``): REST, the websocket, SSE,
``/v1`` and ``/mcp/`` take ``Bearer <key>`` and ``Token <key>`` alike — a self-service API key
(``apikeys``) or a password-posted token — and refuse the same things: another scheme, a
malformed header, an unknown key, an inactive user's key, a revoked or an expired API key."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient
from django.utils import timezone
from rest_framework.authtoken.models import Token

from apikeys.services import api_key_create, api_key_revoke
from chatplatform.credentials import authorization_key, names_api_scheme, user_for_authorization
from config.asgi import application
from tests.conftest import make_thread
from tests.mcp.test_knowledge_endpoint import server_url  # noqa: F401 - fixture: the ASGI app on loopback

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("header", "key"), [
    ("Bearer abc123", "abc123"),
    ("Token abc123", "abc123"),
    ("bearer abc123", "abc123"),
    ("TOKEN  abc123 ", "abc123"),
    (b"Bearer abc123", "abc123"),
    ("Basic dXNlcjpwdw==", None),
    ("Bearer", None),
    ("Bearer ", None),
    ("Bearer a b", None),
    ("abc123", None),
    ("", None),
    (None, None),
])
def test_the_scheme_rule(header, key):
    assert authorization_key(header) == key


def test_a_malformed_header_of_our_schemes_is_still_an_api_credential():
    # Judged by its (missing) key, never by a session cookie beside it.
    assert names_api_scheme("Bearer") and names_api_scheme("token a b")
    assert not names_api_scheme("Basic x") and not names_api_scheme("")


@pytest.fixture
def keys(users):
    inactive = users["bob"]
    key_bob = Token.objects.get_or_create(user=inactive)[0].key
    inactive.is_active = False
    inactive.save(update_fields=["is_active"])
    alice = users["alice"]
    revoked = api_key_create(user=alice, name="revoked")
    api_key_revoke(api_key=revoked.api_key, by=alice)
    expired = api_key_create(user=alice, name="expired", expires_at=timezone.now() + timedelta(hours=1))
    type(expired.api_key).objects.filter(pk=expired.api_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    return {"alice": Token.objects.get_or_create(user=alice)[0].key, "inactive": key_bob,
            "api_key": api_key_create(user=alice, name="cli").key, "revoked": revoked.key, "expired": expired.key,
            "inactive_api_key": api_key_create(user=inactive, name="bob's").key}


def _headers(keys):
    """(header, accepted?) for each case every door must agree on."""
    return [
        (f"Bearer {keys['alice']}", True),
        (f"Token {keys['alice']}", True),
        (f"bearer {keys['alice']}", True),
        ("Bearer not-a-real-key", False),
        (f"Bearer {keys['inactive']}", False),
        (f"Basic {keys['alice']}", False),
        (f"Bearer {keys['alice']} extra", False),
        (f"Bearer {keys['api_key']}", True),
        (f"Token {keys['api_key']}", True),
        (f"Bearer {keys['revoked']}", False),
        (f"Bearer {keys['expired']}", False),
        (f"Bearer {keys['inactive_api_key']}", False),
        (f"Bearer {keys['api_key']}x", False),
    ]


def test_user_for_authorization(keys, users):
    for header, accepted in _headers(keys):
        assert (user_for_authorization(header) == users["alice"]) is accepted, header


def test_rest_takes_the_same_rule(keys, client):
    for header, accepted in _headers(keys):
        response = client.get("/api/v1/workspaces/", HTTP_AUTHORIZATION=header)
        assert response.status_code == (200 if accepted else 401), (header, response.status_code)
        if not accepted:
            assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_v1_takes_the_same_rule(keys, offline):
    async def go(header):
        response = await AsyncClient().get("/v1/models", headers={"Authorization": header})
        return response.status_code

    for header, accepted in _headers(keys):
        assert asyncio.run(go(header)) == (200 if accepted else 401), header


def test_sse_takes_the_same_rule(keys, users, workspaces, offline, converse, settings):
    settings.SSE_KEEPALIVE_S = 120
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    run, events = converse(thread, users["alice"], "hello")

    async def go(header):
        response = await AsyncClient().get(f"/api/v1/runs/{run.pk}/events/", headers={
            "Authorization": header, "Last-Event-ID": str(events[-1]["seq"])})
        if response.status_code == 200:
            [c async for c in response.streaming_content]
        return response.status_code

    for header, accepted in _headers(keys):
        assert asyncio.run(asyncio.wait_for(go(header), 10)) == (200 if accepted else 401), header


def test_the_websocket_takes_the_same_rule(keys, users, workspaces, offline):
    thread = make_thread(users["alice"], workspaces["demo"], offline)

    async def go(header, accepted):
        comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                     headers=[(b"authorization", header.encode())])
        connected, _ = await comm.connect(timeout=5)
        assert connected  # the consumer accepts, then closes a socket it refuses with its reason
        if accepted:
            assert await comm.receive_nothing(timeout=0.3), header
            await comm.disconnect()
        else:
            assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}, header

    for header, accepted in _headers(keys):
        asyncio.run(go(header, accepted))


def test_mcp_takes_the_same_rule(keys, server_url):  # noqa: F811 - the imported fixture
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()

    def status_for(header):
        request = urllib.request.Request(server_url, data=body, method="POST", headers={
            "Authorization": header, "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    for header, accepted in _headers(keys):
        assert status_for(header) == (200 if accepted else 401), header


def test_a_refused_api_key_says_why_at_every_http_door(keys, client, users, workspaces, offline, converse,
                                                     server_url):  # noqa: F811 - the imported fixture
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    run, _events = converse(thread, users["alice"], "hello")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()

    def mcp(header):
        request = urllib.request.Request(server_url, data=body, method="POST", headers={
            "Authorization": header, "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        return refused.value.code, json.loads(refused.value.read())["error"]

    async def asgi(path, header):
        response = await AsyncClient().get(path, headers={"Authorization": header})
        return response.status_code, json.loads(response.content)["error"]

    for name, code in (("revoked", "api_key_revoked"), ("expired", "api_key_expired")):
        header = f"Bearer {keys[name]}"
        rest = client.get("/api/v1/workspaces/", HTTP_AUTHORIZATION=header)
        answers = {
            "rest": (rest.status_code, rest.json()["error"]),
            "v1": asyncio.run(asgi("/v1/models", header)),
            "sse": asyncio.run(asgi(f"/api/v1/runs/{run.pk}/events/", header)),
            "mcp": mcp(header),
        }
        for door, (status, error) in answers.items():
            assert status == 401 and error["code"] == code, (door, status, error)
            assert error["message"].startswith("This API key " + name.replace("revoked", "has been revoked")), error
