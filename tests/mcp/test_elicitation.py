"""An MCP server asks the user something mid-call (elicitation) and links resources: a scripted
model (the fake OpenAI server) calls the asking tools of real MCP servers (``tests.mcp.asking``,
streamable HTTP and stdio) through the real loop; the person answers through the API."""

from __future__ import annotations

import json
import logging
import sys
import time

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from rest_framework.test import APIClient

from agents.models import AuditEvent, ToolCall
from agents.services import run_create
from chatplatform.event_log import event_log
from mcp_client.models import MCPElicitation
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.mcp.conftest import ROOT, enable
from tests.policy.tooltest import call

pytestmark = pytest.mark.django_db(transaction=True)

STDIO_SERVER = str(ROOT / "tests" / "mcp" / "stdio_server.py")
SECRET = "tok-4f9c2e71-do-not-log"


@pytest.fixture
def thread(users, workspaces, openai_provider):
    return make_thread(users["alice"], workspaces["demo"], openai_provider)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def start(fake, sink_for, thread, user, tool, *, unattended: bool = False):
    fake.script(tool_call_chunks([call("c1", tool, {})]), text_chunks("Done."))
    sink = sink_for(thread.pk)
    with transaction.atomic():
        created = run_create(thread=thread, user=user, content="go")
        if unattended:  # an API /v1 run: nobody watches the chat
            from openai_api.models import ApiRun

            ApiRun.objects.create(run=created.run)
    return created.run, sink


def until(sink, run_id, wanted: str, seen: list) -> dict:
    """Collect ``run_id``'s events into ``seen`` up to the next one of type ``wanted``."""
    while True:
        event = sink.until_any(run_id)
        seen.append(event)
        if event["type"] == wanted:
            return event
        assert event["type"] not in ("run.completed", "run.failed", "run.cancelled"), types(seen)


def answer(user, event, action, content=None):
    body = {"action": action} | ({"content": content} if content is not None else {})
    return api(user).post(f"/api/v1/mcp/elicitations/{event['elicitation_id']}/", body, format="json")


def calls_at(server_log) -> list[dict]:
    return [e for e in server_log if "tool" in e]


@pytest.fixture
def ask_http(http_server, add_server):
    proc = http_server("ask")
    add_server("ask", url=proc.url)
    enable("book_table", "sign_in", "pester", "linker")
    return proc


@pytest.fixture
def ask_stdio(add_server, tmp_path, settings):
    log = tmp_path / "ask.jsonl"
    settings.MCP_ENV_ALLOWLIST = []
    add_server("askio", transport="stdio", command=sys.executable, args=[STDIO_SERVER],
               env={"ASK_TOOLS": "1", "ASK_LOG": str(log)})
    enable("book_table")

    class Proc:
        @staticmethod
        def log() -> list[dict]:
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return Proc


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_accepted_form_values_reach_the_server(request, transport, thread, users, fake_openai, sink_for):
    server = request.getfixturevalue("ask_http" if transport == "http" else "ask_stdio")
    run, sink = start(fake_openai, sink_for, thread, users["alice"], "book_table")
    seen: list = []
    asked = until(sink, run.pk, "elicitation.requested", seen)
    assert asked["server"] in ("ask", "askio") and asked["message"].startswith("<b>Booking</b>")
    fields = {f["name"]: f for f in asked["fields"]}
    assert fields["name"]["title"] == "Your name" and fields["name"]["required"] is True
    assert fields["size"]["type"] == "integer" and (fields["size"]["minimum"], fields["size"]["maximum"]) == (1, 12)
    assert fields["seating"]["enum"] == ["inside", "terrace"] and fields["seating"]["default"] == "inside"
    assert fields["newsletter"]["type"] == "boolean"
    assert not any(f["sensitive"] for f in fields.values())
    # the thread's messages carry the waiting question (a reload draws the card again)
    listed = api(users["alice"]).get(f"/api/v1/threads/{thread.pk}/messages/").json()
    waiting = [q for m in listed for c in m.get("tool_calls") or [] for q in c.get("elicitations", [])]
    assert [(q["elicitation_id"], q["status"], len(q["fields"])) for q in waiting] == [
        (asked["elicitation_id"], "pending", 4)]
    # only the run's owner may answer; values are checked against the fields first
    assert answer(users["bob"], asked, "accept", {"name": "Bob"}).status_code == 404
    bad = answer(users["alice"], asked, "accept", {"name": "Ann", "size": 40, "seating": "inside",
                                                     "newsletter": False})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid"
    assert answer(users["alice"], asked, "accept", {"name": "Ann", "size": 4, "seating": "terrace",
                                                      "newsletter": True}).status_code == 200
    assert answer(users["alice"], asked, "decline").status_code == 409  # answered already
    rest = sink.until_terminal(run.pk)
    resolved = next(e for e in rest if e["type"] == "elicitation.resolved")
    assert (resolved["action"], resolved["reason"]) == ("accept", "answered")
    assert resolved["content"]["name"] == "Ann"
    assert types(rest)[-1] == "run.completed"
    assert calls_at(server.log()) == [{"tool": "book_table", "arguments": {
        "action": "accept", "name": "Ann", "size": 4, "seating": "terrace", "newsletter": True}}]
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == "succeeded" and ledger.result == "booked for Ann, 4 people, terrace"
    assert MCPElicitation.objects.get().answer_encrypted == ""  # taken by the call: not kept
    listed = api(users["alice"]).get(f"/api/v1/threads/{thread.pk}/messages/").json()
    done = [q for m in listed for c in m.get("tool_calls") or [] for q in c.get("elicitations", [])]
    assert [(q["status"], q["reason"], "fields" in q) for q in done] == [("accept", "answered", False)]


