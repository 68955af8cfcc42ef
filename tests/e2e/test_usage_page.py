"""The usage page in a real browser: seeded usage is drawn by the vendored Chart.js, the
table and the CSV export agree with it, and a member sees only their own page."""

from __future__ import annotations

import csv
import io
import re

import pytest

from . import flows
from .test_browser import ARTIFACTS, STEP_MS

pytestmark = pytest.mark.browser


def sign_in(context, platform, username):
    page = context.new_page()
    flows.sign_in_page(page, platform, username)
    return page


def test_usage_page_draws_the_seeded_usage(browser, embedded_platform):
    embedded_platform.manage("seed_usage", "--sample-days", "14")
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, base_url=embedded_platform.base_url)
    context.set_default_timeout(STEP_MS)
    errors: list[str] = []
    try:
        page = sign_in(context, embedded_platform, "admin")
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # Console errors too: a module that fails to load, a Content-Security-Policy violation.
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto("/usage/all/?days=30&group=user")
        page.wait_for_function("() => document.getElementById('chart-tokens').chart !== undefined")
        chart = page.evaluate("""() => { const c = document.getElementById('chart-tokens').chart;
            return {labels: c.data.labels.length, sets: c.data.datasets.map(d => [d.label, d.data.reduce((a, b) => a + b, 0)]),
                    drawn: c.getDatasetMeta(0).data.length}; }""")
        embedded = page.evaluate("() => JSON.parse(document.getElementById('usage-data').textContent)")
        assert chart["labels"] == 30 and chart["drawn"] == 30
        by_user = {label: total for label, total in chart["sets"]}
        assert set(by_user) == {"alice", "bob", "admin"}
        assert sum(by_user.values()) == embedded["totals"]["tokens"] > 0
        assert page.locator("#chart-cost").count() == 1  # priced sample usage: a cost chart too
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "usage-page.png"), full_page=True)

        with page.expect_download() as download:
            page.click("#usage-csv")
        rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
        assert sum(int(r["input_tokens"]) + int(r["output_tokens"]) for r in rows) == embedded["totals"]["tokens"]
        assert {r["user"] for r in rows} == {"alice", "bob", "admin"}
        assert not errors, errors

        member = sign_in(context.browser.new_context(base_url=embedded_platform.base_url), embedded_platform, "alice")
        assert member.goto("/usage/all/").url.endswith("/admin/login/?next=/usage/all/")  # staff only
        member.goto("/usage/?days=30&group=model")
        member.wait_for_function("() => document.getElementById('chart-tokens').chart !== undefined")
        own = member.evaluate("() => JSON.parse(document.getElementById('usage-data').textContent)")
        alice_total = sum(int(r["input_tokens"]) + int(r["output_tokens"]) for r in rows if r["user"] == "alice")
        assert own["totals"]["tokens"] == alice_total

        # In a chat: each reply shows its tokens on hover and the header the chat's total.
        member.goto("/chat/")  # the landing composer: the chat starts on send (default: Offline here)
        member.fill("#input", "How does the with statement work?")
        member.click("#send")
        member.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
        member.wait_for_function("() => document.getElementById('thread-usage').textContent.includes('tokens')",
                                 timeout=60_000)
        total = int(member.locator("#thread-usage").inner_text().split()[0])
        turn = member.locator("article.msg.assistant").last
        assert "output tokens" in (turn.get_attribute("title") or "") and "no price set" in turn.get_attribute("title")
        thread_id = member.locator("#messages").get_attribute("data-thread-id")
        stored = member.evaluate("""(id) => fetch('/api/v1/threads/' + id + '/messages/').then(r => r.json())""",
                                 thread_id)
        assert total == sum((m["usage"].get("input_tokens") or 0) + (m["usage"].get("output_tokens") or 0)
                            for m in stored if m["role"] == "assistant") > 0
        member.context.close()
    finally:
        context.close()
