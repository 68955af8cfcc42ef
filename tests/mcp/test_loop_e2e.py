"""End to end: a scripted model (the fake OpenAI server) calls MCP tools through the real
loop — ledger, events, approvals, timeouts, retries and cancellation look the same as for a
built-in tool. The MCP servers are real processes (``tests.mcp.http_server``)."""

from __future__ import annotations

import threading
import time

import pytest
from rest_framework.test import APIClient

from agents.models import ToolCall, ToolPolicy
from agents.services import run_cancel, run_create
from chat.models import Message
from mcp_client import sync
from mcp_client.models import MCPServer
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.mcp.conftest import enable
from tests.policy.tooltest import call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread(users, workspaces, openai_provider):
    return make_thread(users["alice"], workspaces["demo"], openai_provider)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def offered_names(request_body: dict) -> list[str]:
    return [t["function"]["name"] for t in request_body.get("tools", [])]


def converse_with(fake, sink_for, thread, user, calls, answer="Done."):
    fake.script(tool_call_chunks(calls), text_chunks(answer))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=user, content="go")
    return created.run, sink


def test_read_tool_through_the_loop_scope_args_never_sent(http_server, add_server, thread, users, fake_openai,
                                                         sink_for):
    lab_proc = http_server("lab")
    add_server("lab", url=lab_proc.url, allowlist=["echo", "whoami", "picture"])
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [
        call("c1", "echo", {"text": "hi", "user_id": 999, "workspace_id": 77}),
        call("c2", "whoami", {"user_id": "bob"}),
        call("c3", "picture", {}),
    ])
    events = sink.until_terminal(run.pk)
    assert types(events)[-1] == "run.completed"
    assert {"echo", "whoami", "picture"} <= set(offered_names(fake_openai.requests[0]))
    # the platform's scope arguments never reach the server unless its schema asks for them,
    # and then with the run's own values, whatever the model wrote
    calls = [entry for entry in lab_proc.log() if "tool" in entry]
    assert calls == [
        {"tool": "echo", "arguments": {"text": "hi"}},
        {"tool": "whoami", "arguments": {"user_id": str(users["alice"].pk)}},
        {"tool": "picture", "arguments": {}},
    ]
    ledger = {c.tool_name: c for c in ToolCall.objects.filter(run=run)}
    assert ledger["echo"].status == "succeeded" and ledger["echo"].result == "echo: hi"
    assert ledger["echo"].risk == "read" and ledger["echo"].attempts == 1
    assert ledger["echo"].arguments["user_id"] == users["alice"].pk  # pinned in the ledger, not sent
    assert ledger["echo"].arguments["model_scope_args"] == {"user_id": 999, "workspace_id": 77}
    assert ledger["whoami"].arguments["model_scope_args"] == {"user_id": "bob"}
    tool_messages = {m.tool_call_id: m.content for m in Message.objects.filter(thread=thread, role="tool")}
    assert tool_messages["c1"] == "echo: hi"
    assert tool_messages["c3"] == "[image (image/png, 70 bytes) — not shown]"
    started = [e for e in events if e["type"] == "tool.started"]
    completed = [e for e in events if e["type"] == "tool.completed"]
    assert [e["name"] for e in started] == ["echo", "whoami", "picture"]
    assert [e["status"] for e in completed] == ["succeeded"] * 3


def test_progress_notifications_become_tool_progress(http_server, add_server, thread, users, fake_openai, sink_for):
    add_server("lab", url=http_server("lab").url, allowlist=["count"])
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "count", {"n": 3})])
    events = sink.until_terminal(run.pk)
    progress = [e["label"] for e in events if e["type"] == "tool.progress"]
    assert progress == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert ToolCall.objects.get(run=run).result == "counted to 3"


def test_write_tool_needs_approval_then_runs_once(http_server, add_server, thread, users, fake_openai, sink_for):
    lab_proc = http_server("lab")
    add_server("lab", url=lab_proc.url, allowlist=["add_note"])
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "add_note", {"text": "x"})])
    events = sink.until_parked(run.pk)
    request = events[-1]
    assert request["tool"] == "add_note" and request["risk_level"] == "guarded"
    assert [e for e in lab_proc.log() if "tool" in e] == []
    response = api(users["alice"]).post(f"/api/v1/tool-calls/{request['tool_call_id']}/decision/",
                                        {"decision": "approve"}, format="json")
    assert response.status_code == 200
    rest = sink.until_terminal(run.pk)
    assert types(rest)[-1] == "run.completed"
    assert [e for e in lab_proc.log() if "tool" in e] == [{"tool": "add_note", "arguments": {"text": "x"}}]
    assert ToolCall.objects.get(pk=request["tool_call_id"]).status == "succeeded"


