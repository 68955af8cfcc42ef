"""A run handed on from a dead worker goes before the runs sent after it (real Redis broker,
PostgreSQL, Celery workers of one thread each, the reaper of the web process).

Found in a fresh-clone trial: with every worker thread busy, a run whose worker was killed
mid-answer was re-queued *behind* the sends that came after it (the broker's list is first in,
first out), so the person whose answer broke waited longest. The reaper now sends it at the
broker's first priority (``executors.PRIORITY_REQUEUED``).

And while no worker takes it up, a page showing the run says so ("queued again, waiting for a
free worker", from the quiet turn's look-up) — in real Chromium at 1280 and 390 px.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started
from .test_chat_ui import RUN_MS, Session, reset
from .test_kill import kill_worker

pytestmark = pytest.mark.services

@pytest.fixture(scope="module")
def platform(upstream):
    require_services(services_unreachable_reason())
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "MAX_ACTIVE_RUNS_PER_USER": "10", "RUN_LEASE_S": "4", "RUN_HEARTBEAT_S": "1",
           "RUN_REAPER_PERIOD_S": "1"}
    p = Platform("services", extra_env=env, worker_concurrency=1)
    yield from started(p)


def asked(upstream, since: int = 0) -> list[str]:
    """The last user message of each request the model got from the ``since``-th on, in order."""
    return [[m for m in body["messages"] if m["role"] == "user"][-1]["content"]
            for body in upstream.requests[since:]]


def test_a_run_requeued_after_its_worker_died_is_taken_before_later_sends(platform, upstream):
    reset(upstream, text_chunks(" ".join(f"word{n}" for n in range(80)), pieces=80),
          delay_s=0.2)  # the first answer streams for 16 s: the worker's one thread stays busy
    since = len(upstream.requests)
    token = flows.login_token(platform, "alice")
    ids = []
    try:
        with flows.http(platform, token) as client:
            for content in ("first", "second", "third"):
                thread_id = flows.create_thread(platform, token, provider="openai")
                r = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": content})
                assert r.status_code == 202, r.text
                ids.append(r.json()["run_id"])
                if content == "first":  # streaming on the worker's only thread before the others are sent
                    flows.wait_for(lambda: asked(upstream, since) == ["first"], "the worker never asked the model")
            time.sleep(1.0)
            assert flows.run_rows(platform, ids[1:], "status", "attempts") == {ids[1]: ["queued", 0], ids[2]: ["queued", 0]}
            kill_worker(platform)
            upstream.delay_s = 0.0
            # The web process's reaper hands the first run on once its lease has expired.
            flows.wait_for(lambda: flows.run_rows(platform, ids[:1], "status", "attempts")[ids[0]] == ["queued", 1], "the reaper never re-queued it",
                     timeout=30)
            platform._start_worker()
            for run_id in ids:
                flows.wait_for(lambda run_id=run_id: client.get(f"/api/v1/runs/{run_id}/").json()["status"] == "completed",
                         f"run {run_id} did not complete", timeout=60)
    finally:
        upstream.delay_s = 0.0
    # The model was asked for "first" again before the sends that came after it.
    assert asked(upstream, since) == ["first", "first", "second", "third"]


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_page_says_a_run_was_queued_again_while_no_worker_takes_it(browser, platform, upstream, width):
    """The quiet turn's look-up (``GET /api/v1/runs/{id}/``) finds the run queued after it had
    started: the page says why nothing comes, and streams the new attempt once a worker is back."""
    words = [f"word{n}" for n in range(40)]
    reset(upstream, text_chunks(" ".join(words), pieces=40), text_chunks("Picking up again.", pieces=2),
          delay_s=0.25)
    s = Session(browser, platform, width)
    try:
        s.new_chat()
        page = s.page
        s.send("Forty words, please.")
        page.locator("article.msg.assistant .body.streaming").filter(has_text="word3").wait_for(timeout=RUN_MS)
        kill_worker(platform)
        meta = page.locator("article.msg.assistant .meta.quiet")
        meta.filter(has_text="queued again").wait_for(timeout=40_000)
        assert re.fullmatch(r"nothing new for \d+ s · queued again, waiting for a free worker", meta.inner_text())
        shown = page.locator("article.msg.assistant .body").last.inner_text()
        assert shown.startswith("word0 word1 word2 word3") and " ".join(words).startswith(shown)  # kept meanwhile
        assert page.locator("#stop").is_visible()
        s.shot("queued-again")
        upstream.delay_s = 0.0
        platform._start_worker()
        page.locator("article.msg.assistant .body").filter(has_text="Picking up again.").wait_for(timeout=RUN_MS)
        s.wait_idle()
        assert page.locator(".meta.quiet").count() == 0
        assert not [e for e in s.errors if "WebSocket" not in e], s.errors
    finally:
        upstream.delay_s = 0.0
        s.context.close()
        if platform.procs["celery"].poll() is not None:  # failed before a worker came back
            platform._start_worker()
