"""The chat a team opens every morning (issue 54), in a real browser (system Chromium,
Playwright) at 1280 and 390 px, on one embedded platform whose ``openai`` provider is the fake
OpenAI upstream (``tests/fakes/openai_server.py``, reached through the real ``openai`` SDK).

The landing page is a composer that starts the chat on the default model; the header is one
row (two at 390 px, ≤ 96 px) with one model picker and a ⚙ menu; the model titles a chat after
its first answer (the tab title follows); a 24,000-character CJK message arrives whole. Screenshots go to ``tests/e2e/artifacts/everyday-*``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, text_chunks

from .harness import started_with_fake_model

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).parent / "artifacts"
STEP_MS = 15_000
RUN_MS = 60_000
HEIGHTS = {1280: 900, 390: 844}


@pytest.fixture(scope="module")
def fake():
    server = FakeOpenAI(api_key="sk-everyday").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def platform(fake):
    yield from started_with_fake_model("embedded", fake, CHAT_TITLE_GENERATION="true")


@pytest.fixture(params=[1280, 390], ids=["desktop", "phone"])
def width(request):
    return request.param


def reset(fake: FakeOpenAI, *iterations) -> None:
    """Forget earlier tests' unused answers; script these."""
    with fake._lock:
        fake._script.clear()
        fake._served = 0
    fake.script(*iterations)


class Tab:
    """A signed-in browser tab and the errors it reported."""

    def __init__(self, browser, platform, width, user="alice"):
        self.context = browser.new_context(viewport={"width": width, "height": HEIGHTS[width]},
                                           base_url=platform.base_url)
        self.context.set_default_timeout(STEP_MS)
        self.width = width
        self.page = page = self.context.new_page()
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        page.on("dialog", lambda d: (self.errors.append("browser dialog: " + d.message), d.dismiss()))
        page.goto("/accounts/login/")
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", platform.password)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/chat/$"))

    def api(self, method: str, url: str, body: dict | None = None):
        csrf = next(c["value"] for c in self.context.cookies() if c["name"] == "csrftoken")
        return self.page.request.fetch(url, method=method, data=json.dumps(body) if body is not None else None,
                                       headers={"Content-Type": "application/json", "X-CSRFToken": csrf})

    def wait_answered(self) -> None:
        self.page.wait_for_function(
            "() => document.querySelectorAll('article.msg.assistant').length"
            " && !document.querySelector('.body.streaming') && document.getElementById('stop').hidden",
            timeout=RUN_MS)

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"everyday-{name}-{self.width}.png"))

    def no_horizontal_overflow(self) -> None:
        over = self.page.evaluate("() => [document.documentElement.scrollWidth - window.innerWidth,"
                                  " document.body.scrollWidth - window.innerWidth]")
        assert max(over) <= 0, f"horizontal overflow of {over} px at {self.width} px"

    def header_fits(self) -> None:
        """One row at desktop width (every header item on the title's line); at most 96 px tall
        on a phone."""
        box = self.page.locator("header.thread-head").bounding_box()
        if self.width >= 1024:
            tops = self.page.evaluate(
                "() => [...document.querySelectorAll('header.thread-head > *')]"
                ".filter(e => e.offsetParent !== null && getComputedStyle(e).display !== 'none')"
                ".map(e => [e.id || e.className, Math.round(e.getBoundingClientRect().top"
                " + e.getBoundingClientRect().height / 2)])")
            middles = {m for _, m in tops}
            assert max(middles) - min(middles) <= 4, f"header wraps at {self.width}: {tops}"
            assert box["height"] <= 56, box
        else:
            assert box["height"] <= 96, f"header {box['height']} px tall at {self.width} px"


@pytest.fixture
def tab_for(browser, platform, width):
    opened: list[Tab] = []

    def make(user="alice") -> Tab:
        t = Tab(browser, platform, width, user)
        opened.append(t)
        return t

    yield make
    for t in opened:
        t.context.close()


