"""``run.completed.truncated`` across real processes: a tool call cut off by the output limit
(twice: the one retry too) ends the run ``completed`` with the reason on the live event, in
embedded mode (daphne, SQLite) and in production mode (a Celery worker, PostgreSQL, Redis).
The page's rendering of it: ``tests/e2e/test_chat_ui.py::test_a_cut_off_answer_says_why_when_the_run_ends``."""

from __future__ import annotations

import json

import pytest

from tests.fakes.openai_server import tool_call_chunks

from . import flows
from .harness import started_with_fake_model

CUT = '{"query": "a very long query that never fini'


@pytest.fixture(scope="module", params=["embedded", pytest.param("services", marks=pytest.mark.services)])
def platform(request, upstream):
    yield from started_with_fake_model(request.param, upstream)


def test_a_cut_off_answer_ends_with_run_completed_truncated(platform, upstream):
    upstream.script(*[tool_call_chunks([("c1", "search_knowledge", CUT)])] * 2)
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    with flows.ws_connect(platform, thread_id, token=token) as ws:
        ws.send(json.dumps({"type": "message.send", "content": "search for something long"}))
        events = flows.events_until(ws, lambda e: e.get("type") in flows.TERMINAL)
    end = events[-1]
    assert end["type"] == "run.completed", end
    assert end["truncated"]["code"] == "output_limit"
    assert "reached its output limit in the middle of a tool call" in end["truncated"]["message"]
    answer = [m for m in flows.messages(platform, token, thread_id) if m["role"] == "assistant"][-1]
    assert answer["status"] == "truncated" and answer["error"] == end["truncated"]
