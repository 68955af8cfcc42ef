"""Fixtures of the multi-host tests: one cluster of network namespaces per session (start-up is
the expensive part), the fake model and the side-effect counter in the test process.

Skipped, with the reason, where namespaces cannot be made (not root, a tool missing); under
``CI=true`` as root a missing tool fails instead — CI must run these tests.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fakes.openai_server import FakeOpenAI, _Scripted, text_chunks, tool_call_chunks

from .cluster import Cluster, ClusterError, cannot_make_namespaces

ANSWER_WORDS = 60
AFTER_TOOL = "I could not confirm the write; please check."
RESULTS: list[str] = []


def record(fault: str, **numbers) -> None:
    """Keep one fault's numbers for the session's summary (``MULTIHOST <fault> k=v …``)."""
    parts = [f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in numbers.items()]
    line = f"MULTIHOST {fault} " + " ".join(parts)
    RESULTS.append(line)
    print(line)


def pytest_terminal_summary(terminalreporter):
    if RESULTS:
        terminalreporter.section("multi-host faults")
        for line in RESULTS:
            terminalreporter.write_line(line)


def answer_text(words: int = ANSWER_WORDS) -> str:
    return "".join(f"w{n} " for n in range(words))


class Counter:
    """An HTTP server in the test process counting the side effects (``counted_write``)."""

    def __init__(self, host: str) -> None:
        self.lines: list[str] = []
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                counter.lines.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/count"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, text: str) -> int:
        return self.lines.count(text)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StreamingModel(FakeOpenAI):
    """The fake model, answering from the request (no script queue to race over): a last user
    message ``write <marker>`` gets a ``counted_write`` call of ``<marker>`` that sleeps a
    minute, a conversation ending in a tool result gets :data:`AFTER_TOOL`, anything else
    ``answer_text()`` in one chunk per word (``delay_s`` apart) — any number of chats at once."""

    def fallback_iteration(self):
        return _Scripted(self.respond, raw=False)

    @staticmethod
    def respond(body: dict):
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return text_chunks(AFTER_TOOL)
        content = last.get("content") if isinstance(last.get("content"), str) else ""
        if last.get("role") == "user" and content.startswith("write "):
            marker = content.split(" ", 1)[1]
            return tool_call_chunks([("call_w", "counted_write", json.dumps({"text": marker, "seconds": 60}))])
        return text_chunks(answer_text(), pieces=ANSWER_WORDS)


def _require_namespaces() -> None:
    reason = cannot_make_namespaces()
    if reason is None:
        return
    if os.geteuid() == 0 and os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true (as root) requires the multi-host harness: {reason}", pytrace=False)
    pytest.skip(f"multi-host harness skipped: {reason}")


@pytest.fixture(scope="session")
def cluster():
    _require_namespaces()
    c = Cluster()
    try:
        c.build_network()
        model = StreamingModel(api_key="sk-multihost", delay_s=0.02)
        model.bind_host = c.ip("root")
        model.start()
        counter = Counter(c.ip("root"))
        c.model, c.counter = model, counter
        c.extra_env.update({
            "OPENAI_API_KEY": model.api_key, "OPENAI_BASE_URL": model.base_url, "OPENAI_MODEL": "fake-model",
            "EXTRA_TOOL_MODULES": "tests.multihost.tools", "MH_COUNTER_URL": counter.url,
            # Short leases so a lost worker's runs come back within seconds (README: the reaper).
            "RUN_LEASE_S": "3", "RUN_HEARTBEAT_S": "0.5", "RUN_REAPER_PERIOD_S": "1",
            "STREAM_PERSIST_INTERVAL_S": "0.5", "RUN_QUEUED_DEADLINE_S": "10",
            "MAX_ACTIVE_RUNS_PER_USER": "1000",  # one user streams every chat of a test
            "RUN_RATE_LIMIT": "100000/60", "WS_FRAME_RATE_LIMIT": "100000/60",
            # README "Across hosts": above the longest Redis partition a worker rides out (each
            # try under a partition waits out socket and Sentinel timeouts, so 20 s cut off can
            # use up the default 30 s; events given up reach readers as events_missing).
            "EVENTS_LOG_RETRY_S": "120",
        })
        try:
            c.start()
        except ClusterError as exc:
            pytest.fail(f"the multi-host cluster did not start: {exc}", pytrace=False)
        yield c
    finally:
        c.teardown()
        if getattr(c, "model", None):
            c.model.stop()
        if getattr(c, "counter", None):
            c.counter.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        value = getattr(item, "funcargs", {}).get("cluster")
        if isinstance(value, Cluster):
            report.sections.append(("cluster logs", value.log_tail(40)))