def thread_id_of(page) -> str:
    return re.search(r"/chat/([0-9a-f-]{36})/$", page.url).group(1)


# --- 1 + 2: the default model and the landing composer ---------------------------------------
def test_the_landing_page_sends_at_once_on_the_default_real_model(tab_for, fake, width):
    reset(fake, text_chunks("Good morning from the real model."), text_chunks('"Morning greetings."'),
          text_chunks("Happy to help with that."))
    asked = len(fake.requests)
    t = tab_for()
    page = t.page
    # No form first: the composer is there, the picker shows the default (the configured real
    # provider, not Offline).
    assert page.locator("#model-picker-label").inner_text() == "fake-model"
    t.header_fits()
    t.no_horizontal_overflow()
    t.shot("landing")
    page.fill("#input", "Good morning?")
    page.press("#input", "Enter")
    page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"), timeout=RUN_MS)
    t.wait_answered()
    assert "Good morning from the real model." in page.locator("article.msg.assistant").last.inner_text()
    thread = t.api("GET", f"/api/v1/threads/{thread_id_of(page)}/").json()
    assert (thread["provider"], thread["model"]) == ("openai", "fake-model")
    assert len(fake.requests) == asked + 2  # the answer, then the title
    assert fake.requests[asked]["messages"][-1]["content"].endswith("Good morning?")
    # 3: the model titles the chat after its first answer; header, rail and tab title follow.
    page.wait_for_function("() => document.title === 'Morning greetings · chatplatform'", timeout=RUN_MS)
    assert page.locator("#thread-title").inner_text() == "Morning greetings"
    assert fake.requests[-1]["max_tokens"] == 24 and "tools" not in fake.requests[-1]
    # 5: an answer that cites nothing of what was retrieved shows no source list, only one
    # folded "n more retrieved" line.
    page.fill("#input", "How does the with statement work?")
    page.press("#input", "Enter")
    page.locator("article.msg.assistant .body", has_text="Happy to help with that.").wait_for(timeout=RUN_MS)
    t.wait_answered()
    answer = page.locator("article.msg.assistant").last
    page.wait_for_function("() => { const a = [...document.querySelectorAll('article.msg.assistant')].pop();"
                           " return a && a.querySelector('.sources'); }")
    assert answer.locator(".citations.cited").count() == 0
    summary = answer.locator("details.more-retrieved summary")
    assert re.fullmatch(r"\d+ more retrieved", summary.inner_text())
    assert answer.locator(".citations.uncited").is_hidden()
    summary.click()
    assert answer.locator(".citations.uncited li").count() == int(summary.inner_text().split()[0])
    t.shot("more-retrieved")
    t.header_fits()
    t.no_horizontal_overflow()
    t.shot("first-answer")
    assert not t.errors, t.errors


