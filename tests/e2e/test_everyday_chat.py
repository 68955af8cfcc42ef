"""The chat a team opens every morning (issue 54), in a real browser (system Chromium,
Playwright) at 1280 and 390 px, on one embedded platform whose ``openai`` provider is the fake
OpenAI upstream (``tests/fakes/openai_server.py``, reached through the real ``openai`` SDK).

The landing page is a composer that starts the chat on the default model; the header is one
row (two at 390 px, ≤ 96 px) with one model picker and a ⚙ menu; the model titles a chat after
its first answer (the tab title follows); a 24,000-character CJK message arrives whole; an
approval card names a knowledge item by its title and says the arguments and the rule once; a
send refused by a spent budget says so once. Screenshots go to ``tests/e2e/artifacts/everyday-*``.
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
        page.on("console", lambda msg: self.errors.append(msg.text)
                if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
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


# --- 6: own dialogs, a skip link, one Tab stop per chat --------------------------------------------
def test_rename_delete_and_errors_use_keyboard_usable_dialogs(tab_for, fake, width):
    reset(fake)
    t = tab_for("bob")
    page = t.page
    keep = t.api("POST", "/api/v1/threads/", {"workspace": "demo", "title": "Keep me"}).json()
    doomed = t.api("POST", "/api/v1/threads/", {"workspace": "demo", "title": "Delete me"}).json()
    page.goto(f"/chat/{keep['id']}/")
    # The skip link is the first Tab stop and takes focus to the content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    assert page.locator(".skip-link").bounding_box()["y"] >= 0  # visible while focused
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    if width < 768:
        page.click("#rail-toggle")
    # One Tab stop per chat: its link (the ⋯ button is reached with →).
    stops = page.evaluate(
        "() => [...document.querySelectorAll('#thread-list .thread-item')].map(row =>"
        " [...row.querySelectorAll('a[href], button')].filter(e => e.tabIndex >= 0 && e.offsetParent !== null).length)")
    assert stops and set(stops) == {1}, stops
    link = page.locator(f'.thread-item[data-thread-id="{doomed["id"]}"] > a')
    link.focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.action") == "rename"
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Rename chat")
    dialog.wait_for()
    assert page.evaluate("document.activeElement.tagName") == "INPUT"
    t.shot("rename-dialog")
    page.keyboard.press("Control+A")
    page.keyboard.type("Renamed by keyboard")
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => document.querySelector('.thread-item[data-thread-id=\"{doomed['id']}\"] .t-title')"
                           ".textContent === 'Renamed by keyboard'")
    assert page.evaluate("document.activeElement.closest('.thread-item').dataset.threadId") == doomed["id"]
    # Delete asks first; Escape (and Cancel, focused first) keeps the chat.
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowUp")  # the last item: Delete
    assert page.evaluate("document.activeElement.dataset.action") == "delete"
    page.keyboard.press("Enter")
    confirm = page.get_by_role("dialog", name="Delete chat?")
    confirm.wait_for()
    assert "Renamed by keyboard" in confirm.inner_text()
    assert page.evaluate("document.activeElement.value") == "cancel"
    t.shot("delete-dialog")
    page.keyboard.press("Escape")
    confirm.wait_for(state="detached")
    assert link.count() == 1
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Enter")
    page.get_by_role("dialog", name="Delete chat?").get_by_role("button", name="Delete").click()
    page.wait_for_function(f"() => !document.querySelector('.thread-item[data-thread-id=\"{doomed['id']}\"]')")
    assert t.api("GET", f"/api/v1/threads/{doomed['id']}/").status == 404
    # A failed action says why in a dialog, not an alert box.
    page.route(re.compile(r".*/api/v1/threads/[0-9a-f-]+/$"), lambda route: route.fulfill(
        status=503, content_type="application/json",
        body=json.dumps({"error": {"code": "service_unavailable", "message": "The service is briefly unavailable."}}))
        if route.request.method == "PATCH" else route.continue_())
    page.locator(f'.thread-item[data-thread-id="{keep["id"]}"] > a').focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    page.get_by_role("dialog", name="Rename chat").wait_for()
    page.keyboard.press("Enter")
    error = page.get_by_role("dialog", name="Could not rename the chat")
    error.wait_for()
    assert "briefly unavailable" in error.inner_text()
    t.no_horizontal_overflow()
    t.shot("error-dialog")
    page.keyboard.press("Escape")
    assert not t.errors, t.errors  # no browser prompt/confirm/alert was shown


# --- 7: one navigation on every page ------------------------------------------------------------
PAGES = {"chat": "/chat/", "knowledge": "/knowledge/", "usage": "/usage/", "settings": "/chat/settings/",
         "approvals": "/chat/approvals/"}


def test_every_page_has_the_same_navigation_and_fits(tab_for, fake, width):
    t = tab_for()
    page = t.page
    seen = {}
    for name, url in PAGES.items():
        page.goto(url)
        if name == "chat" and width < 768:
            page.click("#rail-toggle")  # on a phone the chat's navigation is in the drawer
            page.wait_for_function("() => document.getElementById('rail').getBoundingClientRect().left >= 0")
        nav = page.get_by_role("navigation", name="Main")
        assert nav.count() == 1, name
        seen[name] = nav.locator("a").evaluate_all("els => els.map(e => new URL(e.href).pathname)")
        current = nav.locator("[aria-current=page]").evaluate_all("els => els.map(e => new URL(e.href).pathname)")
        assert current == [url], (name, current)
        sign_out = nav.get_by_role("button", name=re.compile("Sign out"))
        box = sign_out.bounding_box()
        assert sign_out.is_visible() and box["x"] >= 0 and box["x"] + box["width"] <= width, (name, box)
        t.no_horizontal_overflow()
        if name == "usage":  # the table scrolls inside its box; no header breaks into letters
            lines = page.locator(".usage-table th").evaluate_all(
                "els => els.map(e => { const r = document.createRange(); r.selectNodeContents(e);"
                " return r.getClientRects().length; })")
            assert set(lines) == {1}, lines
        t.shot(f"nav-{name}")
    assert len({tuple(v) for v in seen.values()}) == 1, seen
    assert set(seen["chat"]) >= set(PAGES.values())
    # Sign out works from the Knowledge page (it was clipped away at 390 px).
    page.goto("/knowledge/")
    page.get_by_role("button", name=re.compile("Sign out")).click()
    page.wait_for_url(re.compile(r"/accounts/(login|logout)/"))


# --- 8: small bugs: a failed tool's reason, Copy on one-line code, the edit box's buttons -------------
def test_a_failed_tool_says_why_copy_never_covers_code_and_the_edit_buttons_stay_small(tab_for, fake, width):
    from tests.fakes.openai_server import tool_call_chunks
    from tests.policy.tooltest import call

    reset(fake, tool_call_chunks([call("c1", "save_to_knowledge", {"title": "Note", "content": "x"})]),
          text_chunks("Use this:\n\n```\nx = 1\n```\n"))
    t = tab_for()
    page = t.page
    thread = t.api("POST", "/api/v1/threads/", {"workspace": "demo", "title": "Small bugs"}).json()
    page.goto(f"/chat/{thread['id']}/")
    page.wait_for_selector("#conn.ok", state="attached")
    page.fill("#input", "Save a note, then show the code")
    page.click("#send")
    t.wait_answered()
    for _ in range(2):  # live, then after a reload
        row = page.locator("article.msg.assistant details.tool").first
        assert row.get_attribute("data-status") == "failed"
        reason = row.locator(".tool-reason")
        assert reason.is_visible() and "model saves are off" in reason.inner_text()  # not folded away
        code = page.locator(".code-block").last
        button = code.locator(".copy-code").bounding_box()
        text = code.locator("code").evaluate(
            "e => { const r = document.createRange(); r.selectNodeContents(e); const b = r.getBoundingClientRect();"
            " return {x: b.x, y: b.y, width: b.width, height: b.height}; }")
        overlaps = not (button["x"] >= text["x"] + text["width"] or button["x"] + button["width"] <= text["x"]
                        or button["y"] >= text["y"] + text["height"] or button["y"] + button["height"] <= text["y"])
        assert not overlaps, (button, text)
        page.reload()
        page.wait_for_selector("article.msg.assistant details.tool")
    t.shot("failed-tool")
    page.locator("article.msg.user").last.get_by_role("button", name="Edit").click()
    save = page.get_by_role("button", name="Save & send")
    assert save.bounding_box()["width"] < 160, save.bounding_box()
    t.no_horizontal_overflow()
    t.shot("edit-box")
    assert not t.errors, t.errors


@pytest.fixture(scope="module")
def banner_budget(platform):
    """A monthly token budget of the demo workspace whose soft limit (10) the first answer
    passes; made once for both widths (a manage.py call costs seconds), removed at the end."""
    platform.manage("shell", "-c", (
        "from decimal import Decimal\n"
        "from chat.models import Workspace\n"
        "from usage.models import Budget\n"
        "Budget.objects.get_or_create(name='e2e-banner', defaults=dict(workspace=Workspace.objects.get(slug='demo'),"
        " metric='tokens', period='month', soft_limit=Decimal('10'), hard_limit=Decimal('200000')))\n"))
    yield
    platform.manage("shell", "-c", "from usage.models import Budget\nBudget.objects.filter(name='e2e-banner').delete()\n")


def test_the_budget_banner_is_one_line_in_the_servers_formats(tab_for, fake, banner_budget, width):
    from tests.fakes.openai_server import usage_chunk

    reset(fake, [*text_chunks("Counted."), usage_chunk(1200, 34)])
    t = tab_for()
    page = t.page
    thread = t.api("POST", "/api/v1/threads/", {"workspace": "demo", "title": "Budget"}).json()
    page.goto(f"/chat/{thread['id']}/")
    page.wait_for_selector("#conn.ok", state="attached")
    page.fill("#input", "Count my tokens")
    page.click("#send")
    t.wait_answered()
    banner = page.locator("#budget-banner")
    banner.wait_for()
    text = banner.inner_text()
    assert re.fullmatch(r"Budget warning: [\d,]+ tokens of 10 tokens this month — resets at "
                        r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\.", text), text
    assert ".000000" not in text and page.locator(".budget-banner:not([hidden])").count() == 1
    page.reload()  # read again on load: the same one line
    banner.wait_for()
    assert banner.inner_text() == text
    t.no_horizontal_overflow()
    t.shot("budget-banner")


# --- 9: the approval card names items by title and says each thing once ---------------------------
RULE = "Write: needs 1 approval from alice or a workspace admin"


def test_the_approval_card_names_the_item_and_says_each_thing_once(tab_for, fake, width):
    """The card names the knowledge item by its title, not its id, and says the arguments and
    the rule once each in the whole turn (tool row, card, status line) — live, after a reload,
    and once decided."""
    from tests.fakes.openai_server import tool_call_chunks
    from tests.policy.tooltest import call

    t = tab_for()
    page = t.page
    title = f"Deploy checklist {width}"
    item = t.api("POST", "/api/v1/knowledge/items/", {"workspace": "demo", "title": title, "content": "Step one.",
                                                      "type": "howto"}).json()
    reset(fake, tool_call_chunks([call("c1", "update_knowledge_item", {"item_id": item["id"], "tags": ["ops"]})]),
          text_chunks("Tagged it."))
    thread = t.api("POST", "/api/v1/threads/", {"workspace": "demo", "title": "Approval card"}).json()
    page.goto(f"/chat/{thread['id']}/")
    page.wait_for_selector("#conn.ok", state="attached")
    # A question long enough to fill a phone's screen: the card arrives below the fold.
    page.fill("#input", "Tag the deploy checklist with ops\n\n" + "\n".join(f"Context line {n}." for n in range(30)))
    page.click("#send")
    card = page.locator(".card.approval")
    turn = page.locator("article.msg.assistant").last
    args = f"item='{title}', tags=[\"ops\"]"
    for moment in ("live", "reloaded"):
        card.locator("button.approve").wait_for(timeout=RUN_MS)
        text = turn.inner_text()
        assert item["id"] not in text, (moment, text)
        assert card.locator(".approval-args").inner_text() == args, moment
        assert text.count(args) == 1, (moment, text)
        assert text.count(RULE) == 1, (moment, text)
        assert text.count("waiting for approval") == 1, (moment, text)  # the row's status; the card says why
        assert page.evaluate("""() => {  // its buttons in view, not under the composer
          const b = document.querySelector('.card.approval button.approve').getBoundingClientRect();
          const box = document.getElementById('messages').getBoundingClientRect();
          return b.top >= box.top && b.bottom <= box.bottom; }"""), moment
        t.no_horizontal_overflow()
        t.shot(f"approval-card-{moment}")
        page.reload()
        page.wait_for_selector("#conn.ok", state="attached")
        turn = page.locator("article.msg.assistant").last
    card.locator("button.approve").click()
    page.locator("article.msg.assistant .body", has_text="Tagged it.").wait_for(timeout=RUN_MS)
    t.wait_answered()
    text = turn.inner_text()
    assert text.count(args) == 1 and RULE not in text and item["id"] not in text, text
    assert card.locator(".approval-note").inner_text() == "Approved by alice"
    t.shot("approval-card-decided")
    assert not t.errors, t.errors


# --- 10: a send refused by a spent budget says so once -----------------------------------------------
@pytest.fixture(scope="module")
def spent_budget(platform):
    """bob's own monthly token budget, used up (a usage record over its hard limit); made once
    for both widths, removed at the end."""
    platform.manage("shell", "-c", (
        "from decimal import Decimal\n"
        "from django.contrib.auth import get_user_model\n"
        "from django.utils import timezone\n"
        "from chat.models import Workspace\n"
        "from usage.models import Budget, UsageRecord\n"
        "bob = get_user_model().objects.get(username='bob')\n"
        "Budget.objects.get_or_create(name='e2e-spent', defaults=dict(user=bob, metric='tokens', period='month',"
        " hard_limit=Decimal('100')))\n"
        "UsageRecord.objects.create(user=bob, workspace=Workspace.objects.get(slug='demo'), provider='openai',"
        " model='fake-model', input_tokens=150, output_tokens=0, created_at=timezone.now())\n"))
    yield
    platform.manage("shell", "-c", "from usage.models import Budget\nBudget.objects.filter(name='e2e-spent').delete()\n")


def test_a_send_refused_by_a_spent_budget_says_so_once(tab_for, fake, spent_budget, width):
    """A send refused because the budget is spent says so once — in the budget banner, in the
    refusal's words, on a chat; in the composer's note on the landing page (no banner there) —
    never also on the connection label or in a second note; the text stays, nothing is asked."""
    reset(fake)
    asked = len(fake.requests)
    t = tab_for("bob")
    page = t.page
    refusal = re.compile(r"The budget is used up: 150 of 100 tokens per month \(UTC\)\. It resets at "
                         r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\.")
    # The landing page: the one message is the composer's note; no empty chat is left.
    page.fill("#input", "First question")
    page.press("#input", "Enter")
    note = page.locator("#composer-counter")
    note.wait_for()
    assert refusal.fullmatch(note.inner_text()), note.inner_text()
    assert page.locator("body").inner_text().count("used up") == 1
    assert page.input_value("#input") == "First question" and re.search(r"/chat/$", page.url)
    t.no_horizontal_overflow()
    t.shot("budget-refused-landing")
    assert [x for x in t.api("GET", "/api/v1/threads/").json()["results"] if x["title"] == "First question"] == []
    # A chat: the banner says it (it said "used up" on load already), in the refusal's words.
    thread = t.api("POST", "/api/v1/threads/", {"workspace": "demo", "title": "Spent"}).json()
    page.goto(f"/chat/{thread['id']}/")
    page.wait_for_selector("#conn.ok", state="attached")
    banner = page.locator("#budget-banner")
    banner.wait_for()
    page.fill("#input", "One more question")
    page.click("#send")
    page.wait_for_function("() => document.getElementById('budget-banner').textContent.startsWith('The budget')")
    assert refusal.fullmatch(banner.inner_text()), banner.inner_text()
    assert page.locator("body").inner_text().count("used up") == 1, page.locator("body").inner_text()
    assert page.locator("#conn").inner_text() == "connected"
    assert note.is_hidden()
    assert page.input_value("#input") == "One more question" and page.locator("#send").is_enabled()
    assert page.locator("article.msg.user").count() == 0 and len(fake.requests) == asked
    t.no_horizontal_overflow()
    t.shot("budget-refused")
    assert not t.errors, t.errors


# --- issue 55: a temporary chat ------------------------------------------------------------
def open_drawer(page) -> None:
    """A phone's rail is a drawer: open it and wait until it has slid in."""
    page.click("#rail-toggle")
    page.wait_for_function("() => document.getElementById('rail').getBoundingClientRect().left >= 0")


