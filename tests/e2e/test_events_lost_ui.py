"""A run whose last events the event log lost, in a real browser (system Chromium, Playwright;
real daphne, Celery worker, PostgreSQL and a PRIVATE ``redis-server``).

Found in a fresh-clone trial (2 + 2 behind HAProxy): Redis down for longer than
``EVENTS_LOG_RETRY_S`` while the model finished. The worker gave those events up — its
``run.completed`` too — and the run completed in the database. When the page's socket came
back, its ``run.resume`` got ``events_missing``; the page read the thread again (the whole
answer) but kept Send locked and Stop shown, "writing…" for good, until a reload.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.fakes.openai_server import text_chunks

from .harness import PG_ADMIN_DSN, Platform, started
from .test_chat_ui import RUN_MS, Session, reset

pytestmark = [pytest.mark.services, pytest.mark.browser]


@pytest.fixture(scope="module")
def platform(upstream, redis_server):
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "EVENTS_LOG_RETRY_S": "1"}  # events are given up 1 s into the outage
    p = Platform("services", extra_env=env, redis_url=redis_server.url(0))
    yield from started(p)


def run_status(platform: Platform) -> str | None:
    """The thread's one run's status, read from PostgreSQL (the API needs Redis for its throttles)."""
    with psycopg.connect(make_conninfo(PG_ADMIN_DSN, dbname=platform.db_name), connect_timeout=5) as conn:
        row = conn.execute("SELECT status FROM agents_run ORDER BY created_at DESC LIMIT 1").fetchone()
    return row[0] if row else None


@contextmanager
def answer_streaming(browser, platform, upstream, width: int, words: list[str], seen: str):
    """A signed-in tab at ``width`` px that asked for ``words`` (4 per second) and shows
    ``seen`` in the streaming answer; yields the :class:`Session`. On leaving (no exception):
    the turn ended — Send free, Stop hidden — with the stored answer whole and no page error
    but the socket's own reconnects."""
    reset(upstream, text_chunks(" ".join(words), pieces=len(words)), delay_s=0.25)
    s = Session(browser, platform, width)
    try:
        s.new_chat()
        s.send(f"{len(words)} words, please.")
        s.page.locator("article.msg.assistant .body.streaming").filter(has_text=seen).wait_for(timeout=RUN_MS)
        yield s
        s.wait_idle()
        assert s.page.locator("article.msg.assistant .body").last.inner_text().split() == words
        assert not [e for e in s.errors if "WebSocket" not in e], s.errors
    finally:
        s.context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_the_page_takes_the_next_message_when_a_runs_end_was_lost(browser, platform, upstream, redis_server, width):
    with answer_streaming(browser, platform, upstream, width, [f"word{n}" for n in range(20)], "word2") as s:
        redis_server.stop()
        try:
            deadline = time.monotonic() + 60
            while run_status(platform) != "completed":  # the model finished meanwhile
                assert time.monotonic() < deadline, platform.log_tail()
                time.sleep(0.3)
        finally:
            redis_server.start()
        # The socket comes back, its resume says events_missing: Send is free again (on leaving).
        s.page.wait_for_function("() => document.getElementById('conn').textContent === 'connected'",
                                 timeout=RUN_MS)


@pytest.mark.parametrize("width", [1280, 390])
def test_the_page_streams_on_after_a_hole_in_the_runs_events(browser, platform, upstream, redis_server, width):
    """Redis away for 3 s mid-answer (past ``EVENTS_LOG_RETRY_S``; restarted empty): the events
    of the outage are gone. The trial's page jumped the hole silently (word 31, then word 382);
    the cursor now says ``events_missing`` there, and the page shows the stored text and streams
    on after it — not frozen until the run ends, and no word twice."""
    with answer_streaming(browser, platform, upstream, width, [f"word{n}" for n in range(40)], "word4") as s:
        redis_server.restart(down_s=3.0)
        streaming = s.page.locator("article.msg.assistant .body.streaming")
        streaming.filter(has_text="word30").wait_for(timeout=RUN_MS)  # live again, before the end
        shown = streaming.inner_text().split()
        assert "word10" in shown and "word11" in shown, shown  # the hole is filled from the stored text
        # ... and the events after it add only what goes past the stored text: the worker saved
        # its text during the outage, so the first events after the hole repeat the stored
        # text's tail (a trial: 70 words shown twice until the end).
        numbers = [int(w.removeprefix("word")) for w in shown[:-1]]  # the last may be half a word
        assert numbers == sorted(set(numbers)), shown


@pytest.mark.parametrize("width", [1280, 390])
def test_a_page_opened_after_redis_restarted_empty_shows_no_word_twice(browser, platform, upstream, redis_server,
                                                                       width):
    """Redis restarted empty for less than ``EVENTS_LOG_RETRY_S``: the worker's events of the
    outage wait, then go to the new, empty log, while its saves kept the stored text running
    ahead. A page opened seconds later gets ``events_missing`` for the log's lost head, shows
    the stored text — and then the replayed events from the log, which repeat its tail: a
    trial's reloaded page and second tab showed 70 words twice until the run's end. The
    events' text is now held while it repeats the stored text."""
    with answer_streaming(browser, platform, upstream, width, [f"word{n}" for n in range(60)], "word4") as s:
        redis_server.restart(down_s=0.4)
        time.sleep(4.0)  # the stored text runs ahead of the new log's first event
        thread_id = s.page.url.rstrip("/").rsplit("/", 1)[-1]
        other = Session(browser, platform, width)
        try:
            other.open(thread_id)
            streaming = other.page.locator("article.msg.assistant .body.streaming")
            streaming.filter(has_text="word45").wait_for(timeout=RUN_MS)  # live, before the end
            shown = streaming.inner_text().split()[:-1]  # the last may be half a word
            assert all(re.fullmatch(r"word\d+", w) for w in shown), shown  # none cut and glued
            numbers = [int(w.removeprefix("word")) for w in shown]
            assert numbers == sorted(set(numbers)) and numbers[0] == 0, shown
            assert not [e for e in other.errors if "WebSocket" not in e], other.errors
        finally:
            other.context.close()