@pytest.mark.parametrize("action,told", [("decline", "declined"), ("cancel", "cancelled")])
def test_decline_and_cancel_reach_the_server(ask_http, action, told, thread, users, fake_openai, sink_for):
    run, sink = start(fake_openai, sink_for, thread, users["alice"], "book_table")
    asked = until(sink, run.pk, "elicitation.requested", [])
    assert answer(users["alice"], asked, action).status_code == 200
    rest = sink.until_terminal(run.pk)
    assert types(rest)[-1] == "run.completed"
    assert calls_at(ask_http.log()) == [{"tool": "book_table", "arguments": {"action": action}}]
    assert ToolCall.objects.get(run=run).result == told


def test_unanswered_question_expires_as_cancel_and_the_call_timeout_does_not_count_the_wait(
        ask_http, add_server, thread, users, fake_openai, sink_for, settings):
    from agents.models import ToolPolicy

    settings.MCP_ELICITATION_TIMEOUT_S = 3
    ToolPolicy.objects.filter(tool_name="book_table").update(timeout_s=1)  # shorter than the wait
    started = time.monotonic()
    run, sink = start(fake_openai, sink_for, thread, users["alice"], "book_table")
    until(sink, run.pk, "elicitation.requested", [])
    rest = sink.until_terminal(run.pk)
    resolved = next(e for e in rest if e["type"] == "elicitation.resolved")
    assert (resolved["action"], resolved["reason"]) == ("cancel", "expired")
    assert time.monotonic() - started >= 3
    assert calls_at(ask_http.log()) == [{"tool": "book_table", "arguments": {"action": "cancel"}}]
    assert ToolCall.objects.get(run=run).status == "succeeded"  # not timed out while the person was asked
    row = MCPElicitation.objects.get()
    assert (row.status, row.reason) == ("cancel", "expired")
    assert answer(users["alice"], {"elicitation_id": str(row.pk)}, "accept", {"name": "late"}).status_code == 409


def test_unattended_run_declines_with_an_audit_note(ask_http, thread, users, fake_openai, sink_for):
    run, sink = start(fake_openai, sink_for, thread, users["alice"], "book_table", unattended=True)
    events = sink.until_terminal(run.pk)
    assert "elicitation.requested" not in types(events)
    resolved = next(e for e in events if e["type"] == "elicitation.resolved")
    assert (resolved["action"], resolved["reason"], resolved["server_name"]) == ("decline", "unattended", "Ask")
    assert calls_at(ask_http.log()) == [{"tool": "book_table", "arguments": {"action": "decline"}}]
    note = AuditEvent.objects.get(kind=AuditEvent.Kind.MCP_CALL, run=run)
    assert note.detail["reason"] == "unattended" and note.detail["action"] == "decline"


def test_sensitive_field_is_a_password_and_its_value_is_never_logged_or_stored(
        ask_http, thread, users, fake_openai, sink_for, caplog):
    caplog.set_level(logging.DEBUG)
    run, sink = start(fake_openai, sink_for, thread, users["alice"], "sign_in")
    seen: list = []
    asked = until(sink, run.pk, "elicitation.requested", seen)
    assert asked["fields"][0]["name"] == "api_token" and asked["fields"][0]["sensitive"] is True
    assert answer(users["alice"], asked, "accept", {"api_token": SECRET}).status_code == 200
    seen += sink.until_terminal(run.pk)
    resolved = next(e for e in seen if e["type"] == "elicitation.resolved")
    assert resolved["content"] == {"api_token": "***"}
    assert calls_at(ask_http.log()) == [{"tool": "sign_in", "arguments": {"action": "accept",
                                                                           "token_length": len(SECRET)}}]
    stored = async_to_sync(event_log().read)(str(run.pk))
    assert stored and SECRET not in json.dumps(stored)
    assert SECRET not in json.dumps(seen)
    assert SECRET not in caplog.text
    for model in (MCPElicitation, ToolCall, AuditEvent):
        assert SECRET not in json.dumps(list(model.objects.values()), default=str)