def test_a_temporary_chat_is_marked_not_in_the_rail_and_gone_when_left(tab_for, fake, width):
    """The landing composer's "Temporary chat" switch (reached and ticked by keyboard) makes the
    chat temporary: its page says "Temporary chat — not saved", the rail (and its search) leaves
    it out, its model is not asked for a title, its export works; leaving the page deletes it."""
    reset(fake, text_chunks("Nothing of this is kept."))
    asked = len(fake.requests)
    t = tab_for()
    page = t.page
    question = f"A passing question {width}"
    kept = t.api("POST", "/api/v1/threads/", {"workspace": "demo", "title": f"Kept chat {width}"}).json()
    page.reload()
    page.focus("#send-private")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "send-temporary"
    page.keyboard.press("Space")
    assert page.is_checked("#send-temporary")
    assert page.locator("#temporary-note").inner_text().startswith("Temporary chat — not saved")
    t.no_horizontal_overflow()
    t.shot("temporary-landing")
    page.fill("#input", question)
    page.press("#input", "Enter")
    page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"), timeout=RUN_MS)
    t.wait_answered()
    thread_id = thread_id_of(page)
    assert "Nothing of this is kept." in page.locator("article.msg.assistant").last.inner_text()
    banner = page.locator("#temporary-banner")
    assert banner.is_visible() and banner.inner_text().startswith("Temporary chat — not saved.")
    assert page.locator(".temporary-badge").is_visible()
    assert t.api("GET", f"/api/v1/threads/{thread_id}/").json()["temporary"] is True
    assert len(fake.requests) == asked + 1  # the answer; no title request
    # Not in the rail, not found by its search; the rail's other chats are still there.
    if width < 1024:
        open_drawer(page)
    assert page.locator(f'#thread-list .thread-item[data-thread-id="{thread_id}"]').count() == 0
    assert page.locator(f'#thread-list .thread-item[data-thread-id="{kept["id"]}"]').count() == 1
    t.shot("temporary-rail")
    page.fill("#chat-search", "passing question")
    page.wait_for_selector("#thread-list-empty:not([hidden])")
    assert page.locator(f'#thread-list .thread-item[data-thread-id="{thread_id}"]').count() == 0
    page.fill("#chat-search", "")
    page.locator(f'#thread-list .thread-item[data-thread-id="{kept["id"]}"]').wait_for()
    if width < 1024:
        page.click("#rail-scrim", position={"x": width - 10, "y": 400})
        page.wait_for_function("() => document.getElementById('rail').getBoundingClientRect().right <= 0")
    t.header_fits()
    t.no_horizontal_overflow()
    t.shot("temporary-chat")
    with page.expect_download() as download:
        page.click("#temporary-banner a")
    assert question in Path(download.value.path()).read_text()
    # Leaving the page closes it: deleted (the DELETE goes as the page unloads).
    if width < 1024:
        open_drawer(page)
    page.click("#new-chat")
    page.wait_for_url(re.compile(r"/chat/$"))
    page.wait_for_function(
        "async (url) => (await fetch(url, {credentials: 'same-origin'})).status === 404",
        arg=f"/api/v1/threads/{thread_id}/", polling=100)
    assert not t.errors, t.errors
