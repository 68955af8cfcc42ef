"""The run lifecycle (agents/runs/lifecycle.py): each transition moves exactly the states its
table names, once; nothing else in the code writes a status; the driver applies a backend's
outcome (agents/runs/driver.py)."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents.backends import Outcome, register_backend
from agents.backends import _backends as registered_backends
from agents.models import Run, ToolCall
from agents.runs import lifecycle
from agents.runs.driver import run_turn
from agents.services import run_create
from chat.models import Message
from tests.conftest import joined_text, make_thread, types
from tests.scripted import says

pytestmark = pytest.mark.django_db(transaction=True)

S, T = Run.Status, ToolCall.Status
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(users, workspaces, offline, settings):
    settings.RUN_EXECUTOR = "none"  # nothing executes: the tests move the states by hand
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    return run_create(thread=thread, user=users["alice"], content="hello").run


def set_status(run, status, **fields):
    Run.objects.filter(pk=run.pk).update(status=status, **fields)
    run.refresh_from_db()


EXPIRED = {"lease_owner": "dead:1:1"}  # with lease_expires_at in the past (set per test)

RUN_TABLE = [
    # (transition, call, from-states that succeed, resulting status)
    ("run_claim", lambda r: lifecycle.run_claim(run_id=r.pk, owner="me") is not None, {S.QUEUED}, S.RUNNING),
    ("run_park", lambda r: lifecycle.run_park(run_id=r.pk, owner="me"), {S.RUNNING}, S.AWAITING_APPROVAL),
    ("run_requeue_decided", lambda r: lifecycle.run_requeue_decided(run_id=r.pk), {S.AWAITING_APPROVAL}, S.QUEUED),
    ("run_finish completed", lambda r: lifecycle.run_finish(run=r, status=S.COMPLETED),
     {S.QUEUED, S.RUNNING, S.AWAITING_APPROVAL}, S.COMPLETED),
    ("run_finish failed", lambda r: lifecycle.run_finish(run=r, status=S.FAILED, error={"code": "x", "message": "y"}),
     {S.QUEUED, S.RUNNING, S.AWAITING_APPROVAL}, S.FAILED),
    ("run_cancel_waiting", lambda r: lifecycle.run_cancel_waiting(run_id=r.pk, code="cancelled", reason="r"),
     {S.QUEUED, S.AWAITING_APPROVAL}, S.CANCELLED),
    ("run_cancel_running", lambda r: lifecycle.run_cancel_running(run_id=r.pk), {S.RUNNING}, S.CANCELLED),
]


@pytest.mark.parametrize(("name", "transition", "allowed", "to"), RUN_TABLE, ids=[r[0] for r in RUN_TABLE])
@pytest.mark.parametrize("start", list(S))
def test_run_transitions_move_only_the_states_in_the_table(run, name, transition, allowed, to, start):
    # A running run is leased to "me" with a live lease: only its owner may park it.
    set_status(run, start, lease_owner="me", lease_expires_at=timezone.now() + timedelta(seconds=60))
    happened = transition(run)
    run.refresh_from_db()
    assert happened is (start in allowed)
    assert run.status == (to if start in allowed else start)


def test_a_claim_takes_a_running_run_only_when_its_lease_expired(run):
    set_status(run, S.RUNNING, lease_owner="other", lease_expires_at=timezone.now() + timedelta(seconds=60))
    assert lifecycle.run_claim(run_id=run.pk, owner="me") is None
    set_status(run, S.RUNNING, lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert lifecycle.run_claim(run_id=run.pk, owner="me") is not None
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (S.RUNNING, "me")
    assert lifecycle.run_claim(run_id=run.pk, owner="third") is None  # my lease is live now


def test_only_a_runs_first_claim_sets_its_start(run):
    """run_claim returns the claim's time; the run's started_at equals it on the first claim
    only (the driver's ``run.first_claim``), not after a recovery or an approval's requeue."""
    first = lifecycle.run_claim(run_id=run.pk, owner="me")
    run.refresh_from_db()
    assert first is not None and run.started_at == first
    set_status(run, S.RUNNING, lease_owner="dead:1:1", lease_expires_at=timezone.now() - timedelta(seconds=1))
    again = lifecycle.run_claim(run_id=run.pk, owner="me")
    run.refresh_from_db()
    assert again is not None and again > first and run.started_at == first


def test_the_reaper_transitions_need_the_exact_expired_lease(run):
    expired = timezone.now() - timedelta(seconds=5)
    set_status(run, S.RUNNING, lease_owner="dead", lease_expires_at=expired)
    assert lifecycle.run_requeue_expired(run_id=run.pk, expected_lease=expired - timedelta(seconds=1)) is False
    assert lifecycle.run_requeue_expired(run_id=run.pk, expected_lease=expired) is True
    assert lifecycle.run_requeue_expired(run_id=run.pk, expected_lease=expired) is False  # a second reaper loses
    run.refresh_from_db()
    assert (run.status, run.attempts, run.lease_owner) == (S.QUEUED, 1, "")


def test_a_renewal_fails_once_the_lease_is_someone_elses(run):
    set_status(run, S.RUNNING, lease_owner="me", lease_expires_at=timezone.now())
    assert lifecycle.run_lease_renew(run_id=run.pk, owner="me", seq=7) is True
    assert lifecycle.run_lease_renew(run_id=run.pk, owner="intruder", seq=99) is False
    run.refresh_from_db()
    assert run.last_event_seq == 7 and run.lease_expires_at > timezone.now()
    lifecycle.run_seq_save(run_id=run.pk, seq=3)  # never moves back
    run.refresh_from_db()
    assert run.last_event_seq == 7


def ledger_row(run, status) -> ToolCall:
    message = Message.objects.create(thread=run.thread, run=run, position=99, role="assistant",
                                     tool_calls=[{"id": "c1", "name": "x", "arguments": "{}"}])
    row, created = lifecycle.tool_call_open(run=run, message=message, call_id="c1", tool_name="x", raw_arguments="{}")
    assert created and row.status == T.PENDING
    ToolCall.objects.filter(pk=row.pk).update(status=status)
    row.refresh_from_db()
    return row


TOOL_TABLE = [
    ("tool_call_park", lambda r, u: lifecycle.tool_call_park(ledger=r), {T.PENDING}, T.AWAITING_APPROVAL),
    ("tool_call_decide approve", lambda r, u: lifecycle.tool_call_decide(ledger=r, decision="approve", user=u),
     {T.AWAITING_APPROVAL}, T.APPROVED),
    ("tool_call_decide deny", lambda r, u: lifecycle.tool_call_decide(ledger=r, decision="deny", user=u),
     {T.AWAITING_APPROVAL}, T.DENIED),
    ("tool_call_claim", lambda r, u: lifecycle.tool_call_claim(ledger=r), {T.PENDING, T.APPROVED}, T.RUNNING),
    ("tool_call_finish", lambda r, u: lifecycle.tool_call_finish(ledger=r, status=T.SUCCEEDED, result={"ok": 1},
                                                                summary="ok", is_error=False),
     {T.PENDING, T.APPROVED, T.RUNNING, T.DENIED}, T.SUCCEEDED),
    ("tool_call_mark_unknown", lambda r, u: lifecycle.tool_call_mark_unknown(ledger=r, summary="?"),
     {T.RUNNING}, T.STATUS_UNKNOWN),
    ("tool_call_expire", lambda r, u: lifecycle.tool_call_expire(ledger=r, reason="gone"),
     {T.PENDING, T.AWAITING_APPROVAL, T.APPROVED}, T.EXPIRED),
]


@pytest.mark.parametrize(("name", "transition", "allowed", "to"), TOOL_TABLE, ids=[r[0] for r in TOOL_TABLE])
@pytest.mark.parametrize("start", list(T))
def test_tool_call_transitions_move_only_the_states_in_the_table(run, users, name, transition, allowed, to, start):
    row = ledger_row(run, start)
    happened = transition(row, users["admin"])
    row.refresh_from_db()
    assert happened is (start in allowed)
    assert row.status == (to if start in allowed else start)


def test_a_succeeded_call_is_never_claimed_again(run):
    row = ledger_row(run, T.PENDING)
    assert lifecycle.tool_call_claim(ledger=row) is True
    assert lifecycle.tool_call_finish(ledger=row, status=T.SUCCEEDED, result=1, summary="1", is_error=False)
    assert lifecycle.tool_call_claim(ledger=row) is False


# --- nothing else writes a status -----------------------------------------------------------
def status_writes(path: Path) -> list[str]:
    """``Run``/``ToolCall`` querysets updated or created with a ``status`` outside the lifecycle."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("update", "create", "get_or_create", "update_or_create", "bulk_create"):
            continue
        chain = ast.unparse(node.func.value)
        if not (chain.startswith("Run.objects") or chain.startswith("ToolCall.objects")):
            continue
        keys = {k.arg for k in node.keywords}
        defaults = next((k.value for k in node.keywords if k.arg == "defaults"), None)
        if isinstance(defaults, ast.Dict):
            keys |= {k.value for k in defaults.keys if isinstance(k, ast.Constant)}
        if "status" in keys:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_only_the_lifecycle_writes_run_and_tool_call_statuses():
    offenders = []
    for app in ("agents", "chat", "knowledge", "chatplatform"):
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts or path.name == "lifecycle.py":
                continue
            offenders += status_writes(path)
    assert offenders == []
    # The scanner does find writes: the lifecycle itself has them.
    assert len(status_writes(ROOT / "agents/runs/lifecycle.py")) >= 10


# --- the driver and the backend seam --------------------------------------------------------
class ScriptedBackend:
    """A backend whose advance returns a given outcome (optionally cancelling the run first)."""

    def __init__(self, outcome: Outcome, cancel_first: bool = False) -> None:
        self.outcome, self.cancel_first, self.cancelled = outcome, cancel_first, 0

    def advance(self, turn):
        assistant = Message.objects.create(thread=turn.run.thread, run=turn.run, position=50, role="assistant",
                                           status="streaming")
        turn.started(assistant_message_id=assistant.pk)
        turn.emitter.text("partial")
        if self.cancel_first:
            lifecycle.run_cancel_running(run_id=turn.run.pk)
        return self.outcome

    def cancel(self, turn):
        self.cancelled += 1


@pytest.fixture
def backend_slot():
    saved = dict(registered_backends)
    yield lambda backend: register_backend("anthropic", lambda: backend)
    registered_backends.clear()
    registered_backends.update(saved)


@pytest.fixture
def anthropic_thread(users, workspaces, db):
    from agents.models import Provider

    provider = Provider.objects.create(slug="a", name="A", kind="anthropic", default_model="m")
    return make_thread(users["alice"], workspaces["demo"], provider)


@pytest.mark.parametrize(("outcome", "status", "expected"), [
    (Outcome.completed(), S.COMPLETED, ["run.started", "text.delta", "run.completed"]),
    (Outcome.failed("upstream_down", "the agent is unreachable", retryable=True), S.FAILED,
     ["run.started", "text.delta", "run.failed"]),
    (Outcome.awaiting_approval(), S.AWAITING_APPROVAL, ["run.started", "text.delta"]),  # parked: no end yet
])
def test_the_driver_applies_a_backends_outcome(backend_slot, anthropic_thread, users, sink_for, settings,
                                               outcome, status, expected):
    backend = ScriptedBackend(outcome)
    backend_slot(backend)
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=anthropic_thread, user=users["alice"], content="go")
    sink = sink_for(anthropic_thread.pk)
    run_turn(run_id=created.run.pk)
    run = Run.objects.get(pk=created.run.pk)
    assert run.status == status
    events = [sink.until_any(run.pk, timeout=10) for _ in expected]
    assert types(events) == expected
    assert run.last_event_seq == len(expected)  # saved by the emitter when it closed
    assert run.lease_owner == ""
    if status == S.FAILED:
        assert run.error == {"code": "upstream_down", "message": "the agent is unreachable"}
        assert events[-1]["retryable"] is True


