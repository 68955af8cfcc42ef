"""A run that waits for a free worker, in a real browser (system Chromium, Playwright).

The platform runs with one turn thread (``EMBEDDED_EXECUTOR_THREADS=1``), so a second run
waits while a first one holds it — as every run does when all of a deployment's worker threads
are busy. Found from a fresh clone: the page showed nothing for such a run (not even the
person's own message, the text read-only in the composer, no Stop) until a worker took it up.
"""

from __future__ import annotations

import re

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .test_chat_ui import RUN_MS, STEP_MS, Session, embedded_platform, reset

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def one_thread_platform(upstream):
    platform = embedded_platform(upstream, EMBEDDED_EXECUTOR_THREADS="1")
    yield platform
    platform.stop()


def test_a_run_waiting_for_a_worker_shows_the_message_waiting_and_stop(browser, one_thread_platform, upstream):
    fake = upstream
    reset(fake, text_chunks("First answer, slowly.", pieces=4), text_chunks("Second answer.", pieces=2))
    fake.first_token_delay_s = 10.0  # the first run holds the only turn thread this long
    s = Session(browser, one_thread_platform, 1280)
    try:
        token = flows.login_token(one_thread_platform, "bob")
        other = flows.create_thread(one_thread_platform, token, provider="openai")
        with flows.http(one_thread_platform, token) as client:
            assert client.post(f"/api/v1/threads/{other}/runs/", json={"content": "go first"}).status_code == 202
        s.new_chat()
        page = s.page
        s.send("Am I in the queue?")
        waiting = page.locator("article.msg.assistant .meta.awaiting")
        waiting.wait_for(timeout=RUN_MS)
        assert waiting.inner_text() == "waiting for a free worker…"
        assert "Am I in the queue?" in page.locator("article.msg.user").last.inner_text()  # drawn
        assert page.input_value("#input") == ""  # taken: the composer is clear
        assert page.locator("#stop").is_visible()
        s.shot("queued")
        page.reload()  # still waiting after a reload (it showed the question alone, Send enabled)
        waiting.wait_for(timeout=STEP_MS)
        assert waiting.inner_text() == "waiting for a free worker…" and page.locator("#stop").is_visible()
        page.locator("article.msg.assistant .body").filter(has_text="Second answer.").wait_for(timeout=RUN_MS)
        s.wait_idle()
        assert page.locator(".meta.awaiting").count() == 0
        assert not s.errors, s.errors
    finally:
        fake.first_token_delay_s = 0.0
        s.context.close()


def test_the_question_is_drawn_as_soon_as_the_send_is_taken(browser, one_thread_platform, upstream):
    """``run.queued`` draws the question from the text sent: it used to appear only once the
    page had read the thread again (at ``run.started``, or a second later as waiting), so for
    that long the text had left the composer and was nowhere. Every read of the thread is held
    here: only the page's own drawing can show the question."""
    reset(upstream, text_chunks("Drawn answer.", pieces=2))
    s = Session(browser, one_thread_platform, 1280)
    messages_url = re.compile(r"/api/v1/threads/[^/]+/messages/")
    held, released = [], []

    def hold(route):
        if released:
            route.continue_()
        else:
            held.append(route)

    try:
        s.new_chat()
        page = s.page
        page.route(messages_url, hold)
        s.send("Am I drawn at once?")
        question = page.locator("article.msg.user").filter(has_text="Am I drawn at once?")
        question.wait_for(timeout=STEP_MS)
        assert page.input_value("#input") == ""
        released.append(True)
        for route in held:
            route.continue_()
        page.locator("article.msg.assistant .body").filter(has_text="Drawn answer.").wait_for(timeout=RUN_MS)
        s.wait_idle()
        assert question.count() == 1  # the thread read again replaces it, not doubles it
        assert not s.errors, s.errors
    finally:
        s.context.close()


def test_an_error_shown_during_a_run_clears_when_the_run_is_heard_again(browser, one_thread_platform, upstream):
    """A Stop that failed (the database was away: "could not stop: …") left that error in the
    header while the answer went on streaming, until the run's end. The run's next event
    says the page is hearing it again."""
    reset(upstream, text_chunks("One two three four five six seven eight.", pieces=8), delay_s=0.5)
    upstream.first_token_delay_s = 3.0
    s = Session(browser, one_thread_platform, 1280)
    cancel_url = re.compile(r"/api/v1/runs/[^/]+/cancel/")
    try:
        s.new_chat()
        page = s.page
        page.route(cancel_url, lambda route: route.fulfill(status=503, json={"error": {
            "code": "service_unavailable", "message": "A backing service is not reachable right now."}}))
        s.send("Stop me if you can")
        page.locator("#stop").wait_for(state="visible", timeout=STEP_MS)
        page.click("#stop")
        page.locator("#conn.bad").wait_for(timeout=STEP_MS)
        assert page.locator("#conn").inner_text().startswith("could not stop")
        page.locator("article.msg.assistant .body.streaming").filter(has_text="One").wait_for(timeout=RUN_MS)
        assert page.locator("#conn").inner_text() == "connected"  # while it still streams
        assert page.locator("article.msg.assistant .body.streaming").count() == 1
        s.wait_idle()
    finally:
        upstream.first_token_delay_s = 0.0
        upstream.delay_s = 0.0
        s.context.close()
