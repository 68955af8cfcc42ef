"""An OAuth MCP server in a real browser (Chromium at 1280 and 390 px) against the running
embedded platform: the model calls a tool of a server the person has not connected, the run
parks on the "Connect Files to continue" card, the card's link goes through the real consent
redirect of a real authorization server (``tests.mcp.oauth_server``, on loopback in a process
of its own, consenting at once), the callback lands back in the chat and the run goes on by itself
— the tool runs with the person's own token and the model answers, without being asked again.
Then Settings → Connected services shows the connection and disconnects it (revoked upstream).
The server's tools were listed with the admin's own connection (``?listing=1``).
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.mcp.oauth_server import OAuthPeerProcess
from tests.policy.tooltest import call

from . import flows
from .harness import started_with_fake_model
from .test_browser import ARTIFACTS, STEP_MS

RUN_MS = 60_000
HEIGHTS = {1280: 900, 390: 844}
USERS = {1280: "alice", 390: "bob"}


@pytest.fixture(scope="module")
def peer():
    server = OAuthPeerProcess().start()  # its own process: shares nothing with this one but the network
    yield server
    server.stop()


@pytest.fixture(scope="module")
def platform(upstream, peer):
    for platform in started_with_fake_model("embedded", upstream):
        platform.manage("shell", "-c", (
            "from mcp_client.models import MCPServer\n"
            f"MCPServer.objects.create(slug='files', name='Files', transport='streamable_http', url='{peer.url}', "
            "auth='oauth', enabled=True, allowlist=['whoami'])\n"))
        admin = flows.login_session(platform, "admin")  # the admin's account lists the tools
        try:
            start = admin.get("/mcp-oauth/files/connect/", params={"listing": "1"})
            assert start.status_code == 302, start.text[:300]
            back = httpx.get(start.headers["location"], follow_redirects=False, trust_env=False)
            assert admin.get(back.headers["location"]).status_code == 302
        finally:
            admin.close()
        listed = platform.manage("mcp_refresh", "files")
        assert "whoami" in listed.stdout, listed.stdout
        yield platform


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_connect_card_through_the_consent_redirect_resumes_the_run(browser, platform, upstream, peer, width):
    user = USERS[width]
    context = browser.new_context(viewport={"width": width, "height": HEIGHTS[width]}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"mcp-oauth-{width}-{step}.png"), full_page=True)  # noqa: E731
    try:
        flows.sign_in_page(page, platform, user)
        csrf = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
        made = page.request.fetch("/api/v1/threads/", method="POST", data=json.dumps(
            {"workspace": "demo", "provider": "openai", "title": "Files"}),
            headers={"Content-Type": "application/json", "X-CSRFToken": csrf})
        assert made.status == 201, made.text()
        thread_id = made.json()["id"]
        page.goto(f"/chat/{thread_id}/")
        page.wait_for_selector("#conn.ok", state="attached")

        upstream.script(tool_call_chunks([call("c1", "whoami", {})]), text_chunks(f"You are {user} at Files."))
        page.fill("#input", "Who am I at Files?")
        page.click("#send")
        card = page.locator(".card.approval.connect")
        card.wait_for(timeout=RUN_MS)
        assert card.locator(".approval-head strong").inner_text() == "Connect Files to continue"
        link = card.locator("a.connect-link")
        assert link.inner_text() == "Connect Files"
        assert re.fullmatch(r"/mcp-oauth/files/connect/\?tool_call=[0-9a-f-]{36}&next=%2Fchat%2F[0-9a-f-]+%2F",
                            link.get_attribute("href")), link.get_attribute("href")
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        assert link.bounding_box()["x"] + link.bounding_box()["width"] <= width
        shot("card")

        link.click()  # → the authorization server (consents at once) → the callback → back to this chat
        page.wait_for_url(re.compile(rf"/chat/{thread_id}/$"), timeout=RUN_MS)
        page.locator("article.msg.assistant", has_text=f"You are {user} at Files.").wait_for(timeout=RUN_MS)
        page.wait_for_function("() => !document.querySelector('.body.streaming')", timeout=RUN_MS)
        row = page.locator("details.tool", has_text="whoami")
        assert row.get_attribute("data-status") == "succeeded"
        assert not page.locator("a.connect-link").count()
        shot("resumed")

        # Settings → Connected services: connected; Disconnect revokes it at the server.
        page.goto("/chat/settings/")
        row = page.locator("#mcp-connection-list tr[data-server=files]")
        row.wait_for()
        assert "connected" in row.inner_text()
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot("settings")
        revoked = peer.state()["revoked"]
        row.get_by_role("button", name="Disconnect Files").click()
        page.locator("dialog.app-dialog[open] button[value=ok]").click()
        row.locator("a.connect-link").wait_for()
        assert "not connected" in row.inner_text()
        assert peer.state()["revoked"] == revoked + 2  # refresh and access token revoked upstream
        shot("disconnected")
        with flows.http(platform, flows.login_token(platform, user)) as client:
            mine = client.get("/api/v1/mcp/connections/").json()
        assert [(c["server"], c["status"]) for c in mine] == [("files", "not_connected")]
        assert not errors, errors
    except Exception:
        shot("failed")  # what the page showed when it failed
        raise
    finally:
        context.close()
