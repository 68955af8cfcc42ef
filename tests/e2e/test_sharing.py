"""Share links in a real browser (issue 55), at 1280 and 390 px, on one embedded platform:
alice shares a chat from its Share dialog; the link opens in a fresh browser context signed in
as bob (same workspace) — the messages are there and "Continue this chat" opens bob's own
copy —, is refused (404) to dave, the demo's member of another workspace, and to a
signed-out visitor; alice revokes it in the dialog and bob's next visit is a 410."""

from __future__ import annotations

import re

import pytest

from . import flows
from .test_browser import ARTIFACTS, STEP_MS

pytestmark = pytest.mark.browser

@pytest.fixture(scope="module")
def platform(embedded_platform):
    return embedded_platform


@pytest.fixture(scope="module")
def shared_chat(platform):
    """alice's chat with one answered question (the offline model searches the knowledge base
    and cites it), made over REST."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token)
    flows.rest_turn(platform, token, thread_id)
    return thread_id


def watched(context, errors: list[str]):
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and "404" not in msg.text
            and "410" not in msg.text else None)  # CSP violations too; the refusals' own status is expected
    return page


@pytest.mark.parametrize("width", [1280, 390])
def test_a_shared_chat_opens_for_a_member_and_is_refused_to_outsiders(browser, platform, shared_chat, width):
    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    contexts = []

    def context_for(username: str | None):
        context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
        context.set_default_timeout(STEP_MS)
        contexts.append(context)
        if username:  # signed in through the real login form, without loading the chat page first
            client = flows.login_session(platform, username)
            context.add_cookies([{"name": name, "value": value, "url": platform.base_url}
                                 for name, value in client.cookies.items()])
            client.close()
        return watched(context, errors)

    def shot(page, step: str) -> None:
        page.screenshot(path=str(ARTIFACTS / f"sharing-{width}-{step}.png"), full_page=False)

    try:
        alice = context_for("alice")
        alice.goto(f"/chat/{shared_chat}/")
        alice.click("#share-button")
        dialog = alice.locator("#share-dialog")
        dialog.wait_for(state="visible")
        alice.wait_for_selector("#share-create")
        assert not alice.is_visible("#share-link")  # no empty link box and Copy before a link is made
        assert alice.is_checked("#share-visibility-workspace")
        assert alice.is_disabled("#share-visibility-public")  # the workspace has not allowed public links
        alice.click("#share-create")
        alice.wait_for_function("() => document.getElementById('share-link').value.includes('/s/')")
        link = alice.input_value("#share-link")
        assert re.fullmatch(re.escape(platform.base_url) + r"/s/[A-Za-z0-9_-]{32}/", link), link
        assert alice.locator("#share-list li").count() >= 1
        shot(alice, "dialog")
        alice.keyboard.press("Escape")
        dialog.wait_for(state="detached")

        bob = context_for("bob")  # a fresh context: nothing of alice's session
        response = bob.goto(link)
        assert response.status == 200
        assert response.headers["x-robots-tag"] == "noindex, nofollow"
        bob.wait_for_selector("#share-messages .msg.user")
        assert flows.QUESTION in bob.inner_text("#share-messages")
        assert bob.locator("#share-messages .msg.assistant .body").count() >= 1
        assert "search_knowledge" in bob.inner_text("#share-messages")  # the tool's name, never its input
        shot(bob, "member")
        bob.click("#share-continue")
        bob.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
        assert shared_chat not in bob.url  # bob's own new chat
        bob.wait_for_selector("#messages .msg.user")
        assert flows.QUESTION in bob.inner_text("#messages")
        assert bob.is_visible("#input")  # he can write in it
        shot(bob, "continued")

        dave = context_for("dave")  # another workspace's member
        refused = dave.goto(link)
        assert refused.status == 404
        dave.wait_for_selector("#share-not-found")
        assert flows.QUESTION not in dave.content()
        shot(dave, "outsider")

        anonymous = context_for(None)
        refused = anonymous.goto(link)
        assert refused.status == 404
        anonymous.wait_for_selector("#share-sign-in")
        assert flows.QUESTION not in anonymous.content()
        shot(anonymous, "signed-out")

        alice.click("#share-button")
        alice.wait_for_selector("#share-list li .share-revoke")
        alice.locator("#share-list li .share-revoke").first.click()
        alice.locator("dialog.app-dialog button[value=ok]").click()
        alice.wait_for_function("() => document.getElementById('share-status').textContent.length > 0")
        gone = bob.goto(link)
        assert gone.status == 410
        bob.wait_for_selector("#share-gone")
        shot(bob, "revoked")
        assert not errors, errors
    finally:
        for context in contexts:
            context.close()