def test_server_disabled_while_a_call_waits_for_approval(http_server, add_server, thread, users, fake_openai,
                                                         sink_for):
    lab_proc = http_server("lab")
    server = add_server("lab", url=lab_proc.url, allowlist=["add_note"])
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "add_note", {"text": "x"})])
    request = sink.until_parked(run.pk)[-1]
    server.enabled = False
    server.save()
    sync.reconcile()
    response = api(users["alice"]).post(f"/api/v1/tool-calls/{request['tool_call_id']}/decision/",
                                        {"decision": "approve"}, format="json")
    assert response.status_code == 200
    rest = sink.until_terminal(run.pk)
    completed = next(e for e in rest if e["type"] == "tool.completed")
    assert completed["is_error"] and "was disabled by an administrator" in completed["summary"]
    assert [e for e in lab_proc.log() if "tool" in e] == []  # never sent
    assert types(rest)[-1] == "run.completed"


def test_read_call_server_dies_mid_call_retried_once_after_reconnecting(http_server, add_server, thread, users,
                                                                        fake_openai, sink_for, tmp_path):
    marker = tmp_path / "die-once"
    marker.write_text("1")
    lab_proc = http_server("lab", env={"LAB_DIE_ONCE": str(marker)})
    add_server("lab", url=lab_proc.url, allowlist=["die_read"])

    def restart_when_dead():  # the server comes back on the same port (e.g. a supervisor)
        lab_proc.proc.wait(60)
        lab_proc.start()

    threading.Thread(target=restart_when_dead, daemon=True).start()
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "die_read", {"key": "k"})])
    events = sink.until_terminal(run.pk, timeout=60)
    assert [e["attempt"] for e in events if e["type"] == "tool.retry"] == [2]
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == "succeeded" and ledger.attempts == 2 and ledger.result == "value of k"
    assert lab_proc.log() == [{"tool": "die_read", "arguments": {"key": "k"}}]  # the restarted server's log


def test_a_read_retry_waits_for_a_server_still_coming_back(http_server, add_server, thread, users, fake_openai,
                                                          sink_for, tmp_path):
    """The server is back on its port only after the platform's first reconnect found nothing
    listening (a slow restart, a loaded box): the retry keeps asking within the call's time
    instead of failing on that refusal."""
    from mcp_client.runtime import runtime

    marker = tmp_path / "die-once"
    marker.write_text("1")
    lab_proc = http_server("lab", env={"LAB_DIE_ONCE": str(marker)})
    add_server("lab", url=lab_proc.url, allowlist=["die_read"])

    def restart_after_a_refusal():
        lab_proc.proc.wait(60)
        deadline = time.monotonic() + 30
        while "ConnectError" not in (runtime.connection("lab").error or "") and time.monotonic() < deadline:
            time.sleep(0.02)  # polling the platform's state (a reconnect found nothing listening)
        lab_proc.start()

    threading.Thread(target=restart_after_a_refusal, daemon=True).start()
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "die_read", {"key": "k"})])
    events = sink.until_terminal(run.pk, timeout=60)
    ledger = ToolCall.objects.get(run=run)
    assert (ledger.status, ledger.attempts, ledger.result) == ("succeeded", 2, "value of k"), ledger.summary
    assert [e["attempt"] for e in events if e["type"] == "tool.retry"] == [2]


def test_write_call_server_dies_mid_call_is_status_unknown_never_resent(http_server, add_server, thread, users,
                                                                        fake_openai, sink_for):
    lab_proc = http_server("lab")
    add_server("lab", url=lab_proc.url, allowlist=["die_write"])
    policy = ToolPolicy.objects.get(tool_name="die_write")
    policy.approval_mode = "never"
    policy.save()
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "die_write", {"key": "k"})])
    events = sink.until_terminal(run.pk, timeout=60)
    assert "tool.retry" not in types(events)
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == "status_unknown" and ledger.attempts == 1
    assert "may or may not have taken effect" in ledger.summary
    assert not lab_proc.alive()
    assert MCPServer.objects.get(slug="lab").health_status.startswith("failed")
    assert types(events)[-1] == "run.completed"  # the chat goes on


