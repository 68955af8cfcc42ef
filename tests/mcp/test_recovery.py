"""Recovery of crashed and hung MCP servers: the backoff starts over after a healthy session,
a call while the server waits to reconnect makes the attempt now (one attempt, every caller
waits for it), and a session whose calls keep timing out is restarted. Real stdio MCP server
processes (``tests/mcp/stdio_server.py``) crashed and hung on purpose; no sleeps — polls."""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.pipeline import policy_views, tool_guard, tool_pipeline
from agents.tools import ToolContext, tool_sources
from mcp_client import sync
from mcp_client.runtime import CallTimedOut, ServerGone, runtime
from tests.mcp.conftest import enable

pytestmark = pytest.mark.django_db

STDIO_SERVER = str(Path(__file__).resolve().parent / "stdio_server.py")
CTX = ToolContext(workspace_id=1, thread_id="t", user_id=1, run_id="r", role="member")


def poll(condition, timeout_s: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def call(slug: str, tool: str, timeout_s: float = 10.0) -> str:
    result = runtime.call(slug, tool, {}, timeout_s=timeout_s, cancelled=threading.Event(), progress=lambda _: None)
    return result.content[0].text


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def crash(slug: str) -> None:
    with pytest.raises(ServerGone):
        call(slug, "crash")


def test_backoff_doubles_while_failing_and_starts_over_after_a_healthy_session(add_server, settings, monkeypatch):
    settings.MCP_MIN_BACKOFF_S = 0.1
    settings.MCP_MAX_BACKOFF_S = 30
    settings.MCP_BACKOFF_RESET_S = 10
    clock = FakeClock()
    from mcp_client import runtime as runtime_module

    real = runtime_module.Connection

    def with_clock(config):
        return real(config, clock=clock)

    monkeypatch.setattr(runtime_module, "Connection", with_clock)
    add_server("box", command=sys.executable, args=[STDIO_SERVER])
    conn = runtime.connection("box")
    assert conn.state == "connected"
    waits, took = [], []
    for healthy_for in (0, 0, 0, 10):  # the fourth session stays up MCP_BACKOFF_RESET_S
        clock.now += healthy_for
        attempts = conn.attempts
        crashed = time.monotonic()
        crash("box")
        poll(lambda a=attempts: conn.attempts > a and conn.state == "connected", what="reconnected")
        took.append(time.monotonic() - crashed)
        waits.append(getattr(conn, "backoff_s", None))
    # the doubling streak would make the fourth wait 0.8 s (a runtime that never resets: 8 s
    # with its 1 s start); a healthy session starts it over: 0.1 s plus a process start
    assert took[3] < 4
    assert waits == [0.1, 0.2, 0.4, 0.1]


def test_a_call_during_the_backoff_reconnects_now_with_one_attempt_for_all_callers(add_server, settings):
    settings.MCP_MIN_BACKOFF_S = 300  # without a call, the next attempt would be 5 minutes away
    add_server("box", command=sys.executable, args=[STDIO_SERVER])
    enable("pid")
    conn = runtime.connection("box")
    old_pid = call("box", "pid")
    attempts = conn.attempts
    crash("box")
    poll(lambda: conn.state == "failed" and conn.attempts > attempts, what="waiting out the backoff")
    sync.reconcile()
    offered = tool_pipeline(role_name="member", object_type=None, allow_model_save=False,
                            policies=policy_views()).names
    assert "pid" in offered
    guard = tool_guard(name="pid", role_name="member", policies=policy_views(), offered=offered)
    assert guard.allowed, guard.message
    started = conn.started
    spec = tool_sources.get("pid")
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        pids = list(pool.map(lambda _: spec.func(ctx=CTX), range(4)))
    elapsed = time.monotonic() - began
    assert len(set(pids)) == 1 and pids[0] != old_pid  # one new process served every caller
    assert conn.started == started + 1  # exactly one reconnect attempt
    assert elapsed < 20  # far from the 300 s backoff


def test_a_call_to_a_server_that_cannot_come_back_gets_the_attempts_error(add_server, settings, tmp_path):
    settings.MCP_MIN_BACKOFF_S = 300
    script = tmp_path / "server.py"
    script.write_text(Path(STDIO_SERVER).read_text())
    add_server("box", command=sys.executable, args=[str(script)])
    conn = runtime.connection("box")
    attempts = conn.attempts
    crash("box")
    poll(lambda: conn.state == "failed" and conn.attempts > attempts, what="waiting out the backoff")
    script.write_text("import sys; sys.stderr.write('config file missing\\n'); sys.exit(2)\n")
    from mcp_client.runtime import ServerUnavailable

    began = time.monotonic()
    with pytest.raises(ServerUnavailable, match="config file missing"):
        call("box", "pid", timeout_s=30)
    # the failed attempt's answer (a process start), not a wait for the connect timeout (15 s)
    assert time.monotonic() - began < 10


def test_a_session_whose_calls_keep_timing_out_is_restarted(add_server, settings):
    settings.MCP_SUSPECT_TIMEOUTS = 2
    settings.MCP_MIN_BACKOFF_S = 0.1
    add_server("box", command=sys.executable, args=[STDIO_SERVER])
    conn = runtime.connection("box")
    old_pid = call("box", "pid")
    attempts = conn.attempts
    with pytest.raises(CallTimedOut):
        call("box", "hang", timeout_s=0.5)
    assert conn.state == "connected" and conn.attempts == attempts  # one timeout is not enough
    with pytest.raises(CallTimedOut):
        call("box", "hang", timeout_s=0.5)
    # restarted now, not at the next re-list (MCP_REFRESH_S, 60 s)
    poll(lambda: conn.attempts > attempts and conn.state == "connected", timeout_s=10, what="restarted session")
    assert conn.restarts == 1
    assert call("box", "pid") != old_pid  # a new server process
    sync.reconcile()
    assert runtime.connection("box") is conn


def test_an_answered_call_resets_the_timeout_count(add_server, settings):
    settings.MCP_SUSPECT_TIMEOUTS = 2
    add_server("box", command=sys.executable, args=[STDIO_SERVER])
    conn = runtime.connection("box")
    old_pid = call("box", "pid")
    attempts = conn.attempts
    for _ in range(3):
        with pytest.raises(CallTimedOut):
            call("box", "hang", timeout_s=0.3)
        assert call("box", "pid") == old_pid  # answered in between: not suspect
    assert conn.attempts == attempts and conn.state == "connected"


def test_a_streamable_http_server_back_on_its_port_is_reconnected_by_the_next_call(add_server, http_server,
                                                                                   settings):
    settings.MCP_MIN_BACKOFF_S = 300
    lab = http_server("lab")
    add_server("lab", url=lab.url, allowlist=["echo"])
    conn = runtime.connection("lab")
    assert conn.state == "connected"
    lab.stop()
    with pytest.raises(ServerGone):
        runtime.call("lab", "echo", {"text": "x"}, timeout_s=5, cancelled=threading.Event(), progress=lambda _: None)
    poll(lambda: conn.state == "failed", what="the lost session noticed")
    lab.start()  # back on the same port, while the platform would wait 300 s to try again
    sync.reconcile()
    guard = tool_guard(name="echo", role_name="member", policies=policy_views(), offered=["echo"])
    assert guard.allowed, guard.message
    began = time.monotonic()
    assert tool_sources.get("echo").func(ctx=CTX, text="back") == "echo: back"
    assert time.monotonic() - began < 15 and conn.state == "connected"
