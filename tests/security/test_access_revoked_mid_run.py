"""Issue 17: a member removed from a workspace stops receiving the run already in flight —
the socket closes (4403) at once, not at the next run. ``db_backends``: on SQLite + the
in-memory layer and again on PostgreSQL + Redis."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from apikeys.services import api_key_create, api_key_revoke
from chat.models import Membership
from config.asgi import application
from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


@pytest.fixture
def slow_offline(settings):
    settings.OFFLINE_DELTA_DELAY_S = 0.25  # a run that is still streaming when access goes


async def socket_for(user, thread, key=None):
    key = key or (await database_sync_to_async(Token.objects.get_or_create)(user=user))[0].key
    comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                 headers=[(b"authorization", f"Token {key}".encode())])
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


async def until_closed(comm, timeout=10.0) -> tuple[int | None, list[dict]]:
    """Frames received until the server closes the socket, and the close code."""
    frames = []
    while True:
        out = await comm.receive_output(timeout=timeout)
        if out["type"] == "websocket.close":
            return out.get("code"), frames
        frames.append(json.loads(out["text"]))


@pytest.mark.parametrize("revoke", ["membership removed", "demoted admin watching another's thread",
                                    "account deactivated", "token deleted", "api key revoked by its owner",
                                    "api key deleted in the admin"])
async def test_losing_access_mid_run_closes_the_socket_at_once(users, workspaces, offline, roles, slow_offline,
                                                              revoke):
    owner = users["alice"]
    watcher = users["admin"] if revoke.startswith("demoted") else owner
    thread = await database_sync_to_async(make_thread)(owner, workspaces["demo"], offline)
    api_key = None
    if revoke.startswith("api key"):
        api_key = await database_sync_to_async(api_key_create)(user=owner, name="socket")
    owner_socket = await socket_for(owner, thread, api_key.key if api_key else None)
    comm = owner_socket if watcher == owner else await socket_for(watcher, thread)
    await owner_socket.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
    while True:  # the run is streaming to the watcher
        event = json.loads((await comm.receive_output(timeout=10))["text"])
        if event["type"] == "text.delta":
            break

    def take_access_away():
        if revoke == "membership removed":
            Membership.objects.filter(user=owner).delete()
        elif revoke.startswith("demoted"):
            Membership.objects.filter(user=watcher).update(role=roles["member"])
            Membership.objects.get(user=watcher).save()  # the admin's change, through the model
        elif revoke == "account deactivated":
            owner.is_active = False
            owner.save()
        elif revoke == "api key revoked by its owner":
            api_key_revoke(api_key=api_key.api_key, by=owner)
        elif revoke == "api key deleted in the admin":
            api_key.api_key.delete()
        else:
            Token.objects.filter(user=owner).delete()

    await database_sync_to_async(take_access_away)()
    code, frames = await until_closed(comm)
    assert code == 4403
    assert not any(f["type"] in ("run.completed", "run.failed") for f in frames), [f["type"] for f in frames]
    assert len(frames) < 10  # closed within a few deltas, not at the end of the answer
    await comm.disconnect()
    if comm is not owner_socket:
        await owner_socket.disconnect()
    await database_sync_to_async(stop_runs)(owner)


def stop_runs(user) -> None:
    """Cancel the still-streaming run and wait for it to end, so it does not outlive the test."""
    import time

    from agents.models import Run
    from agents.services import run_cancel

    for run in Run.objects.filter(user=user, status__in=("queued", "running")):
        run_cancel(run=run, user=user)
    deadline = time.monotonic() + 15
    # Ended and released by its worker (the worker closes the cancelled message before it lets go).
    while (Run.objects.filter(user=user, status__in=("queued", "running")).exists()
           or Run.objects.filter(user=user).exclude(lease_owner="").exists()):
        assert time.monotonic() < deadline, "the run did not stop"
        time.sleep(0.05)


async def test_an_unrelated_change_leaves_the_socket_open(users, workspaces, offline, roles, settings):
    thread = await database_sync_to_async(make_thread)(users["alice"], workspaces["demo"], offline)
    comm = await socket_for(users["alice"], thread)
    await database_sync_to_async(lambda: Membership.objects.get(user=users["alice"]).save())()
    await comm.send_json_to({"type": "no.such.thing"})
    reply = json.loads((await comm.receive_output(timeout=10))["text"])
    assert reply["type"] == "error" and reply["code"] == "unknown_type"
    await comm.disconnect()


async def test_logging_out_closes_that_sessions_sockets_at_once(users, workspaces, offline):
    """Django sends user_logged_out before it deletes the session: a socket's re-check that
    ran first (the in-memory layer delivers at once) found the session still there and stayed
    open. The notice names the ended session, so its sockets close without a re-check; a
    socket of the same user on a token stays open."""
    from django.test import Client

    owner = users["alice"]
    thread = await database_sync_to_async(make_thread)(owner, workspaces["demo"], offline)
    browser = Client()
    await database_sync_to_async(browser.force_login)(owner)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    session_socket = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/", headers=[
        (b"cookie", cookie.encode()), (b"origin", b"http://localhost"), (b"host", b"localhost")])
    connected, _ = await session_socket.connect(timeout=5)
    assert connected
    token_socket = await socket_for(owner, thread)
    # The race, pinned: the notice arrives while the session still exists (Django has not
    # deleted it yet). It names the session, so the socket closes anyway.
    from channels.layers import get_channel_layer

    from chat.access import ACCESS_CHANGED, session_digest, user_group

    await get_channel_layer().group_send(user_group(owner.pk), {
        "type": ACCESS_CHANGED, "session": session_digest(browser.cookies["sessionid"].value)})
    code, frames = await until_closed(session_socket, timeout=5)  # no frame sent: the notice closed it
    assert code == 4403 and frames == []
    # And the real thing: a logout notifies (the socket of a second login of that browser closes).
    await database_sync_to_async(browser.force_login)(owner)
    second = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/", headers=[
        (b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode()), (b"origin", b"http://localhost"),
        (b"host", b"localhost")])
    assert (await second.connect(timeout=5))[0]
    response = await database_sync_to_async(browser.post)("/accounts/logout/")
    assert response.status_code in (200, 302)
    assert (await until_closed(second, timeout=5))[0] == 4403
    await token_socket.send_json_to({"type": "no.such.thing"})  # still open and authorised
    assert json.loads((await token_socket.receive_output(timeout=5))["text"])["code"] == "unknown_type"
    await token_socket.disconnect()
    await session_socket.disconnect()
    await second.disconnect()