def test_hanging_call_times_out_and_the_server_is_told_to_cancel(http_server, add_server, thread, users,
                                                                fake_openai, sink_for):
    lab_proc = http_server("lab")
    add_server("lab", url=lab_proc.url, allowlist=["hang"])
    ToolPolicy.objects.filter(tool_name="hang").update(timeout_s=1)
    sync.reconcile()
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "hang", {})])
    events = sink.until_terminal(run.pk)
    timeouts = [e for e in events if e["type"] == "tool.timeout"]
    assert len(timeouts) == 1 and timeouts[0]["retryable"] is True
    assert ToolCall.objects.get(run=run).status == "timeout"
    deadline = time.monotonic() + 10
    while {"cancelled": "hang"} not in lab_proc.log():
        assert time.monotonic() < deadline, "the server never saw notifications/cancelled"
        time.sleep(0.1)


def test_cancelling_the_run_cancels_the_open_mcp_call(http_server, add_server, thread, users, fake_openai, sink_for):
    lab_proc = http_server("lab")
    add_server("lab", url=lab_proc.url, allowlist=["hang"])
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "hang", {})])
    while sink.until_any(run.pk)["type"] != "tool.started":
        pass
    deadline = time.monotonic() + 10
    while {"tool": "hang", "arguments": {}} not in lab_proc.log():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run.refresh_from_db()
    run_cancel(run=run, user=users["alice"])
    rest = sink.until_terminal(run.pk)
    assert types(rest)[-1] == "run.cancelled"
    deadline = time.monotonic() + 10
    while {"cancelled": "hang"} not in lab_proc.log():
        assert time.monotonic() < deadline, "the server never saw notifications/cancelled"
        time.sleep(0.1)


def test_two_servers_same_tool_name_through_the_loop(http_server, add_server, thread, users, roles, fake_openai,
                                                    sink_for):
    github, neon = http_server("github"), http_server("neon")
    add_server("github", url=github.url)
    add_server("neon", url=neon.url)
    enable("neon__create_branch", "github__create_branch")
    ToolPolicy.objects.filter(tool_name__in=["neon__create_branch", "github__create_branch"]).update(
        approval_mode="never")
    ToolPolicy.objects.get(tool_name="github__create_branch").allowed_roles.set([roles["admin"]])
    sync.reconcile()
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [
        call("c1", "neon__create_branch", {"name": "b1"}),
        call("c2", "github__create_branch", {"name": "b2"}),  # not offered to a member: denied
    ])
    events = sink.until_terminal(run.pk)
    offered = offered_names(fake_openai.requests[0])
    assert "neon__create_branch" in offered and "github__create_branch" not in offered
    denied = [e for e in events if e["type"] == "permission.denied"]
    assert [d["tool"] for d in denied] == ["github__create_branch"]
    assert neon.log() == [{"tool": "create_branch", "arguments": {"name": "b1"}}]
    assert github.log() == []
    statuses = {c.tool_name: c.status for c in ToolCall.objects.filter(run=run)}
    assert statuses == {"neon__create_branch": "succeeded", "github__create_branch": "permission_denied"}


def test_large_results_are_truncated_for_the_model_but_kept_in_the_ledger(http_server, add_server, thread, users,
                                                                        fake_openai, sink_for):
    add_server("lab", url=http_server("lab").url, allowlist=["echo"])
    long_text = "The quick brown fox jumps over the lazy dog. " * 400  # 18 000 characters
    run, sink = converse_with(fake_openai, sink_for, thread, users["alice"], [call("c1", "echo", {"text": long_text})])
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"
    ledger = ToolCall.objects.get(run=run)
    assert ledger.result == f"echo: {long_text}"
    message = Message.objects.get(thread=thread, role="tool").content
    assert len(message) < 4500 < len(ledger.result) and message.endswith("…")
    assert fake_openai.requests[1]["messages"][-1]["content"] == message
