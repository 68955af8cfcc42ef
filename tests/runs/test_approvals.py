"""Human approval of risky calls, cancellation and crash recovery (issue: approvals)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.approvals.defaults import ensure_default_approval_policies
from agents.models import ApprovalPolicy, Environment, Run, ToolCall, ToolPolicy
from agents.risk import risk_classify
from agents.runs.driver import run_turn
from agents.runs.reaper import approvals_expire_due, reap_expired_runs
from agents.services import run_cancel, run_create
from chat.models import Membership, Message
from tests.conftest import joined_text, make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import Behaviour, call, scoped_toolbox

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def box(roles):
    toolbox, scope = scoped_toolbox()
    with scope:
        note = ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="always")
        note.allowed_roles.set([roles["member"], roles["admin"]])  # write tools: only roles named
        purge = ToolPolicy.objects.create(tool_name="records_purge", risk="dangerous", approval_mode="always")
        purge.allowed_roles.set([roles["member"], roles["admin"]])
        yield toolbox


def start_until_awaiting(fake, sink_for, thread, user, calls, answer="All done.", env_id=""):
    """Send a message (in environment ``env_id``) whose first model response is ``calls``;
    return (run, events so far)."""
    fake.script(tool_call_chunks(calls), text_chunks(answer))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=user, content="please do it", env_id=env_id)
    return created.run, sink.until_parked(created.run.pk), sink


# --- risk table --------------------------------------------------------------------------
@pytest.mark.parametrize(("risk", "mode", "env", "granted", "level", "needs", "countdown"), [
    ("read", "never", "", True, "safe", False, 0),
    ("write", "always", "dev-1", True, "guarded", True, 0),
    ("write", "writes_in_prod", "dev-1", True, "guarded", False, 0),
    ("write", "writes_in_prod", "prod-eu", True, "guarded", True, 0),
    ("write", "never", "prod-eu", True, "guarded", False, 0),
    ("dangerous", "never", "", True, "dangerous", True, 10),
    ("dangerous", "always", "staging", False, "dangerous", False, 0),  # permission first: no approval
    ("write", "always", "", False, "guarded", False, 0),
])
def test_risk_classification_table(db, risk, mode, env, granted, level, needs, countdown):
    result = risk_classify(risk=risk, approval_mode=mode, env_name=env, permission_granted=granted)
    assert (result.risk_level, result.needs_approval, result.countdown_s, result.permission_granted) == (
        level, needs, countdown, granted)


@pytest.mark.parametrize(("name", "tier"), [("prod-eu", "prod"), ("staging-2", "staging"), ("qa-test", "staging"),
                                            ("dev", "dev"), ("localhost", "dev"), ("eu-west", None)])
def test_environment_tier_from_name(db, name, tier):
    assert risk_classify(risk="write", approval_mode="always", env_name=name, permission_granted=True).env_context == tier


def test_environment_row_wins_over_the_name(db):
    Environment.objects.create(name="blue", tier="prod")
    assert risk_classify(risk="write", approval_mode="always", env_name="blue", permission_granted=True).env_context == "prod"


# --- approve / deny ----------------------------------------------------------------------
def test_write_call_waits_without_a_worker_then_runs_once_when_approved(box, users, alice_thread, fake_openai, sink_for, api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "note_write", {"text": "hello", "env_id": "staging-1"})],
                                             env_id="staging-1")
    request = events[-1]
    assert request["tool"] == "note_write" and request["risk_level"] == "guarded"
    assert request["env_context"] == "staging" and request["dangerous"] is False and request["countdown_s"] == 0
    assert box.calls == []
    ledger = ToolCall.objects.get(pk=request["tool_call_id"])
    assert ledger.status == "awaiting_approval"
    pending = api_for(users["alice"]).get("/api/v1/tool-calls/?status=awaiting_approval").json()["results"]
    assert [p["id"] for p in pending] == [str(ledger.pk)]

    response = api_for(users["alice"]).post(f"/api/v1/tool-calls/{ledger.pk}/decision/", {"decision": "approve"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "approved"
    rest = sink.until_terminal(run.pk)
    assert rest[0]["type"] == "approval.resolved" and rest[0]["decided_by"] == "alice"
    assert rest[-1]["type"] == "run.completed"
    assert box.calls == [("note_write", {"text": "hello", "env_id": "staging-1"})]
    seqs = [e["seq"] for e in events + rest]
    assert seqs == list(range(1, len(seqs) + 1))
    # A second decision is refused and nothing runs again.
    again = api_for(users["alice"]).post(f"/api/v1/tool-calls/{ledger.pk}/decision/", {"decision": "approve"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_pending"
    assert len(box.calls) == 1


def test_a_decision_sent_before_the_run_parked_waits_for_the_park(box, users, alice_thread, fake_openai, sink_for,
                                                                   api_for):
    """approval.requested is published just before the driver parks the run; embedded mode
    delivers it within a millisecond, so a quick person could decide while the run still
    says running. The decision waits for the park instead of being refused not_pending."""
    import threading

    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "note_write", {"text": "quick"})])
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)  # as just before the driver's park
    parked = threading.Timer(0.3, lambda: Run.objects.filter(pk=run.pk).update(status=Run.Status.AWAITING_APPROVAL))
    parked.start()
    response = api_for(users["alice"]).post(f"/api/v1/tool-calls/{events[-1]['tool_call_id']}/decision/",
                                            {"decision": "approve"}, format="json")
    parked.join()
    assert response.status_code == 200, response.json()
    assert sink.until_terminal(run.pk)[-1]["type"] == "run.completed"
    assert box.calls == [("note_write", {"text": "quick"})]


def test_deny_sends_a_denied_result_to_the_model(box, users, alice_thread, fake_openai, sink_for, api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "note_write", {"text": "x"})], answer="Understood, skipped.")
    ledger_id = events[-1]["tool_call_id"]
    assert api_for(users["alice"]).post(f"/api/v1/tool-calls/{ledger_id}/decision/", {"decision": "deny"},
                                    format="json").status_code == 200
    rest = sink.until_terminal(run.pk)
    assert box.calls == []
    completed = next(e for e in rest if e["type"] == "tool.completed")
    assert completed["is_error"] and "Denied by alice" in completed["summary"]
    tool_msg = Message.objects.get(thread=alice_thread, role="tool")
    assert "operation was cancelled" in tool_msg.content
    assert fake_openai.requests[1]["messages"][-1]["content"] == tool_msg.content
    assert rest[-1]["type"] == "run.completed"


def test_dangerous_approve_is_refused_until_the_countdown_ends(box, users, alice_thread, fake_openai, sink_for, api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "records_purge", {"ids": [1, 2]})])
    request = events[-1]
    assert request["dangerous"] is True and request["countdown_s"] == 10 and request["risk_level"] == "dangerous"
    url = f"/api/v1/tool-calls/{request['tool_call_id']}/decision/"
    early = api_for(users["alice"]).post(url, {"decision": "approve"}, format="json")
    assert early.status_code == 409 and early.json()["error"]["code"] == "countdown"
    assert box.calls == []
    ToolCall.objects.filter(pk=request["tool_call_id"]).update(requested_at=timezone.now() - timedelta(seconds=11))
    assert api_for(users["alice"]).post(url, {"decision": "approve"}, format="json").status_code == 200
    sink.until_terminal(run.pk)
    assert box.calls == [("records_purge", {"ids": [1, 2]})]


def test_who_may_decide(box, users, alice_thread, fake_openai, sink_for, api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "note_write", {"text": "x"})])
    url = f"/api/v1/tool-calls/{events[-1]['tool_call_id']}/decision/"
    for intruder in ("bob", "carol", "dave"):  # cannot even see the thread
        assert api_for(users[intruder]).post(url, {"decision": "approve"}, format="json").status_code == 404
    assert api_for(users["alice"]).post(url, {"decision": "maybe"}, format="json").status_code == 400
    assert api_for(users["admin"]).post(url, {"decision": "approve"}, format="json").status_code == 200
    rest = sink.until_terminal(run.pk)
    assert next(e for e in rest if e["type"] == "approval.resolved")["decided_by"] == "admin"
    assert len(box.calls) == 1


def test_new_message_supersedes_a_pending_approval_and_history_stays_valid(box, users, alice_thread, fake_openai, sink_for, converse, api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "note_write", {"text": "x"}), call("c2", "kb_lookup", {"query": "q"})])
    ledger_id = events[-1]["tool_call_id"]
    fake_openai.script(text_chunks("Sure, something else."))
    new_run, new_events = converse(alice_thread, users["alice"], "never mind, do something else")
    assert new_run.status == "completed"
    old = sink.until_terminal(run.pk)
    assert [e["type"] for e in old] == ["approval.resolved", "run.cancelled"] or "run.cancelled" in types(old)
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    assert ToolCall.objects.get(pk=ledger_id).status == "expired"
    assert box.calls == []
    # Both calls got a result before the new user message: the fake's history validator passed.
    last_request = fake_openai.requests[-1]["messages"]
    roles = [m["role"] for m in last_request]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    late = api_for(users["alice"]).post(f"/api/v1/tool-calls/{ledger_id}/decision/", {"decision": "approve"}, format="json")
    assert late.status_code == 409
    assert box.calls == []


def test_cancel_while_awaiting_closes_the_call(box, users, alice_thread, fake_openai, sink_for, api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "note_write", {"text": "x"})])
    assert api_for(users["alice"]).post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 200
    again = api_for(users["alice"]).post(f"/api/v1/runs/{run.pk}/cancel/")  # a second Stop, e.g. another tab's
    assert (again.status_code, again.json()["error"]) == (
        409, {"code": "run_finished", "message": "This run was already cancelled."})
    rest = sink.until_terminal(run.pk)
    assert rest[-1]["type"] == "run.cancelled"
    tool_msg = Message.objects.get(thread=alice_thread, role="tool")
    assert tool_msg.is_error and "cancelled by the user" in tool_msg.content
    ledger_id = events[-1]["tool_call_id"]
    assert api_for(users["alice"]).post(f"/api/v1/tool-calls/{ledger_id}/decision/", {"decision": "approve"},
                                    format="json").status_code == 409
    assert box.calls == []


# --- cancellation while running ----------------------------------------------------------
def test_cancel_during_streaming_keeps_the_partial_text(users, alice_thread, fake_openai, sink_for, settings):
    settings.STREAM_PERSIST_INTERVAL_S = 0.05
    settings.RUN_HEARTBEAT_S = 0.05
    fake_openai.delay_s = 0.05
    fake_openai.script(text_chunks(" ".join(f"w{n}" for n in range(200)), pieces=200))
    sink = sink_for(alice_thread.pk)
    created = run_create(thread=alice_thread, user=users["alice"], content="talk")
    seen = []
    while not any(e["type"] == "text.delta" for e in seen):
        seen.append(sink.until_any(created.run.pk))
    run_cancel(run=created.run, user=users["alice"])
    seen += sink.until_terminal(created.run.pk)
    assert seen[-1]["type"] == "run.cancelled"
    msg = Message.objects.get(thread=alice_thread, role="assistant")
    assert msg.status == "cancelled"
    assert msg.content == joined_text(seen) and 0 < len(msg.content) < len(" ".join(f"w{n}" for n in range(200)))
    assert Run.objects.get(pk=created.run.pk).status == "cancelled"


def test_cancel_during_a_slow_tool_discards_the_late_result(box, users, alice_thread, fake_openai, sink_for, settings):
    settings.RUN_HEARTBEAT_S = 0.05
    settings.STREAM_PERSIST_INTERVAL_S = 0.05
    box.behaviour["kb_lookup"] = Behaviour(sleep_s=2.0)
    fake_openai.script(tool_call_chunks([call("c1", "kb_lookup", {"query": "slow"})]), text_chunks("never sent"))
    sink = sink_for(alice_thread.pk)
    created = run_create(thread=alice_thread, user=users["alice"], content="look it up")
    while sink.until_any(created.run.pk)["type"] != "tool.started":
        pass
    run_cancel(run=created.run, user=users["alice"])
    rest = sink.until_terminal(created.run.pk)
    assert box.finished == []  # the run ended while the tool was still running
    assert rest[-1]["type"] == "run.cancelled"
    ledger = ToolCall.objects.get(call_id="c1")
    assert ledger.status == "failed" and ledger.result == {"error": ledger.summary}
    deadline = time.monotonic() + 10
    while box.finished != ["kb_lookup"]:  # the tool finishes late: nothing changes
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.1)
    ledger.refresh_from_db()
    assert ledger.status == "failed"
    assert len(fake_openai.requests) == 1  # the model was never asked again


# --- crash recovery ----------------------------------------------------------------------
def test_reaper_requeues_a_run_whose_worker_died_and_the_write_is_not_repeated(box, users, alice_thread, fake_openai, sink_for):
    """Simulate a worker that died while a write tool ran: lease expired, ledger 'running',
    assistant text half-written. The reaper re-queues; the turn resumes without re-running the
    write and tells the model its outcome is unknown."""
    ToolPolicy.objects.filter(tool_name="note_write").update(approval_mode="never")
    run = Run.objects.create(thread=alice_thread, user=users["alice"], provider=alice_thread.provider,
                             model="fake-model", status="running", attempts=1, last_event_seq=7,
                             lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(seconds=1))
    Message.objects.create(thread=alice_thread, run=run, position=1, role="user", content="write it")
    assistant = Message.objects.create(thread=alice_thread, run=run, position=2, role="assistant", status="complete",
                                       tool_calls=[{"id": "c1", "name": "note_write", "arguments": '{"text": "x"}'}])
    ToolCall.objects.create(run=run, message=assistant, call_id="c1", tool_name="note_write", status="running",
                            arguments={"text": "x"})
    fake_openai.script(text_chunks("I could not confirm the write."))
    sink = sink_for(alice_thread.pk)
    assert reap_expired_runs() == [str(run.pk)]
    events = sink.until_terminal(run.pk)
    assert events[0]["seq"] == 8  # continues the run's numbering
    assert events[-1]["type"] == "run.completed"
    assert box.calls == []  # never executed again
    ledger = ToolCall.objects.get(call_id="c1")
    assert ledger.status == "status_unknown"
    tool_msg = Message.objects.get(thread=alice_thread, role="tool")
    assert "Outcome unknown" in tool_msg.content
    assert Run.objects.get(pk=run.pk).attempts == 2


def test_a_live_lease_is_not_taken_and_retries_are_bounded(users, alice_thread, sink_for, settings):
    live = Run.objects.create(thread=alice_thread, user=users["alice"], status="running", attempts=1,
                              lease_owner="w1", lease_expires_at=timezone.now() + timedelta(seconds=30))
    run_turn(run_id=live.pk)  # a redelivered task while the owner is alive: no-op
    live.refresh_from_db()
    assert live.lease_owner == "w1" and live.attempts == 1
    assert reap_expired_runs() == []

    settings.RUN_MAX_ATTEMPTS = 2
    # Another thread: a thread has at most one queued or running run (run_one_active_per_thread).
    other_thread = make_thread(users["alice"], alice_thread.workspace, alice_thread.provider)
    dead = Run.objects.create(thread=other_thread, user=users["alice"], status="running", attempts=2,
                              lease_owner="w2", lease_expires_at=timezone.now() - timedelta(seconds=1))
    Message.objects.create(thread=other_thread, run=dead, position=5, role="assistant", status="streaming",
                           content="half an ans")
    sink = sink_for(other_thread.pk)
    assert reap_expired_runs() == [str(dead.pk)]
    events = sink.until_terminal(dead.pk)
    assert events[-1]["type"] == "run.failed" and events[-1]["error"]["code"] == "interrupted"
    msg = Message.objects.get(run=dead)
    assert msg.status == "truncated" and msg.content == "half an ans"


def test_new_message_supersedes_a_pending_approval_on_anthropic(box, users, workspaces, sink_for, converse):
    """The same path on the Anthropic wire: the next request passes the fake's validator
    (every tool_use answered by a tool_result in the very next user turn)."""
    from agents.models import Provider
    from tests.fakes.anthropic_server import FakeAnthropic, text_events, tool_use_events

    fake = FakeAnthropic(api_key="sk-ant-sup").start()
    try:
        import os

        os.environ["TEST_SUP_ANTHROPIC_KEY"] = "sk-ant-sup"
        provider = Provider.objects.create(slug="sup-anthropic", name="Anthropic", kind="anthropic",
                                           base_url=fake.base_url, api_key_env="TEST_SUP_ANTHROPIC_KEY",
                                           default_model="claude-fake-1")
        thread = make_thread(users["alice"], workspaces["demo"], provider)
        fake.script(tool_use_events("toolu_1", "note_write", '{"text": "x"}'))
        sink = sink_for(thread.pk)
        created = run_create(thread=thread, user=users["alice"], content="please write")
        sink.until_parked(created.run.pk)
        fake.script(text_events("Sure, something else."))
        new_run, _ = converse(thread, users["alice"], "never mind")
        assert new_run.status == "completed"
        last = fake.message_requests[-1]["messages"]
        assert [m["role"] for m in last] == ["user", "assistant", "user"]
        results = [b for b in last[2]["content"] if b["type"] == "tool_result"]
        assert results[0]["tool_use_id"] == "toolu_1" and results[0]["is_error"] is True
        assert box.calls == []
    finally:
        fake.stop()


def test_cancel_between_model_responses_still_leaves_a_final_cancelled_message(box, users, alice_thread, fake_openai, sink_for, settings):
    settings.RUN_HEARTBEAT_S = 0.05
    settings.STREAM_PERSIST_INTERVAL_S = 0.05
    box.behaviour["kb_lookup"] = Behaviour(sleep_s=1.0)
    fake_openai.script(tool_call_chunks([call("c1", "kb_lookup", {"query": "q"})]), text_chunks("never"))
    sink = sink_for(alice_thread.pk)
    created = run_create(thread=alice_thread, user=users["alice"], content="look")
    while sink.until_any(created.run.pk)["type"] != "tool.started":
        pass
    run_cancel(run=created.run, user=users["alice"])
    rest = sink.until_terminal(created.run.pk)
    assert rest[-1]["type"] == "run.cancelled"
    final = Message.objects.filter(thread=alice_thread, role="assistant").order_by("-position").first()
    assert final.status == "cancelled" and final.content == "" and not final.tool_calls
    assert any(e["type"] == "message.completed" and e["message_id"] == str(final.pk) for e in rest)


def test_many_approvals_in_one_run_are_not_mistaken_for_crashes(box, users, alice_thread, fake_openai, sink_for, settings, api_for):
    """Re-queues after decisions are not recoveries: RUN_MAX_ATTEMPTS never ends such a run."""
    settings.RUN_MAX_ATTEMPTS = 1
    fake_openai.script(*[tool_call_chunks([call(f"c{n}", "note_write", {"text": str(n)})]) for n in range(4)],
                       text_chunks("All four written."))
    sink = sink_for(alice_thread.pk)
    created = run_create(thread=alice_thread, user=users["alice"], content="write four notes")
    client = api_for(users["alice"])
    for _ in range(4):
        event = sink.until_parked(created.run.pk)[-1]
        assert client.post(f"/api/v1/tool-calls/{event['tool_call_id']}/decision/", {"decision": "approve"},
                           format="json").status_code == 200
    rest = sink.until_terminal(created.run.pk)
    assert rest[-1]["type"] == "run.completed"
    assert [args["text"] for _, args in box.calls] == ["0", "1", "2", "3"]
    assert Run.objects.get(pk=created.run.pk).attempts == 0


# --- approval routing through real runs (issue 13) ----------------------------------------
@pytest.fixture
def rules(db):
    ensure_default_approval_policies(ApprovalPolicy)


@pytest.fixture
def admin2(users, roles, workspaces, django_user_model):
    user = django_user_model.objects.create_user("admin2", password="pw")
    Membership.objects.create(user=user, workspace=workspaces["demo"], role=roles["admin"])
    return user


def test_a_production_dangerous_call_needs_two_admins(rules, box, users, admin2, alice_thread, fake_openai, sink_for,
                                                      api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "records_purge", {"ids": [7], "env_id": "prod-eu"})],
                                             env_id="prod-eu")
    request = events[-1]
    assert request["type"] == "approval.requested" and request["env_context"] == "prod"
    assert request["rule"] == "Production dangerous" and request["approvals_needed"] == 2
    assert request["approvals_so_far"] == 0 and request["requester"] == "alice"
    assert request["approver_names"] == ["admin", "admin2"] and request["expires_at"]
    assert request["waiting_text"] == "Production dangerous: needs 2 approvals from two workspace admins other than alice"
    url = f"/api/v1/tool-calls/{request['tool_call_id']}/decision/"
    ToolCall.objects.filter(pk=request["tool_call_id"]).update(requested_at=timezone.now() - timedelta(seconds=11))

    assert api_for(users["alice"]).post(url, {"decision": "approve"}, format="json").status_code == 403
    first = api_for(users["admin"]).post(url, {"decision": "approve"}, format="json")
    assert first.status_code == 200 and first.json()["status"] == "awaiting_approval"
    progress = sink.until_any(run.pk, timeout=10)
    assert progress["type"] == "approval.progress"
    assert (progress["approvals_so_far"], progress["approvals_needed"], progress["approved_by"]) == (1, 2, ["admin"])
    # The rule sentence stays the rule: the count is said once, from approvals_so_far (issue 54).
    assert progress["waiting_text"] == request["waiting_text"]
    assert box.calls == [] and Run.objects.get(pk=run.pk).status == "awaiting_approval"

    assert api_for(admin2).post(url, {"decision": "approve"}, format="json").status_code == 200
    rest = sink.until_terminal(run.pk)
    resolved = next(e for e in rest if e["type"] == "approval.resolved")
    assert resolved["decision"] == "approve" and resolved["decided_by"] == "admin2"
    assert types(rest)[-1] == "run.completed"
    assert box.calls == [("records_purge", {"ids": [7]})]  # its schema has no env_id: never passed on


def test_an_expired_request_lets_the_run_go_on_with_a_denied_result(rules, box, users, alice_thread, fake_openai,
                                                                    sink_for, api_for):
    run, events, sink = start_until_awaiting(fake_openai, sink_for, alice_thread, users["alice"],
                                             [call("c1", "note_write", {"text": "x", "env_id": "prod-eu"})], env_id="prod-eu",
                                             answer="Nobody approved it, so nothing changed.")
    ledger_id = events[-1]["tool_call_id"]
    assert events[-1]["rule"] == "Production write"
    ToolCall.objects.filter(pk=ledger_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire_due() == [ledger_id]
    rest = sink.until_terminal(run.pk)
    resolved = next(e for e in rest if e["type"] == "approval.resolved")
    assert resolved["decision"] == "expired" and resolved["decided_by"] is None
    completed = next(e for e in rest if e["type"] == "tool.completed")
    assert completed["is_error"] and "expired" in completed["summary"]
    assert types(rest)[-1] == "run.completed" and box.calls == []
    tool_msg = Message.objects.get(thread=alice_thread, role="tool")
    assert "approval request expired" in tool_msg.content
    assert fake_openai.requests[1]["messages"][-1]["content"] == tool_msg.content
    late = api_for(users["admin"]).post(f"/api/v1/tool-calls/{ledger_id}/decision/", {"decision": "approve"},
                                        format="json")
    assert late.status_code == 409 and late.json()["error"]["code"] == "expired"


def test_ask_prints_a_pending_request_and_exits_3_instead_of_waiting(rules, box, users, alice_thread, fake_openai):
    """An unwatched run never auto-approves: ``manage.py ask`` shows the request and exits."""
    from io import StringIO

    from django.core.management import call_command

    alice_thread.ui_context = {"envId": "prod-eu"}  # the thread's environment (ask has no --env)
    alice_thread.save(update_fields=["ui_context"])
    fake_openai.script(tool_call_chunks([call("c1", "note_write", {"text": "x", "env_id": "prod-eu"})]),
                       text_chunks("done"))
    out = StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("ask", "--user", "alice", "--thread", str(alice_thread.pk), "--timeout", "30",
                     "please write it", stdout=out, stderr=StringIO())
    assert exit_.value.code == 3
    text = out.getvalue()
    assert "[approval] note_write(" in text
    assert "Production write: needs 1 approval from a workspace admin other than alice" in text
    assert "may approve: admin" in text and "/api/v1/tool-calls/" in text
    run = Run.objects.get(thread=alice_thread)
    deadline = time.monotonic() + 10  # the event comes just before the driver parks the run
    while Run.objects.get(pk=run.pk).status != "awaiting_approval":
        assert time.monotonic() < deadline, "the run never parked"
        time.sleep(0.02)
    assert box.calls == []  # parked, not approved
    assert ToolCall.objects.get(run=run).status == "awaiting_approval"
    run_cancel(run=run, user=users["alice"])  # leave no run behind
