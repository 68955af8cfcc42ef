"""Issue 17: the websocket Origin check compares scheme, host and port — not the host name
alone — against the request's own origin and ``CSRF_TRUSTED_ORIGINS``."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from chat.ws_auth import origin_allowed
from config.asgi import application
from tests.conftest import make_thread

ALLOWED = ["127.0.0.1", "localhost", "chat.example.com"]


@pytest.mark.parametrize(("origin", "host", "scheme", "ok"), [
    ("http://localhost:8000", "localhost:8000", "ws", True),  # the page's own origin
    ("http://localhost:9999", "localhost:8000", "ws", False),  # another port on an allowed host
    ("https://localhost:8000", "localhost:8000", "ws", False),  # another scheme
    ("http://localhost", "localhost:8000", "ws", False),
    ("https://chat.example.com", "chat.example.com", "wss", True),
    ("https://chat.example.com:443", "chat.example.com", "wss", True),  # default port spelled out
    ("http://chat.example.com", "chat.example.com", "wss", False),  # downgraded scheme
    ("https://chat.example.com", "chat.example.com", "ws", False),
    ("http://evil.example:8000", "evil.example:8000", "ws", False),  # not an allowed host
    ("http://localhost:8000", None, "ws", False),  # no Host to compare with
    ("null", "localhost:8000", "ws", False),
    ("http://localhost:8000/path", "localhost:8000", "ws", False),
    ("http://localhost:notaport", "localhost:8000", "ws", False),
])
def test_own_origin_needs_same_scheme_host_and_port(settings, origin, host, scheme, ok):
    settings.ALLOWED_HOSTS = ALLOWED
    settings.CSRF_TRUSTED_ORIGINS = []
    assert origin_allowed(origin, host=host, scheme=scheme) is ok


@pytest.mark.parametrize(("origin", "ok"), [
    ("https://app.example.org", True),
    ("http://app.example.org", False),
    ("https://app.example.org:8443", False),
    ("https://eu.tenant.example.net", True),
    ("https://tenant.example.net", True),
    ("http://eu.tenant.example.net", False),
    ("https://eviltenant.example.net", False),
])
def test_trusted_origins_are_compared_whole(settings, origin, ok):
    settings.ALLOWED_HOSTS = ALLOWED
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example.org", "https://*.tenant.example.net"]
    assert origin_allowed(origin, host="elsewhere.example:1", scheme="wss") is ok


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("origin", "code"), [
    ("http://localhost:8000", None),  # accepted
    ("http://localhost:8001", 4403),
    ("https://localhost:8000", 4403),
])
async def test_websocket_handshake_from_another_port_or_scheme_is_refused(users, workspaces, offline, origin, code):
    from channels.db import database_sync_to_async

    thread = await database_sync_to_async(make_thread)(users["alice"], workspaces["demo"], offline)
    key = (await database_sync_to_async(Token.objects.get_or_create)(user=users["alice"]))[0].key
    headers = [(b"authorization", f"Token {key}".encode()), (b"origin", origin.encode()),
               (b"host", b"localhost:8000")]
    comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/", headers=headers)
    connected, _ = await comm.connect(timeout=5)
    if code is None:
        assert connected
        await comm.send_json_to({"type": "does.not.exist"})
        event = await comm.receive_json_from(timeout=5)
        while event.get("type") != "error":
            event = await comm.receive_json_from(timeout=5)
        assert event["code"] == "unknown_type"  # authenticated and talking
    else:
        assert (await comm.receive_output(timeout=5))["code"] == code
    await comm.disconnect()
