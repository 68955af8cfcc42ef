"""An MCP server asks the person mid-call, in a real browser (Chromium at 1280 and 390 px)
against the running embedded platform: the model calls ``book_table`` of a real MCP server
(``tests.mcp.http_server ask``, its own process on loopback), the server elicits, the chat shows
the card (the server's message as text, a form from its schema), a reload draws the waiting
card again, the person fills it in and accepts, the values reach the server and the run
completes; the next tool's resource link opens through ``/mcp-resources/`` as plain text. In
the embedded platform and with services (PostgreSQL, Redis, a separate Celery worker).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call

from . import flows
from .harness import free_port, started_with_fake_model, tcp_reachable
from .test_browser import ARTIFACTS, STEP_MS

ROOT = Path(__file__).resolve().parents[2]
RUN_MS = 60_000
HEIGHTS = {1280: 900, 390: 844}
USERS = {1280: "alice", 390: "bob"}


class AskServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.mcp.http_server", "ask", str(self.port)], cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not tcp_reachable("127.0.0.1", self.port, timeout=0.2):
            assert self.proc.poll() is None and time.monotonic() < deadline, "the ask server did not start"
            time.sleep(0.05)

    def log(self) -> list[dict]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/control/log", timeout=5) as response:
            return [e for e in json.loads(response.read()) if "tool" in e]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # an SSE stream still open: uvicorn waits for it
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture(scope="module")
def ask():
    server = AskServer()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["embedded", "services"])
def platform(request, upstream, ask):
    """``services``: the web process and the Celery worker are separate processes — the answer
    posted to the web process reaches the call waiting on the worker through the database."""
    for platform in started_with_fake_model(request.param, upstream):
        platform.manage("shell", "-c", (
            "from mcp_client.models import MCPServer\n"
            f"MCPServer.objects.create(slug='ask', name='Ask', transport='streamable_http', url='{ask.url}', "
            "enabled=True, allowlist=['book_table', 'linker'])\n"))
        listed = platform.manage("mcp_refresh", "ask")
        assert "book_table" in listed.stdout, listed.stdout
        yield platform


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_servers_question_is_a_card_the_person_answers(browser, platform, upstream, ask, width):
    user = USERS[width]
    context = browser.new_context(viewport={"width": width, "height": HEIGHTS[width]}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    ARTIFACTS.mkdir(exist_ok=True)
    mode = platform.mode
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"mcp-elicit-{mode}-{width}-{step}.png"),  # noqa: E731
                                        full_page=True)
    try:
        flows.sign_in_page(page, platform, user)
        csrf = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
        made = page.request.fetch("/api/v1/threads/", method="POST", data=json.dumps(
            {"workspace": "demo", "provider": "openai", "title": "Dinner"}),
            headers={"Content-Type": "application/json", "X-CSRFToken": csrf})
        assert made.status == 201, made.text()
        thread_id = made.json()["id"]
        page.goto(f"/chat/{thread_id}/")
        page.wait_for_selector("#conn.ok", state="attached")
        before = len(ask.log())

        upstream.script(tool_call_chunks([call("c1", "book_table", {})]), tool_call_chunks([call("c2", "linker", {})]),
                        text_chunks(f"Booked for {user}."))
        page.fill("#input", "Book us a table")
        page.click("#send")
        card = page.locator(".card.elicitation")
        card.wait_for(timeout=RUN_MS)
        assert card.locator(".approval-head strong").inner_text() == "Ask asks"
        # the server's message is its own text: shown as written, never as HTML
        assert card.locator(".elicitation-message").inner_text() == "<b>Booking</b> at Chez Test: who is coming?"
        assert card.locator(".elicitation-message b").count() == 0
        assert card.locator("select[name=seating]").input_value() == "inside"  # the schema's default
        assert card.locator("input[name=size]").get_attribute("max") == "12"
        shot("card")

        page.reload()  # the run still waits: the card is drawn again
        card = page.locator(".card.elicitation")
        card.wait_for(timeout=RUN_MS)
        card.locator("input[name=name]").fill(f"{user} & friends")
        card.locator("input[name=size]").fill("5")
        card.locator("select[name=seating]").select_option("terrace")
        card.locator("input[name=newsletter]").check()
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        accept = card.get_by_role("button", name="Accept")
        assert accept.bounding_box()["x"] + accept.bounding_box()["width"] <= width
        shot("filled")
        accept.click()

        page.locator("article.msg.assistant", has_text=f"Booked for {user}.").wait_for(timeout=RUN_MS)
        page.wait_for_function("() => !document.querySelector('.body.streaming')", timeout=RUN_MS)
        assert ask.log()[before:before + 1] == [{"tool": "book_table", "arguments": {
            "action": "accept", "name": f"{user} & friends", "size": 5, "seating": "terrace", "newsletter": True}}]
        assert page.locator("details.tool", has_text="book_table").get_attribute("data-status") == "succeeded"
        assert card.locator(".approval-note").inner_text() == "Answered — the call goes on"
        link = page.locator("a.resource-link", has_text="Today's notes")
        href = link.get_attribute("href")
        assert href.startswith("/mcp-resources/") and "uri=notes%3A%2F%2Ftoday" in href
        opened = page.request.get(href)
        assert opened.status == 200 and opened.headers["content-type"] == "text/plain; charset=utf-8"
        assert opened.headers["x-content-type-options"] == "nosniff"
        assert opened.text() == "<script>alert('x')</script> Buy milk."
        shot("answered")
        assert not errors, errors
    except Exception:
        shot("failed")  # what the page showed when it failed
        raise
    finally:
        context.close()
