"""Tools that really stop (issue 17): a call the run gave up on never starts later, and one
user's slow tools cannot take every tool thread."""

from __future__ import annotations

import threading
import time

import pytest

from agents.loop import execute
from agents.models import Role, ToolCall, ToolPolicy
from tests.conftest import make_thread
from tests.policy.tooltest import Behaviour, call, scoped_toolbox
from tests.scripted import calls, says

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def box(roles):
    toolbox, scope = scoped_toolbox()
    with scope:
        yield toolbox


@pytest.fixture
def small_pool(monkeypatch):
    threads = execute.ToolThreads(threads=2, per_user=1)
    monkeypatch.setattr(execute, "tool_threads", threads)
    return threads


def test_a_write_that_timed_out_waiting_for_a_thread_is_never_executed_later(box, small_pool, scripted_model,
                                                                              users, workspaces, openai_provider,
                                                                              converse):
    # Two other users' long tools hold both threads.
    release = threading.Event()
    for user_id in ("x", "y"):
        slot = small_pool.slot(user_id)
        slot.acquire()
        small_pool.submit(slot, release.wait, 60)
    policy = ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="never", timeout_s=1)
    # A write tool is for the roles named (none named = no one; issue 17, permissions).
    policy.allowed_roles.set(Role.objects.filter(name__in=("member", "admin")))
    scripted_model.script(calls(call("c1", "note_write", {"text": "only once"})), says("Noted."))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    run, events = converse(thread, users["alice"], "write it")
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == ToolCall.Status.TIMEOUT
    assert "not executed" in ledger.summary
    timeout = next(e for e in events if e["type"] == "tool.timeout")
    assert (timeout["retryable"], timeout["status_unknown"]) == (True, False)
    release.set()  # the threads come free ...
    time.sleep(0.5)  # ... and nothing queued runs the write after the run gave up on it
    assert box.names() == []


def test_one_users_slow_tools_do_not_starve_another_user(box, small_pool, scripted_model, users, workspaces,
                                                          openai_provider, converse, sink_for):
    from agents.services import run_create

    box.behaviour["kb_lookup"] = Behaviour(sleep_s=1.5)
    bob_threads = [make_thread(users["bob"], workspaces["demo"], openai_provider, grounded=False) for _ in range(2)]
    for n in (1, 2):
        scripted_model.respond(f"slow {n}", calls(call(f"b{n}", "kb_lookup", {"query": "slow"})), says("ok"))
    scripted_model.respond("quick one", calls(call("a1", "report_view", {})), says("Here."))
    sinks = [sink_for(t.pk) for t in bob_threads]
    bob_runs = [run_create(thread=t, user=users["bob"], content=f"slow {n}").run
                for n, t in enumerate(bob_threads, start=1)]
    for sink, bob_run in zip(sinks, bob_runs, strict=True):  # both of bob's calls are under way
        while sink.until_any(bob_run.pk)["type"] != "tool.started":
            pass
    alice_thread = make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
    run, _ = converse(alice_thread, users["alice"], "quick one")
    for sink, bob_run in zip(sinks, bob_runs, strict=True):
        sink.until_terminal(bob_run.pk)
    # Bob holds one thread at a time; alice's call ran on the other one before bob's second.
    assert box.names() == ["kb_lookup", "report_view", "kb_lookup"]
    assert ToolCall.objects.get(run=run).status == ToolCall.Status.SUCCEEDED