def test_a_server_asking_in_a_loop_is_declined_after_the_limit(ask_http, thread, users, fake_openai, sink_for,
                                                               settings):
    settings.MCP_ELICITATIONS_PER_CALL = 2
    run, sink = start(fake_openai, sink_for, thread, users["alice"], "pester")
    seen: list = []
    for _ in range(2):
        asked = until(sink, run.pk, "elicitation.requested", seen)
        assert answer(users["alice"], asked, "accept", {"answer": "no"}).status_code == 200
    rest = sink.until_terminal(run.pk)
    assert "elicitation.requested" not in types(rest)
    last = [e for e in rest if e["type"] == "elicitation.resolved"][-1]
    assert (last["action"], last["reason"]) == ("decline", "limit")
    assert [c["arguments"]["action"] for c in calls_at(ask_http.log())] == ["accept", "accept", "decline"]
    assert ToolCall.objects.get(run=run).result == "stopped after 3 questions (decline)"
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.MCP_CALL, detail__reason="limit").count() == 1


def test_resource_links_open_for_their_owner_only(ask_http, thread, users, fake_openai, sink_for, settings):
    run, sink = start(fake_openai, sink_for, thread, users["alice"], "linker")
    events = sink.until_terminal(run.pk)
    linked = next(e for e in events if e["type"] == "resource.linked")
    links = {link["uri"]: link for link in linked["links"]}
    assert set(links) == {"notes://today", "files://dot.png", "files://report.bin", "page://inline"}
    assert links["notes://today"]["name"] == "Today's notes"
    alice = APIClient()
    alice.force_login(users["alice"])
    text = alice.get(links["notes://today"]["url"])
    assert text.status_code == 200 and text["Content-Type"] == "text/plain; charset=utf-8"
    assert text["X-Content-Type-Options"] == "nosniff" and text.content == b"<script>alert('x')</script> Buy milk."
    image = alice.get(links["files://dot.png"]["url"])
    assert image.status_code == 200 and image["Content-Type"] == "image/png" and image.content.startswith(b"\x89PNG")
    page = alice.get(links["page://inline"]["url"])  # text/html at the server: never HTML here
    assert page.status_code == 200 and page["Content-Type"] == "text/plain; charset=utf-8"
    other = alice.get(links["files://report.bin"]["url"])  # anything else: a download, never shown
    assert other.status_code == 200 and other["Content-Type"] == "application/octet-stream"
    assert other["Content-Disposition"] == 'attachment; filename="report.bin"'
    assert other.content == b"\x00\x01 binary report"
    settings.MCP_RESOURCE_MAX_BYTES = 10
    assert alice.get(links["notes://today"]["url"]).status_code == 413
    server_id = links["notes://today"]["url"].split("/")[2]
    assert alice.get(f"/mcp-resources/{server_id}/", {"uri": "notes://private"}).status_code == 404  # not linked
    bob = APIClient()
    bob.force_login(users["bob"])
    assert bob.get(links["notes://today"]["url"]).status_code == 404


def test_cancelling_the_run_while_the_person_is_asked_cancels_the_question(ask_http, thread, users, fake_openai,
                                                                           sink_for):
    from agents.services import run_cancel

    run, sink = start(fake_openai, sink_for, thread, users["alice"], "book_table")
    asked = until(sink, run.pk, "elicitation.requested", [])
    run.refresh_from_db()
    run_cancel(run=run, user=users["alice"])
    assert types(sink.until_terminal(run.pk))[-1] == "run.cancelled"
    row = MCPElicitation.objects.filter(pk=asked["elicitation_id"])
    deadline = time.monotonic() + 10
    while row.values_list("status", "reason").get() != ("cancel", "cancelled"):
        assert time.monotonic() < deadline, row.values_list("status", "reason").get()
        time.sleep(0.05)
    assert answer(users["alice"], asked, "accept", {"name": "late"}).status_code == 409


@pytest.mark.parametrize("name,prop,sensitive", [
    ("password", {"type": "string"}, True),
    ("pin", {"type": "string", "format": "password"}, True),
    ("github_token", {"type": "string"}, True),
    ("key", {"type": "string", "title": "API key"}, True),
    ("client_secret", {"type": "string"}, True),
    ("private_key", {"type": "string"}, True),
    ("name", {"type": "string", "title": "Your name"}, False),
    ("passenger", {"type": "string"}, False),
    ("size", {"type": "integer"}, False),
])
def test_which_fields_are_sensitive(name, prop, sensitive):
    from mcp_client.elicitation import fields_from_schema

    field = fields_from_schema({"type": "object", "properties": {name: {**prop, "default": "x"}}})[0]
    assert field["sensitive"] is sensitive
    assert ("default" in field) is (not sensitive and prop["type"] == "string")  # never a sensitive default


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
    {"type": "object", "properties": {"address": {"type": "object", "properties": {}}}},
    {"type": "array"},
])
def test_schemas_outside_the_restricted_form_are_refused(schema):
    from mcp_client.elicitation import Unsupported, fields_from_schema

    with pytest.raises(Unsupported):
        fields_from_schema(schema)
