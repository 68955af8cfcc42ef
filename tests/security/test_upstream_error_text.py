"""Raw upstream error text is never shown to non-admins (issue 17): a provider whose error
body carries distinctive text fails a member's run; the member gets a generic, actionable
message with the error code — on the websocket, over SSE, in the REST messages and run, in the
OpenAI-compatible API and in the provider status — while staff and the workspace's admins see
the (key-scrubbed) upstream detail."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.models import Run
from agents.services import run_create
from config.asgi import application
from tests.chat.test_streams import parse_sse, read_stream
from tests.conftest import make_thread
from tests.fakes.openai_server import Failure

pytestmark = pytest.mark.django_db(transaction=True)

SECRET_TEXT = "quota-shard-7f3e internal billing account acct_991 exhausted"


@pytest.fixture
def keys(users):
    return {name: Token.objects.get_or_create(user=user)[0].key for name, user in users.items()}


def failing(fake_openai, n: int = 1) -> None:
    fake_openai.script(*[Failure(status=400, message=f"Upstream says: {SECRET_TEXT}") for _ in range(n)])


def test_a_members_run_failure_hides_the_upstream_text_everywhere(users, workspaces, openai_provider, fake_openai,
                                                                   keys, converse, api_for):
    failing(fake_openai)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, raw = converse(thread, users["alice"], "Hello")
    assert run.status == Run.Status.FAILED and run.error["code"] == "bad_request"
    assert SECRET_TEXT in run.error["message"]  # stored for the administrators (key-scrubbed)

    # REST: the run and the thread's messages, as the member and as the workspace's admin.
    member, admin = api_for(users["alice"]), api_for(users["admin"])
    shown = member.get(f"/api/v1/runs/{run.pk}/").json()["error"]
    assert SECRET_TEXT not in json.dumps(shown)
    assert shown["code"] == "bad_request" and "error code: bad_request" in shown["message"]
    assert "rejected the request" in shown["message"]
    assert SECRET_TEXT in admin.get(f"/api/v1/runs/{run.pk}/").json()["error"]["message"]
    member_messages = member.get(f"/api/v1/threads/{thread.pk}/messages/").json()
    admin_messages = admin.get(f"/api/v1/threads/{thread.pk}/messages/").json()
    assert SECRET_TEXT not in json.dumps(member_messages)
    [failed] = [m for m in member_messages if m["role"] == "assistant"]
    assert failed["status"] == "error" and failed["error"]["code"] == "bad_request"
    assert SECRET_TEXT in json.dumps(admin_messages)

    # SSE replay of the finished run.
    async def sse(key):
        response = await AsyncClient().get(f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Token {key}"})
        return parse_sse(await read_stream(response))

    member_events = asyncio.run(sse(keys["alice"]))
    assert member_events[-1]["type"] == "run.failed" and member_events[-1]["error"]["code"] == "bad_request"
    assert SECRET_TEXT not in json.dumps(member_events)
    assert SECRET_TEXT in json.dumps(asyncio.run(sse(keys["admin"])))


async def _ws_events(key, thread_id, content=None, run_id=None):
    comm = WebsocketCommunicator(application, f"/ws/threads/{thread_id}/",
                                 headers=[(b"authorization", f"Token {key}".encode())])
    connected, _ = await comm.connect(timeout=5)
    assert connected
    if content is not None:
        await comm.send_json_to({"type": "message.send", "content": content})
    else:
        await comm.send_json_to({"type": "run.resume", "run_id": run_id, "after_seq": 0})
    events = []
    while not events or events[-1]["type"] not in ("run.failed", "run.completed", "error"):
        events.append(await comm.receive_json_from(timeout=20))
    await comm.disconnect()
    return events


def test_the_websocket_shows_members_a_generic_failure_and_admins_the_detail(users, workspaces, openai_provider,
                                                                            fake_openai, keys):
    failing(fake_openai)
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    live = asyncio.run(_ws_events(keys["alice"], thread.pk, content="Hello"))
    failed = live[-1]
    assert failed["type"] == "run.failed" and failed["error"]["code"] == "bad_request"
    assert SECRET_TEXT not in json.dumps(live) and "error code: bad_request" in failed["error"]["message"]
    run_id = failed["run_id"]
    # The workspace's admin re-reading the same run sees what the provider said.
    replay = asyncio.run(_ws_events(keys["admin"], thread.pk, run_id=run_id))
    assert replay[-1]["type"] == "run.failed" and SECRET_TEXT in replay[-1]["error"]["message"]


def test_who_sees_the_detail(users, workspaces):
    from agents.presentation import sees_error_details

    staff = users["dave"]  # a member of another workspace only
    staff.is_staff = True
    staff.save()
    demo, other = workspaces["demo"].pk, workspaces["other"].pk
    assert sees_error_details(user=staff, workspace_id=demo)  # staff: everywhere
    assert sees_error_details(user=users["admin"], workspace_id=demo)  # the workspace's admin
    assert not sees_error_details(user=users["admin"], workspace_id=other)  # not another workspace's
    assert not sees_error_details(user=users["bob"], workspace_id=demo)  # a member
    assert not sees_error_details(user=users["carol"], workspace_id=demo)  # a viewer
    assert sees_error_details(user=users["admin"]) and not sees_error_details(user=users["bob"])


def test_the_openai_compatible_api_hides_the_upstream_text_from_members(users, workspaces, openai_provider,
                                                                         fake_openai, keys, settings):
    failing(fake_openai, 2)
    body = {"model": "fake-openai", "messages": [{"role": "user", "content": "Hi"}]}

    def ask(user):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {keys[user]}", HTTP_X_WORKSPACE="demo")
        return client.post("/v1/chat/completions", body, content_type="application/json")

    member = ask("alice")
    assert member.status_code == 502
    error = member.json()["error"]
    assert error["code"] == "bad_request" and SECRET_TEXT not in json.dumps(member.json())
    admin = ask("admin")
    assert admin.status_code == 502 and SECRET_TEXT in admin.json()["error"]["message"]


def test_provider_status_hides_a_probes_upstream_text_from_members(users, openai_provider, api_for):
    openai_provider.health_status = f"error: request rejected (HTTP 400): {SECRET_TEXT}"
    openai_provider.health_checked_at = timezone.now()
    openai_provider.save()

    def status(user):
        providers = api_for(users[user]).get("/api/v1/providers/").json()
        return next(p["status"] for p in providers if p["slug"] == "fake-openai")

    assert status("alice") == "error: the provider refused the platform's check; ask an administrator"
    assert SECRET_TEXT in status("admin")
    models = api_for(users["alice"]).get("/api/v1/providers/fake-openai/models/").json()
    assert SECRET_TEXT not in json.dumps(models)


def test_the_chat_page_hides_a_probes_upstream_text_from_members(users, workspaces, openai_provider):
    openai_provider.health_status = f"unreachable: {SECRET_TEXT} at 10.0.0.7:443"
    openai_provider.health_checked_at = timezone.now()
    openai_provider.save()
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    member, admin = Client(), Client()
    member.force_login(users["alice"])
    admin.force_login(users["admin"])
    page = member.get(f"/chat/{thread.pk}/").content.decode()
    assert "Fake OpenAI" in page and SECRET_TEXT not in page and "10.0.0.7" not in page
    assert SECRET_TEXT in admin.get("/chat/").content.decode()


def test_a_members_own_words_errors_are_shown_as_they_are(users, workspaces, openai_provider, api_for, settings):
    settings.RUN_EXECUTOR = "none"
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run = run_create(thread=thread, user=users["alice"], content="Hi").run
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, error={
        "code": "budget_exceeded", "message": "The budget is used up: 10 of 10 tokens per day."})
    shown = api_for(users["alice"]).get(f"/api/v1/runs/{run.pk}/").json()["error"]
    assert shown["message"] == "The budget is used up: 10 of 10 tokens per day."


def test_error_for_viewer_table():
    from agents.presentation import error_for_viewer

    stored = {"code": "agent_failed", "message": f"Ops agent failed: {SECRET_TEXT}"}
    assert error_for_viewer(stored, detailed=True) == stored
    shown = error_for_viewer(stored, detailed=False)
    assert SECRET_TEXT not in shown["message"] and shown["code"] == "agent_failed"
    assert error_for_viewer({}, detailed=False) == {}
    unknown = error_for_viewer({"code": "something_new", "message": SECRET_TEXT}, detailed=False)
    assert SECRET_TEXT not in unknown["message"] and "error code: something_new" in unknown["message"]
