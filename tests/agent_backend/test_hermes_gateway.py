"""The Hermes agent (hermes-agent 0.19, the real gateway in its own venv) as a chat target.

Every turn goes the real way: ``run_create`` → the embedded executor → ``run_turn`` → the
``agent_runs`` backend → the gateway's Runs API → the gateway's agent → the scripted model on
loopback; events are read from the real channel layer. The agent's tools run for real in a
throwaway folder (``hermes.workdir``); the scripted model asks only for harmless commands.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import Environment, Run, ToolCall
from agents.services import run_cancel, run_create
from chat.models import Message
from tests.conftest import joined_text, make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks

from .conftest import start_gateway

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.heavy]


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def remote_run(hermes, run: Run) -> dict:
    run.refresh_from_db()
    remote = run.backend_state["remote_run_id"]
    return httpx.get(f"{hermes.base_url}/runs/{remote}", headers={"Authorization": f"Bearer {hermes.key}"},
                     timeout=5).json()


@pytest.fixture
def admin_thread(users, workspaces, agent_provider):
    return make_thread(users["admin"], workspaces["demo"], agent_provider)


def test_plain_answer_streams_with_history(users, admin_thread, agent_model, hermes, converse):
    Message.objects.create(thread=admin_thread, position=1, role="user", content="Earlier question about disks")
    Message.objects.create(thread=admin_thread, position=2, role="assistant", content="Earlier answer: 40% used")
    agent_model.script(text_chunks("The web01 host is healthy and has 12 GB free.", pieces=6))
    run, events = converse(admin_thread, users["admin"], "How is web01?")

    assert run.status == Run.Status.COMPLETED, run.error
    assert types(events)[0] == "run.started" and types(events)[-1] == "run.completed"
    assert joined_text(events).strip() == "The web01 host is healthy and has 12 GB free."
    assert "text.delta" in types(events)
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.status == "complete" and answer.content == remote_run(hermes, run)["output"]
    assert answer.content == "The web01 host is healthy and has 12 GB free."
    assert answer.provider == "hermes"
    # Our history went in as conversation_history, the new message as input.
    sent = [m for m in agent_model.streamed_requests[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert [m["content"] for m in sent][-3:] == ["Earlier question about disks", "Earlier answer: 40% used",
                                                 "How is web01?"]
    assert run.backend_state["remote_run_id"].startswith("run_") and run.backend_state["events_read"] >= 2


def test_terminal_call_shows_tool_progress_and_a_ledger_row(users, admin_thread, agent_model, hermes, converse):
    (hermes.workdir / "inventory.txt").write_text("web01\nweb02\n")
    agent_model.script(
        tool_call_chunks([("call_1", "terminal", json.dumps({"command": "wc -l inventory.txt"}))]),
        text_chunks("There are 2 hosts in the inventory."),
    )
    run, events = converse(admin_thread, users["admin"], "How many hosts?")

    assert run.status == Run.Status.COMPLETED, run.error
    started = next(e for e in events if e["type"] == "tool.started")
    completed = next(e for e in events if e["type"] == "tool.completed")
    assert started["name"] == "terminal" and "wc -l inventory.txt" in started["arguments_summary"]
    assert completed["tool_call_id"] == started["tool_call_id"] and completed["status"] == "succeeded"
    assert types(events).index("tool.started") < types(events).index("tool.completed") < types(events).index(
        "run.completed")
    ledger = ToolCall.objects.get(pk=started["tool_call_id"])
    assert ledger.status == ToolCall.Status.SUCCEEDED and ledger.tool_name == "terminal"
    assert ledger.arguments == {"command": "wc -l inventory.txt"} and ledger.duration_ms is not None
    # The command really ran on the agent's side: its output went back to the model.
    tool_results = [m for m in agent_model.streamed_requests[-1]["messages"] if m["role"] == "tool"]
    assert any("2 inventory.txt" in str(m["content"]) for m in tool_results)
    assert Message.objects.get(run=run, role="assistant").content == "There are 2 hosts in the inventory."


def _dangerous_turn(agent_model, hermes, sink_for, thread, user, victim):
    victim.mkdir()
    (victim / "old.log").write_text("stale")
    agent_model.script(
        tool_call_chunks([("call_rm", "terminal", json.dumps({"command": f"rm -r {victim}"}))]),
        text_chunks("Cleanup finished."),
    )
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=user, content="clean up the old logs")
    return created.run, sink.until_parked(created.run.pk), sink


def test_dangerous_command_waits_for_our_approval_and_runs_once(users, admin_thread, agent_model, hermes, sink_for):
    env = Environment.objects.create(name="ops-prod", tier="prod")
    admin_thread.provider.environment = env
    admin_thread.provider.save()
    victim = hermes.workdir / "victim-approve"
    run, events, sink = _dangerous_turn(agent_model, hermes, sink_for, admin_thread, users["admin"], victim)

    request = events[-1]
    assert request["type"] == "approval.requested" and request["tool"] == "terminal"
    assert f"rm -r {victim}" in request["arguments_summary"] and request["description"] == "recursive delete"
    assert request["risk_level"] == "dangerous" and request["dangerous"] and request["countdown_s"] == 10
    assert request["env_context"] == "prod"
    assert victim.exists(), "nothing runs before a person decides"
    assert remote_run(hermes, run)["status"] == "waiting_for_approval"
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_APPROVAL and not run.lease_owner  # no worker holds it

    url = f"/api/v1/tool-calls/{request['tool_call_id']}/decision/"
    early = api(users["admin"]).post(url, {"decision": "approve"}, format="json")
    assert early.status_code == 409 and early.json()["error"]["code"] == "countdown"  # our countdown applies
    ToolCall.objects.filter(pk=request["tool_call_id"]).update(requested_at=timezone.now() - timedelta(seconds=11))
    assert api(users["admin"]).post(url, {"decision": "approve"}, format="json").status_code == 200
    rest = sink.until_terminal(run.pk, timeout=60)

    assert rest[0]["type"] == "approval.resolved" and rest[0]["decided_by"] == "admin"
    assert types(rest)[-1] == "run.completed"
    assert not victim.exists(), "approved: the agent ran the command"
    ledger = ToolCall.objects.get(pk=request["tool_call_id"])
    assert ledger.status == ToolCall.Status.SUCCEEDED and ledger.decision == "approve"
    assert ledger.decided_by == users["admin"] and ledger.env_context == "prod"
    done = [e for e in rest if e["type"] == "tool.completed"]
    assert [e["tool_call_id"] for e in done] == [request["tool_call_id"]]
    assert Message.objects.get(run=run, role="assistant").content == "Cleanup finished."


def test_denied_command_is_not_run(users, admin_thread, agent_model, hermes, sink_for):
    victim = hermes.workdir / "victim-deny"
    run, events, sink = _dangerous_turn(agent_model, hermes, sink_for, admin_thread, users["admin"], victim)
    request = events[-1]
    url = f"/api/v1/tool-calls/{request['tool_call_id']}/decision/"
    assert api(users["admin"]).post(url, {"decision": "deny"}, format="json").status_code == 200
    rest = sink.until_terminal(run.pk, timeout=60)

    assert types(rest)[-1] == "run.completed"
    assert victim.exists() and (victim / "old.log").read_text() == "stale"
    ledger = ToolCall.objects.get(pk=request["tool_call_id"])
    assert ledger.status == ToolCall.Status.DENIED and ledger.is_error and "Denied by admin" in ledger.summary
    completed = [e for e in rest if e["type"] == "tool.completed"]
    assert [e["tool_call_id"] for e in completed] == [request["tool_call_id"]] and completed[0]["is_error"]
    assert ToolCall.objects.filter(run=run).count() == 1
    # The agent was told: the model's next request carries the refusal as the tool result.
    tool_results = [str(m["content"]) for m in agent_model.streamed_requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_results and "denied" in tool_results[-1].lower()


def test_stop_mid_run_stops_the_remote_run(users, admin_thread, agent_model, hermes, sink_for):
    words = "".join(f"line{n} " for n in range(60))
    agent_model.script(text_chunks(words, pieces=60))
    agent_model.delay_s = 0.1
    try:
        sink = sink_for(admin_thread.pk)
        run = run_create(thread=admin_thread, user=users["admin"], content="stream a lot").run
        seen = []
        while "line5" not in joined_text(seen):
            seen.append(sink.until_any(run.pk))
        run_cancel(run=Run.objects.get(pk=run.pk), user=users["admin"])
        rest = sink.until_terminal(run.pk, timeout=30)
    finally:
        agent_model.delay_s = 0.0
    assert types(rest)[-1] == "run.cancelled"
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.status == "cancelled" and "line5" in answer.content and not answer.error
    assert words.startswith(answer.content.strip())
    assert remote_run(hermes, run)["status"] == "cancelled"  # the agent confirmed the stop


def test_gateway_killed_mid_run_fails_in_thread_and_keeps_the_partial_text(
        users, workspaces, hermes_exe, agent_model, tmp_path_factory, sink_for, monkeypatch, settings):
    from agents.models import Provider

    settings.AGENT_RUNS_UNREACHABLE_S = 1.0
    gateway = start_gateway(hermes_exe, agent_model, tmp_path_factory)
    try:
        monkeypatch.setenv("TEST_HERMES_KEY2", gateway.key)
        provider = Provider.objects.create(slug="hermes-2", name="Hermes two", kind="agent_runs",
                                           base_url=gateway.base_url, api_key_env="TEST_HERMES_KEY2",
                                           default_model="hermes-agent")
        thread = make_thread(users["admin"], workspaces["demo"], provider, model="hermes-agent")
        agent_model.script(text_chunks("".join(f"part{n} " for n in range(80)), pieces=80))
        agent_model.delay_s = 0.1
        sink = sink_for(thread.pk)
        run = run_create(thread=thread, user=users["admin"], content="long answer").run
        seen = []
        while "part8" not in joined_text(seen):
            seen.append(sink.until_any(run.pk))
        time.sleep(1.2)  # the partial text is persisted at most a second behind
        gateway.kill()
        rest = sink.until_terminal(run.pk, timeout=30)
    finally:
        agent_model.delay_s = 0.0
        gateway.cleanup()
    failed = rest[-1]
    assert failed["type"] == "run.failed" and failed["error"]["code"] == "agent_unreachable"
    assert "Hermes two" in failed["error"]["message"] and failed["retryable"]
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.status == "truncated" and answer.content.startswith("part0 part1 ") and "part8" in answer.content
    assert answer.error["code"] == "agent_unreachable"


def test_members_cannot_drive_an_agent(users, workspaces, agent_provider, converse):
    thread = make_thread(users["alice"], workspaces["demo"], agent_provider)
    run, events = converse(thread, users["alice"], "rm everything")
    assert run.status == Run.Status.FAILED and run.error["code"] == "forbidden"
    assert "Only workspace admins" in events[-1]["error"]["message"]
    assert "backend_state" not in run.error and not run.backend_state.get("remote_run_id")


def test_the_agents_usage_is_metered_with_its_cost(users, admin_thread, agent_provider, agent_model, hermes,
                                                   converse):
    from decimal import Decimal

    from agents.models import LLMModel
    from usage.models import ModelPrice, UsageRecord

    model = LLMModel.objects.create(provider=agent_provider, name="hermes-agent")
    ModelPrice.objects.create(model=model, input_per_mtok=Decimal(1), output_per_mtok=Decimal(4))
    agent_model.script(text_chunks("All green.", pieces=2)
                       + [{"choices": [], "usage": {"prompt_tokens": 2500, "completion_tokens": 40,
                                                    "total_tokens": 2540}}])
    run, events = converse(admin_thread, users["admin"], "Status?")

    assert run.status == Run.Status.COMPLETED, run.error
    reported = remote_run(hermes, run)["usage"]  # what the gateway says its model used
    assert reported["input_tokens"] == 2500 and reported["output_tokens"] == 40
    answer = Message.objects.get(run=run, role="assistant")
    record = UsageRecord.objects.get(message=answer)
    assert (record.input_tokens, record.output_tokens) == (2500, 40)
    assert record.cost == Decimal("0.00266") and answer.usage["cost"] == "0.00266000"
