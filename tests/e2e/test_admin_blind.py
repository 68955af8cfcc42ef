"""Admin-blind chats and break-glass (issue 57) in Chromium at 1280 and 390 px, against the
embedded platform (seed_demo: the demo workspace admin-blind, with a second admin, ``erin``):

alice's chat holds a word no one else wrote. ``admin`` is refused its content on the chat page,
in the REST API and in the Django admin (a search for the word finds nothing), asks for
break-glass with a reason; ``admin`` cannot approve it, ``erin`` does on /chat/break-glass/;
``admin`` then reads the chat under a banner, and alice's page tells her who read it and why.
"""

from __future__ import annotations

import uuid

import pytest

from . import flows
from .test_browser import ARTIFACTS, STEP_MS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def platform(embedded_platform):
    """The embedded platform as the demo seeds it: ``admin`` and ``erin`` admins of demo."""
    return embedded_platform


def alices_chat(platform, secret: str) -> str:
    """A chat of alice's with ``secret`` in her message (sent, answered by the offline model)."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token)
    with flows.http(platform, token) as client:
        run = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": f"Summarise {secret} for me"})
        assert run.status_code == 202, run.text
        run_id = run.json()["run_id"]
        flows.wait_for(lambda: client.get(f"/api/v1/runs/{run_id}/").json()["status"] in ("completed", "failed"),
                       "the run to end", timeout=60)
    return thread_id


def signed_in(browser, platform, username: str, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # Console errors (CSP violations too), but the blinded page's own 403 status, which is the point.
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and not msg.text.startswith(
        "Failed to load resource: the server responded with a status of 403") else None)
    flows.sign_in_page(page, platform, username)
    return context, page, errors


def fits(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.parametrize("width", [1280, 390])
def test_an_admin_is_refused_requests_break_glass_a_second_admin_approves_and_the_owner_is_told(
        browser, platform, width):
    secret = f"quokka{uuid.uuid4().hex[:8]}"
    thread_id = alices_chat(platform, secret)
    ARTIFACTS.mkdir(exist_ok=True)
    contexts = []
    try:
        ctx, admin, admin_errors = signed_in(browser, platform, "admin", width)
        contexts.append(ctx)
        shot = lambda page, step: page.screenshot(  # noqa: E731
            path=str(ARTIFACTS / f"admin-blind-{width}-{step}.png"), full_page=True)

        # Refused: the chat page, the API, the Django admin (list and search).
        admin.goto(f"/chat/{thread_id}/")
        admin.locator("#blinded-note").wait_for()
        assert secret not in admin.content() and admin.locator("#blinded-owner").inner_text() == "alice"
        api = admin.request.get(f"/api/v1/threads/{thread_id}/messages/")
        assert api.status == 403 and api.json()["error"]["code"] == "thread_blinded"
        assert admin.request.get(f"/api/v1/threads/{thread_id}/").json()["blinded"] is True
        admin.goto(f"/admin/chat/message/?q={secret}")
        assert "0 results" in admin.locator("#changelist").inner_text()
        admin.goto("/admin/chat/message/")
        assert secret not in admin.content()

        # Request break-glass from the chat's page.
        admin.goto(f"/chat/{thread_id}/")
        assert fits(admin)
        shot(admin, "refused")
        admin.fill("#break-glass-reason", f"Incident SEC-{width}: suspected credential leak")
        admin.click("#break-glass-form button[type=submit]")
        admin.locator("#break-glass-state").wait_for()
        # The requester cannot approve it.
        admin.goto("/chat/break-glass/")
        item = admin.locator(".break-glass-item", has_text=f"SEC-{width}")
        assert item.locator("button.approve").count() == 0
        assert "cannot approve your own request" in item.inner_text()

        # A second admin approves it.
        ctx2, erin, erin_errors = signed_in(browser, platform, "erin", width)
        contexts.append(ctx2)
        erin.goto("/chat/break-glass/")
        item = erin.locator(".break-glass-item", has_text=f"SEC-{width}")
        assert fits(erin)
        shot(erin, "approve")
        item.locator("input[name=note]").fill("ok, 1 h")
        item.locator("button.approve").click()
        erin.wait_for_url("**/chat/break-glass/?done=approve")
        assert "approved by erin" in erin.locator(".break-glass-item", has_text=f"SEC-{width}").inner_text()

        # The first admin reads it, read-only, under a banner.
        admin.goto(f"/chat/{thread_id}/")
        admin.locator("#break-glass-banner").wait_for()
        admin.locator("#messages article.msg.user", has_text=secret).wait_for()
        assert admin.locator("#composer").count() == 0
        assert fits(admin)
        shot(admin, "reading")

        # The owner sees that it happened, who approved it, and why.
        ctx3, alice, alice_errors = signed_in(browser, platform, "alice", width)
        contexts.append(ctx3)
        alice.goto(f"/chat/{thread_id}/")
        notice = alice.locator(".break-glass-notice")
        notice.wait_for()
        text = notice.inner_text()
        assert "admin" in text and "erin" in text and f"SEC-{width}" in text
        assert fits(alice)
        shot(alice, "owner-notice")
        audit = alice.request.get(f"/api/v1/threads/{thread_id}/break-glass/").json()
        reads = [(r["user"], r["what"]) for r in audit[0]["reads"]]
        grant = {k: audit[0][k] for k in ("requested_by", "reason", "decided_by", "decided_at", "access_until")}
        print(f"\nbreak-glass at {width} px: {grant}; reads: {[(r['user'], r['what'], r['at']) for r in audit[0]['reads']]}")
        assert ("admin", "page") in reads and ("admin", "messages") in reads
        assert not admin_errors and not erin_errors and not alice_errors, (admin_errors, erin_errors,
                                                                              alice_errors)
    finally:
        for c in contexts:
            c.close()