def test_the_picker_is_searchable_by_keyboard_and_the_menu_holds_the_tier(tab_for, fake, width):
    reset(fake)
    t = tab_for()
    page = t.page
    page.click("#model-picker-button")
    page.wait_for_selector("#model-search:focus")
    groups = page.locator("#model-list .model-group").evaluate_all("els => els.map(e => e.textContent)")
    assert groups == ["Offline (no LLM)", "OpenAI"]  # by name; Anthropic has no key: not offered
    assert "tools" in page.locator("#model-list [role=option]").first.inner_text()
    t.shot("picker")
    page.keyboard.type("rule")
    assert page.locator("#model-list [role=option]").evaluate_all("els => els.map(e => e.dataset.id)") == [
        "offline/rule-based"]
    page.keyboard.press("Enter")
    assert page.locator("#model-panel").is_hidden()
    assert page.evaluate("document.activeElement.id") == "model-picker-button"
    assert page.locator("#model-picker-label").inner_text() == "rule-based"
    # Tier in the ⚙ menu; no environment control (the workspace has no environments).
    page.click("#thread-settings summary")
    page.select_option("#thread-tier", "small")
    assert page.locator("#thread-env").count() == 0
    t.shot("menu")
    page.keyboard.press("Escape")
    page.fill("#input", "How does the with statement work?")
    page.click("#send")
    page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"), timeout=RUN_MS)
    t.wait_answered()
    thread = t.api("GET", f"/api/v1/threads/{thread_id_of(page)}/").json()
    assert (thread["provider"], thread["prompt_tier"]) == ("offline", "small")
    # 5: quiet citations — only the cited sources show; the other retrieved items are one
    # folded "n more retrieved" line; the Markdown export says the same.
    answer = page.locator("article.msg.assistant").last
    cited = answer.locator(".sources .citations.cited li").all_inner_texts()
    assert cited, answer.inner_text()
    fold = answer.locator(".sources details.more-retrieved")
    more = int(fold.locator("summary").inner_text().split()[0]) if fold.count() else 0
    assert answer.locator(".citations.uncited").is_hidden() if more else True
    assert "not cited" not in answer.inner_text().lower()
    t.shot("sources")
    exported = t.api("GET", f"/api/v1/threads/{thread_id_of(page)}/export/?as=markdown").text()
    listed = [ln[2:] for ln in exported.split("Sources:\n\n", 1)[1].split("\n\n")[0].splitlines()]
    assert [re.sub(r"\s+", "", x) for x in listed] == [re.sub(r"\s+", "", c) for c in cited]
    assert (f"*{more} more retrieved, not cited*" in exported) == bool(more)
    # On the thread page the picker switches the chat itself (PATCH), back to the real model.
    page.click("#model-picker-button")
    page.keyboard.type("fake")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.getElementById('model-status').textContent.startsWith('Model set')")
    thread = t.api("GET", f"/api/v1/threads/{thread_id_of(page)}/").json()
    assert (thread["provider"], thread["model"]) == ("openai", "fake-model")
    t.header_fits()
    t.no_horizontal_overflow()
    assert not t.errors, t.errors


def test_the_default_model_chosen_in_settings_starts_new_chats(tab_for, fake, width):
    reset(fake)
    t = tab_for("bob")
    page = t.page
    page.goto("/chat/settings/")
    page.select_option("#default-model", "offline/rule-based")
    page.click("#default-model-form button[type=submit]")
    page.wait_for_selector("#prefs-saved")
    t.no_horizontal_overflow()
    t.shot("settings")
    page.goto("/chat/")
    assert page.locator("#model-picker-label").inner_text() == "rule-based"
    t.api("PATCH", "/api/v1/me/preferences/", {"default_model": ""})  # back to the platform's


# --- 4: a long CJK message arrives whole ----------------------------------------------------------
def test_a_24000_character_cjk_message_arrives_whole(tab_for, fake, width):
    reset(fake, text_chunks("收到。"), text_chunks("长文测试"))
    asked = len(fake.requests)
    t = tab_for()
    page = t.page
    thread = t.api("POST", "/api/v1/threads/", {"workspace": "demo"}).json()
    page.goto(f"/chat/{thread['id']}/")
    page.wait_for_selector("#conn.ok", state="attached")
    cjk = "漢字かな交じり文" * 3000  # 24,000 characters, 72 KB of UTF-8
    page.fill("#input", cjk)
    assert page.locator("#send").is_enabled()
    page.click("#send")
    t.wait_answered()
    stored = t.api("GET", f"/api/v1/threads/{thread['id']}/messages/").json()
    assert [m["content"] for m in stored if m["role"] == "user"] == [cjk]
    assert fake.requests[asked]["messages"][-1]["content"].endswith(cjk)
    page.wait_for_function("() => document.title === '长文测试 · chatplatform'", timeout=RUN_MS)
    assert page.input_value("#input") == ""
    t.no_horizontal_overflow()
    assert not t.errors, t.errors
