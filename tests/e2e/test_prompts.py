"""The prompt library in Chromium at 1280 and 390 px, against one embedded platform (seeded
with the demo's workspace prompts): make a personal prompt with variables on the Prompts page,
find it with the page's search, then in a composer — the landing page's at 1280, a thread's at
390 — type "/", filter, pick with the keyboard, fill a variable and see the filled text in
the box, not sent; and "Use" on the page opens a seeded prompt in a new chat's composer.
Markup in the prompt stays text all the way."""

from __future__ import annotations

import pytest

from . import flows
from .test_browser import ARTIFACTS, STEP_MS

MARKUP = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def platform(embedded_platform):
    return embedded_platform


@pytest.mark.browser
@pytest.mark.parametrize(("width", "composer", "user"), [(1280, "landing", "alice"), (390, "thread", "bob")])
def test_make_a_prompt_then_insert_it_with_slash_and_fill_its_variable(browser, platform, width, composer, user):
    context = browser.new_context(viewport={"width": width, "height": 860}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)  # CSP violations too
    page.on("dialog", lambda d: errors.append("a dialog opened: " + d.message))  # an alert() would be injected markup
    ARTIFACTS.mkdir(exist_ok=True)
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"prompts-{width}-{step}.png"))  # noqa: E731
    command = f"greet-{width}"
    no_overflow = "() => document.documentElement.scrollWidth <= window.innerWidth"
    try:
        flows.sign_in_page(page, platform, user)  # two members: each sees only their own personal prompt
        # --- the Prompts page: the seeded workspace prompts are listed; make a personal one
        page.goto("/prompts/")  # (on a phone the chat page's navigation is in the drawer)
        page.locator(".pl-item[data-command=summarize]").wait_for()
        shot("list")
        page.click("#pl-new")
        page.fill("#id_command", "/" + command.upper())
        page.fill("#id_title", f"Greet someone {MARKUP}")
        page.fill("#id_body", "Say hello to {{name}} in a {{tone|cheerful}} way. " + MARKUP)
        assert page.locator("#id_workspace").input_value() == ""  # personal unless shared
        shot("form")
        page.click("#pl-save")
        item = page.locator(f".pl-item[data-command='{command}']")
        item.wait_for()
        assert "/" + command in item.inner_text() and MARKUP in item.inner_text()  # shown as text
        assert "name" in item.locator(".pl-vars").inner_text() and "cheerful" in item.locator(".pl-vars").inner_text()
        page.fill("#pl-filters input[name=q]", command)
        page.keyboard.press("Enter")
        page.wait_for_url(f"**/prompts/?q={command}*")
        assert page.locator(".pl-item").count() == 1
        assert page.evaluate(no_overflow)
        shot("page")

        # --- a composer: "/" opens the list, typing filters, ↑ wraps to the last match
        if composer == "thread":
            thread_id = flows.create_thread(platform, flows.login_token(platform, user))
            page.goto(f"/chat/{thread_id}/")
        else:
            page.click("#nav-chats")
        box = page.locator("#input")
        box.click()
        page.keyboard.type("/")
        menu = page.locator("#prompt-menu")
        menu.wait_for(state="visible")
        page.locator("#prompt-list [data-command=summarize]").wait_for()
        assert page.locator(f"#prompt-list [data-command='{command}']").count() == 1
        page.keyboard.type("re")  # prefix matches first (reply, review), then contains (greet-…)
        page.wait_for_function("() => !document.querySelector('#prompt-list [data-command=summarize]')")
        assert page.locator("#prompt-list [role=option]").evaluate_all("os => os.map(o => o.dataset.command)") == \
            ["reply", "review", command]
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowDown")
        selected = page.locator("#prompt-list [aria-selected=true]")
        assert selected.get_attribute("data-command") == command
        assert box.get_attribute("aria-activedescendant") == selected.get_attribute("id")
        assert page.evaluate(no_overflow)
        shot("menu")

        # --- Enter picks; a field per variable, the default filled in; Tab moves; Enter inserts
        page.keyboard.press("Enter")
        fill = page.locator("#prompt-fill")
        fill.wait_for()
        assert menu.is_hidden()
        first = page.locator("#prompt-fill input").nth(0)
        assert first.evaluate("e => e === document.activeElement") and first.get_attribute("data-name") == "name"
        page.keyboard.press("Enter")  # the name has no default: not inserted yet, and said why
        assert first.get_attribute("aria-invalid") == "true" and fill.is_visible()
        page.keyboard.type("Ann <b>")
        assert first.get_attribute("aria-invalid") is None  # filled in: no longer marked
        page.keyboard.press("Tab")
        tone = page.locator("#prompt-fill input").nth(1)
        assert tone.evaluate("e => e === document.activeElement") and tone.input_value() == "cheerful"
        assert "Say hello to Ann <b> in a cheerful way." in page.locator(".prompt-preview").inner_text()
        assert page.evaluate(no_overflow)
        shot("fill")
        page.keyboard.press("Enter")
        fill.wait_for(state="detached")
        expected = "Say hello to Ann <b> in a cheerful way. " + MARKUP
        assert box.input_value() == expected
        assert box.evaluate("e => e === document.activeElement")
        # inserted, not sent: still on the same page with the text in the box, no message posted
        assert page.locator("#messages .msg.user").count() == 0 if composer == "thread" else "/chat/" in page.url
        assert page.locator("#send").is_enabled()
        shot("inserted")

        # --- Escape closes the menu and keeps what was typed; "/word" without a match is just text
        box.fill("")
        page.keyboard.type("/nothing-like-this")
        page.locator(".prompt-status", has_text="No prompt matches").wait_for()
        page.keyboard.press("Escape")
        menu.wait_for(state="hidden")
        assert box.input_value() == "/nothing-like-this"

        # --- "Use" on the Prompts page opens a prompt in a new chat's composer, defaults filled in
        page.goto("/prompts/")
        page.get_by_role("link", name="Use /summarize in a new chat").click()
        page.locator("#prompt-fill").wait_for()
        assert page.url.endswith("/chat/")  # the link's ?prompt= is spent: a reload does not reopen it
        assert [f.input_value() for f in page.locator("#prompt-fill input").all()] == \
            ["5 bullet points", "a busy colleague"]
        page.keyboard.press("Enter")
        page.locator("#prompt-fill").wait_for(state="detached")
        assert page.locator("#input").input_value().startswith("Summarize the text below in 5 bullet points for "
                                                              "a busy colleague.")
        assert not errors, errors
    finally:
        context.close()
