"""Search by meaning on the knowledge page, in a real browser, when the embedding endpoint is
down: the web process's start-up job fails (connection refused), the page says search by
meaning is paused and why, and a natural question typed in the search box still answers
from keywords. At 1280 and 390 px on one platform, no horizontal overflow.

The platform embeds through an OpenAI-compatible endpoint on a loopback port nothing listens
on (no model is loaded: this costs a platform start, not a model).
"""

from __future__ import annotations

import re
import socket
import time

import pytest

from .harness import Platform, started
from .test_browser import ARTIFACTS, STEP_MS  # the browser fixture is in tests/e2e/conftest.py

pytestmark = pytest.mark.browser

PAUSED_WITHIN_S = 60


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def platform():
    yield from started(Platform("embedded", extra_env={
        "KNOWLEDGE_EMBEDDINGS": "openai",
        "KNOWLEDGE_EMBEDDING_MODEL": "e2e-embed",
        "KNOWLEDGE_EMBEDDING_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1",
        "KNOWLEDGE_EMBEDDING_API_KEY": "sk-e2e",
        "KNOWLEDGE_EMBEDDING_RETRY_S": "1",
    }))


@pytest.mark.parametrize("width", [1280, 390])
def test_the_knowledge_page_says_search_by_meaning_is_paused_and_keywords_answer(browser, platform, width):
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        page.goto("/accounts/login/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", platform.password)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/chat/$"))
        # The job fails a few seconds after start-up; the note is rendered by the server.
        deadline = time.monotonic() + PAUSED_WITHIN_S
        while True:
            page.goto("/knowledge/?workspace=demo")
            if page.locator(".kb-embedding-failed").count() or time.monotonic() > deadline:
                break
            page.wait_for_timeout(500)
        note = page.locator(".kb-embedding-failed")
        assert note.count() == 1, page.content()[:2000]
        text = note.inner_text()
        assert "Search by meaning is paused" in text and "keyword" in text
        assert "APIConnectionError" in text
        assert "sk-e2e" not in page.content()  # the endpoint's key never reaches the page

        page.fill("#kb-filters input[name=q]", "How does the with statement work when an error happens?")
        page.click("#kb-filters button[type=submit]")
        page.wait_for_url(re.compile(r"[?&]q="))
        titles = page.locator("#kb-results .kb-item-title").all_inner_texts()
        assert titles and "The with statement" in titles[:3], titles
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"horizontal overflow of {overflow}px at {width}px"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"knowledge-embedding-paused-{width}.png"), full_page=False)
        assert not errors, errors
    finally:
        context.close()
