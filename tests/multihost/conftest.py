"""Fixtures of the multi-host tests: one cluster of network namespaces per session (start-up is
the expensive part), the fake model and the side-effect counter in the test process.

Skipped, with the reason, where namespaces cannot be made (not root, a tool missing); under
``CI=true`` as root a missing tool fails instead — CI must run these tests.
"""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fakes.openai_server import FakeOpenAI, text_chunks
from tests.fakes.openai_server import _Scripted  # noqa: PLC2701 - the fallback answer's wrapper

from .cluster import Cluster, ClusterError, cannot_make_namespaces

ANSWER_WORDS = 60


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
    """The fake model: scripted answers first, then every request gets ``answer_text()`` in one
    chunk per word (``delay_s`` apart), so any number of chats can stream at once."""

    def fallback_iteration(self):
        return _Scripted(text_chunks(answer_text(), pieces=ANSWER_WORDS), raw=False)


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
            "RUN_LEASE_S": "4", "RUN_HEARTBEAT_S": "1", "RUN_REAPER_PERIOD_S": "1",
            "STREAM_PERSIST_INTERVAL_S": "0.5", "RUN_QUEUED_DEADLINE_S": "10",
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
