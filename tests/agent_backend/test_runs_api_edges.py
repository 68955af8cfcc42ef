"""Edge cases of the agent_runs backend against a scripted fake of the Runs API (real HTTP on
loopback, Hermes' wire format): what the real gateway cannot be made to produce on demand."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.catalogue import models_refresh, provider_health
from agents.models import Run, ToolCall
from agents.runs import lifecycle
from agents.runs.driver import run_turn
from agents.services import run_cancel, run_create
from chat.models import Message
from tests.conftest import joined_text, make_thread, types
from tests.fakes.agent_runs_server import (
    AwaitApproval,
    Hang,
    Keepalive,
    Raw,
    Sleep,
    Status,
)

from .conftest import FAKE_AGENT_KEY as KEY

pytestmark = pytest.mark.django_db(transaction=True)

@pytest.fixture
def thread(users, workspaces, provider):
    return make_thread(users["admin"], workspaces["demo"], provider)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def approve_now(user, tool_call_id, decision="approve"):
    ToolCall.objects.filter(pk=tool_call_id).update(requested_at=timezone.now() - timedelta(seconds=11))
    return api(user).post(f"/api/v1/tool-calls/{tool_call_id}/decision/", {"decision": decision}, format="json")


def test_malformed_events_and_keepalives_are_skipped(users, thread, fake_agent, converse):
    fake_agent.script([
        Keepalive(),
        {"event": "message.delta", "delta": "Disk "},
        Raw(b"data: {not json\n\n"),
        Raw(b'data: {"no_event_key": 1}\n\n'),
        Keepalive(),
        {"event": "something.new", "detail": "ignored"},
        {"event": "reasoning.available", "text": "I should check df"},
        {"event": "message.delta", "delta": "usage is 41%."},
        {"event": "run.completed", "output": "Disk usage is 41%.", "usage": {"input_tokens": 12, "output_tokens": 5,
                                                                             "total_tokens": 17}},
    ])
    run, events = converse(thread, users["admin"], "disk?")
    assert run.status == Run.Status.COMPLETED
    assert joined_text(events) == "Disk usage is 41%."
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.content == "Disk usage is 41%." and answer.reasoning == "I should check df"
    assert (answer.usage["input_tokens"], answer.usage["output_tokens"]) == (12, 5)  # metered: test_agent_usage
    assert run.backend_state["events_read"] == 7  # every data event read, malformed ones included


def test_a_stream_of_keepalives_only_ends_by_the_run_status(users, thread, fake_agent, converse):
    fake_agent.script([Keepalive(), Sleep(0.3), Keepalive(), Status("completed", {"output": "Done quietly."}), Hang()])
    run, events = converse(thread, users["admin"], "do it quietly")
    assert run.status == Run.Status.COMPLETED
    assert joined_text(events) == "Done quietly."  # what was never streamed comes as one delta
    assert Message.objects.get(run=run, role="assistant").content == "Done quietly."


def test_remote_failure_is_an_in_thread_error_with_the_root_cause(users, thread, fake_agent, converse):
    fake_agent.script([{"event": "message.delta", "delta": "Checking"},
                       {"event": "run.failed", "error": "model provider returned 401: bad key"}])
    run, events = converse(thread, users["admin"], "check")
    assert run.status == Run.Status.FAILED and run.error["code"] == "agent_failed"
    assert "401: bad key" in events[-1]["error"]["message"] and "Ops agent" in events[-1]["error"]["message"]
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.status == "truncated" and answer.content == "Checking"


def test_tool_events_make_ledger_rows_in_order(users, thread, fake_agent, converse):
    fake_agent.script([
        {"event": "tool.started", "tool": "terminal", "preview": "uptime"},
        {"event": "tool.started", "tool": "read_file", "preview": "/etc/hostname"},
        {"event": "tool.completed", "tool": "terminal", "duration": 0.25, "error": False},
        {"event": "tool.completed", "tool": "read_file", "duration": 0.01, "error": True},
        {"event": "run.completed", "output": "up 3 days", "usage": {}},
    ])
    run, events = converse(thread, users["admin"], "uptime?")
    started = [e for e in events if e["type"] == "tool.started"]
    completed = [e for e in events if e["type"] == "tool.completed"]
    assert [e["name"] for e in started] == ["terminal", "read_file"]
    assert [(e["tool_call_id"], e["status"]) for e in completed] == [(started[0]["tool_call_id"], "succeeded"),
                                                                      (started[1]["tool_call_id"], "failed")]
    rows = {str(r.pk): r for r in ToolCall.objects.filter(run=run)}
    assert rows[started[0]["tool_call_id"]].duration_ms == 250
    assert rows[started[1]["tool_call_id"]].is_error
    answer = Message.objects.get(run=run, role="assistant")
    assert [c["name"] for c in answer.tool_calls] == ["terminal", "read_file"]
    # Every call has a tool message: the thread's history stays valid for any later provider.
    assert Message.objects.filter(run=run, role="tool").count() == 2


@pytest.mark.db_backends
def test_nul_in_the_agents_events_is_stored_as_replacement_character(users, thread, fake_agent, converse):
    """PostgreSQL stores no NUL: the agent's text, reasoning and tool preview arrive with U+FFFD
    (chatplatform.safe_input.storable), and what streamed is what was stored."""
    fake_agent.script([
        {"event": "reasoning.available", "text": "che\x00ck"},
        {"event": "tool.started", "tool": "terminal", "preview": "cat a\x00b"},
        {"event": "tool.completed", "tool": "terminal", "duration": 0.1, "error": False},
        {"event": "message.delta", "delta": "bin\x00ary "},
        {"event": "message.delta", "delta": "file."},
        {"event": "run.completed", "output": "bin\x00ary file.", "usage": {}},
    ])
    run, events = converse(thread, users["admin"], "cat it")
    assert run.status == Run.Status.COMPLETED, run.error
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.content == "bin\ufffdary file." == joined_text(events)
    assert answer.reasoning == "che\ufffdck"
    assert ToolCall.objects.get(run=run).arguments == {"command": "cat a\ufffdb"}


def _park(fake_agent, thread, user, sink_for, **approval):
    fake_agent.script([
        {"event": "tool.started", "tool": "terminal", "preview": "rm -r /srv/old"},
        AwaitApproval("rm -r /srv/old", **approval),
        {"event": "tool.completed", "tool": "terminal", "duration": 0.1, "error": False},
        {"event": "message.delta", "delta": "Removed."},
        {"event": "run.completed", "output": "Removed.", "usage": {}},
    ])
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=user, content="remove /srv/old").run
    return run, sink.until_parked(run.pk), sink


def test_a_decision_the_agent_no_longer_waits_for_is_reported(users, thread, fake_agent, sink_for):
    run, events, sink = _park(fake_agent, thread, users["admin"], sink_for, timeout_s=0.2)
    time.sleep(0.5)  # the agent timed out meanwhile and moved on
    assert approve_now(users["admin"], events[-1]["tool_call_id"]).status_code == 200
    rest = sink.until_terminal(run.pk)
    assert fake_agent.approvals == ["once"]  # forwarded, and refused with 409
    ledger = ToolCall.objects.get(pk=events[-1]["tool_call_id"])
    assert ledger.status == ToolCall.Status.STATUS_UNKNOWN and ledger.decision == "approve"
    assert "no longer waiting" in ledger.summary
    completed = [e for e in rest if e["type"] == "tool.completed"]
    assert len(completed) == 1 and completed[0]["is_error"] and "no longer waiting" in completed[0]["summary"]
    assert types(rest)[-1] == "run.completed" and ToolCall.objects.filter(run=run).count() == 1


@pytest.mark.parametrize(("approve_as", "choices", "sent"), [
    ("once", ("once", "session", "always", "deny"), "once"),
    ("session", ("once", "session", "always", "deny"), "session"),
    ("always", ("once", "session", "deny"), "once"),  # the agent does not offer it for this command
])
def test_what_approve_forwards_is_the_admins_choice(users, thread, provider, fake_agent, sink_for, approve_as,
                                                     choices, sent):
    provider.agent_approve_as = approve_as
    provider.save()
    run, events, sink = _park(fake_agent, thread, users["admin"], sink_for, choices=choices)
    assert approve_now(users["admin"], events[-1]["tool_call_id"]).status_code == 200
    rest = sink.until_terminal(run.pk)
    assert fake_agent.approvals == [sent] and types(rest)[-1] == "run.completed"
    assert ToolCall.objects.get(pk=events[-1]["tool_call_id"]).status == ToolCall.Status.SUCCEEDED
    assert joined_text(rest) == "Removed."  # the stream kept while parked delivered the rest


def test_cancel_while_waiting_denies_and_stops_the_remote_run(users, thread, fake_agent, sink_for):
    run, events, sink = _park(fake_agent, thread, users["admin"], sink_for)
    run_cancel(run=Run.objects.get(pk=run.pk), user=users["admin"])
    assert types(sink.until_terminal(run.pk))[-1] == "run.cancelled"
    deadline = time.monotonic() + 10
    while not fake_agent.stops and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake_agent.approvals == ["deny"] and fake_agent.stops == [run.backend_state.get("remote_run_id")
                                                                     or Run.objects.get(pk=run.pk).backend_state[
                                                                         "remote_run_id"]]


def test_a_recovered_run_reattaches_and_never_starts_the_remote_run_twice(users, thread, fake_agent, sink_for):
    fake_agent.script([{"event": "message.delta", "delta": "Half of"}, Sleep(0.2),
                       Status("completed", {"output": "Half of the answer, then the rest."}), Hang()])
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=users["admin"], content="go").run
    sink.until_terminal(run.pk)
    assert len(fake_agent.started) == 1
    # A worker that died mid-stream: the run is running again with its remote id kept.
    remote = Run.objects.get(pk=run.pk).backend_state["remote_run_id"]
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED, finished_at=None)
    msg = Message.objects.get(run=run, role="assistant")
    Message.objects.filter(pk=msg.pk).update(status=Message.Status.STREAMING, content="Half of")
    run_turn(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED and run.backend_state["remote_run_id"] == remote
    assert len(fake_agent.started) == 1  # re-attached: events gone (404), the status gave the output
    assert Message.objects.get(pk=msg.pk).content == "Half of the answer, then the rest."


def test_a_run_interrupted_while_starting_is_not_started_again(users, thread, fake_agent, converse):
    user_message = Message.objects.create(thread=thread, position=1, role="user", content="go")
    run = Run.objects.create(thread=thread, user=users["admin"], user_message=user_message, provider=thread.provider,
                             model="hermes-agent")
    lifecycle.run_backend_state_save(run_id=run.pk, state={"phase": "starting"})
    run_turn(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error["code"] == "interrupted" and not fake_agent.started


def test_a_forgotten_remote_run_fails_with_a_notice(users, thread, fake_agent, sink_for):
    fake_agent.script([{"event": "message.delta", "delta": "Partial"}, Hang()])
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=users["admin"], content="go").run
    while sink.until_any(run.pk)["type"] != "text.delta":
        pass
    fake_agent.forget = True  # the gateway restarted: the stream is cut, the run unknown
    fake_agent.drop.set()
    events = sink.until_terminal(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error["code"] == "agent_run_lost"
    assert "no longer knows this run" in events[-1]["error"]["message"]
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.content == "Partial" and answer.status == "truncated"


def test_health_and_refresh(provider, fake_agent, monkeypatch):
    assert provider_health(provider) == "ok"
    result = models_refresh(provider=provider)
    assert result.status == "ok" and result.listed == ["hermes-agent"]
    assert fake_agent.headers[-1]["authorization"] == f"Bearer {KEY}"
    fake_agent.features["run_approval_response"] = False
    assert models_refresh(provider=provider).status == "error: the agent does not offer run_approval_response"
    monkeypatch.setenv("TEST_AGENT_KEY", "wrong-key-0123456789")
    assert models_refresh(provider=provider).status.startswith("error: invalid API key")
    monkeypatch.delenv("TEST_AGENT_KEY")
    assert provider_health(provider) == "not configured: set TEST_AGENT_KEY"
    monkeypatch.setenv("TEST_AGENT_KEY", KEY)
    fake_agent.stop()
    status = models_refresh(provider=provider).status
    assert status.startswith("unreachable:") and KEY not in status
    provider.refresh_from_db()
    assert provider.health_status == status and provider_health(provider) == status


def test_an_agent_without_its_key_is_not_called(users, thread, fake_agent, monkeypatch, converse):
    monkeypatch.delenv("TEST_AGENT_KEY")
    run, events = converse(thread, users["admin"], "go")
    assert run.status == Run.Status.FAILED and run.error["code"] == "not_configured"
    assert "set TEST_AGENT_KEY" in events[-1]["error"]["message"] and not fake_agent.started
