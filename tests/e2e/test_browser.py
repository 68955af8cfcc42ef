"""End-to-end in a real browser: the system Chromium driven by Playwright (sync API).

Log in through the login page, start a chat with the offline provider from the left rail,
ask a question in the composer and watch the answer stream in; a screenshot of the finished
page goes to ``tests/e2e/artifacts/``. Skipped when Chromium is missing, unless ``CI=true``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .flows import QUESTION, WITH_TOPIC_TITLE

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).parent / "artifacts"
STEP_MS = 15_000
RUN_MS = 60_000


def test_chat_in_the_browser(browser, embedded_platform):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=embedded_platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    # Console errors, except the browser's own "Failed to load resource" lines: HTTP failures
    # are checked by URL below (the browser's automatic /favicon.ico request may 404).
    page.on("console", lambda msg: page_errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    page.on("response", lambda r: page_errors.append(f"HTTP {r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
    try:
        # Sign in.
        page.goto("/accounts/login/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", embedded_platform.password)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/chat/$"))
        assert page.locator(".rail-head").inner_text().count("alice") == 1

        # The landing page is a composer: ask and send; the chat is created on send with the
        # default model (Offline: no real provider is configured here).
        assert page.locator("#model-picker-label").inner_text() == "rule-based"
        page.fill("#input", QUESTION)
        page.click("#send")
        page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
        thread_id = page.locator("#messages").get_attribute("data-thread-id")
        assert thread_id and thread_id in page.url
        page.locator("article.msg.user .body", has_text=QUESTION).wait_for()

        # The tool call row appears, then the answer streams and finishes.
        tool = page.locator("article.msg.assistant details.tool", has=page.locator(".tool-name", has_text="search_knowledge"))
        tool.first.wait_for()
        page.locator("article.msg.assistant details.tool.succeeded").first.wait_for(timeout=RUN_MS)
        # Finished: after run.completed the page re-reads the thread (the stored message's
        # rendered Markdown replaces the streamed text), the body is no longer streaming and
        # Send is enabled again.
        page.wait_for_function(
            "() => { const b = document.querySelectorAll('article.msg.assistant .body');"
            " return b.length && !b[b.length - 1].classList.contains('streaming')"
            " && b[b.length - 1].textContent.trim().length > 0"
            " && !document.getElementById('send').disabled; }",
            timeout=RUN_MS,
        )

        assert tool.count() == 1
        assert tool.first.locator(".tool-status").inner_text() == "succeeded"
        assert "succeeded" in (tool.first.get_attribute("class") or "")
        answer = page.locator("article.msg.assistant .body").last
        text = answer.inner_text()
        assert WITH_TOPIC_TITLE in text, text[:500]
        assert "with" in text.lower()
        assert answer.locator("blockquote").count() >= 1  # the quoted passage, rendered Markdown
        assert "with" in answer.locator("blockquote").first.inner_text().lower()
        assert page.locator("#conn").inner_text() == "connected"
        cites = page.locator("article.msg.assistant .citations.cited li a").all_inner_texts()  # the shown ones
        assert WITH_TOPIC_TITLE in cites, cites
        assert len(cites) == len(set(cites)), f"one line per source item: {cites}"
        # The auto-title appears without a reload.
        page.wait_for_function("document.getElementById('thread-title').textContent !== 'New chat'")
        assert page.locator("#thread-title").inner_text() == QUESTION
        # A complete message carries no status label (only truncated/error/cancelled do).
        assert page.locator("article.msg.assistant .meta").last.inner_text().strip() == ""
        assert not page_errors, page_errors
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chat-offline-with-statement.png"), full_page=True)

        # Reload: the conversation is drawn again from the API, and the thread now carries
        # the auto-title taken from the first message.
        page.reload()
        page.wait_for_selector("#conn.ok", state="attached")
        assert page.locator("#thread-title").inner_text() == QUESTION
        assert page.locator("nav.threads .active .t-title").inner_text() == QUESTION
        reloaded = page.locator("article.msg.assistant details.tool.succeeded .tool-name")
        assert reloaded.all_inner_texts() == ["search_knowledge"]
        assert WITH_TOPIC_TITLE in page.locator("article.msg.assistant .body").last.inner_text()
        assert page.locator("article.msg.assistant .citations.cited li a").all_inner_texts() == cites
        assert not page_errors, page_errors
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
        raise
    finally:
        context.close()