def test_a_cancel_during_the_backends_work_wins_over_parking(backend_slot, anthropic_thread, users, sink_for, settings):
    backend = ScriptedBackend(Outcome.awaiting_approval(), cancel_first=True)
    backend_slot(backend)
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=anthropic_thread, user=users["alice"], content="go")
    sink = sink_for(anthropic_thread.pk)
    run_turn(run_id=created.run.pk)
    assert backend.cancelled == 1  # asked to close its work
    assert Run.objects.get(pk=created.run.pk).status == S.CANCELLED
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.cancelled"


def test_the_model_backend_runs_in_process_with_a_scripted_model(scripted_model, converse, users, workspaces,
                                                                    openai_provider):
    scripted_model.script(says("Hello from the script."))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    run, events = converse(thread, users["alice"], "hi")
    assert run.status == S.COMPLETED
    assert joined_text(events) == "Hello from the script."
    request = scripted_model.requests[0]
    assert request.messages[-1].content == "hi" and "show_capabilities" in {t.name for t in request.tools}


# --- the set-up gate (agents/runs/gate.py) ---------------------------------------------------
def _gate_free() -> bool:
    """Whether the (one-slot) gate's slot is free right now."""
    from agents.runs.gate import process_gate

    return process_gate().holding == 0


class DispatchingBackend(ScriptedBackend):
    """Records whether the gate's only slot was taken before and after ``turn.dispatched()``."""

    def advance(self, turn):
        self.seen = [_gate_free()]
        turn.dispatched()
        self.seen.append(_gate_free())
        return super().advance(turn)


def test_a_turn_holds_a_set_up_slot_until_its_backend_dispatches(backend_slot, anthropic_thread, users, settings):
    settings.RUN_EXECUTOR, settings.RUN_SETUP_CONCURRENCY = "none", 1
    backend = DispatchingBackend(Outcome.completed())
    backend_slot(backend)
    created = run_create(thread=anthropic_thread, user=users["alice"], content="go")
    run_turn(run_id=created.run.pk)
    assert backend.seen == [False, True]  # held through the set-up, free once the request is out
    assert _gate_free()  # and given back
    assert Run.objects.get(pk=created.run.pk).status == S.COMPLETED


def test_a_backend_that_never_dispatches_gives_its_slot_back_when_the_turn_ends(backend_slot, anthropic_thread,
                                                                                users, settings):
    settings.RUN_EXECUTOR, settings.RUN_SETUP_CONCURRENCY = "none", 1
    backend_slot(ScriptedBackend(Outcome.failed("upstream_down", "unreachable")))
    created = run_create(thread=anthropic_thread, user=users["alice"], content="go")
    run_turn(run_id=created.run.pk)
    assert Run.objects.get(pk=created.run.pk).status == S.FAILED
    assert _gate_free()


def test_the_model_backend_frees_its_slot_before_the_model_streams(scripted_model, converse, users, workspaces,
                                                                    openai_provider, settings, monkeypatch):
    settings.RUN_SETUP_CONCURRENCY = 1
    seen = []
    stream = scripted_model.stream

    def observed(request):
        seen.append(_gate_free())  # when the request is sent (the first read of the stream)
        yield from stream(request)

    monkeypatch.setattr(scripted_model, "stream", observed)
    scripted_model.script(says("Streaming with the gate open."))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    run, events = converse(thread, users["alice"], "hi")
    assert run.status == S.COMPLETED and joined_text(events) == "Streaming with the gate open."
    assert seen == [True]


def test_a_renewal_that_races_the_runs_own_end_is_not_a_takeover(run, caplog):
    """The heartbeat renews a snapshot of its leases: a turn that ended meanwhile (stopped,
    finished, lease released) must not be logged as taken over nor fenced."""
    from agents.runs.lease import RunLease

    assert lifecycle.run_claim(run_id=run.pk, owner="me")
    lease = RunLease(run_id=run.pk, owner="me")
    lease.stop()  # the driver's end: leave the heartbeat, finish, release
    assert lifecycle.run_finish(run=run, status=S.COMPLETED)
    lifecycle.run_release(run_id=run.pk, owner="me")
    assert lifecycle.run_lease_renew(run_id=run.pk, owner="me", seq=None) is False  # the raced renewal
    with caplog.at_level("WARNING", logger="agents.runs.lease"):
        lease._not_renewed()
    assert not lease.lost and "taken over" not in caplog.text
    intruded = RunLease(run_id=run.pk, owner="me")  # a live lease whose row names someone else is
    set_status(run, S.RUNNING, lease_owner="other", lease_expires_at=timezone.now() + timedelta(seconds=60))
    with caplog.at_level("WARNING", logger="agents.runs.lease"):
        intruded._not_renewed()
    assert intruded.lost and "taken over by other" in caplog.text
