"""Artifact previews in Chromium at 1280 and 390 px (one embedded platform; the fake upstream as
its ``openai`` provider writes the answer): an answer with an HTML, an SVG and a Mermaid block.

* HTML: the preview runs the artifact's script in the sandboxed frame, and everything it tries
  against the page or the platform fails — ``top.location``, ``fetch('/api/v1/threads/')``,
  cookies, ``localStorage``, ``window.open``, a form posting to the platform, and messages to the
  parent (a second "ready", a forged "render"): the page stays where it was and never answers;
* SVG: the image is drawn in the frame; Mermaid: the real Mermaid draws the diagram as SVG;
* the panel's Copy puts the source on the clipboard, Download saves it as a file;
* a side panel beside the chat at 1280 px, a full-screen sheet at 390 px;
* a workspace admin turns previews off on the settings page: no Preview button.
"""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import started_with_fake_model
from .test_browser import ARTIFACTS, STEP_MS

HTML = """<!doctype html>
<html><body>
<h1 id="title">Hello from an artifact</h1>
<ul id="log"></ul>
<form id="steal" method="post" action="/api/v1/threads/"><input name="title" value="stolen"></form>
<script>
const log = (text) => { const li = document.createElement("li"); li.textContent = text; document.getElementById("log").append(li); };
let replies = 0;
window.addEventListener("message", () => { replies += 1; });
try { top.location.href = "/admin/"; log("top: no error"); } catch (e) { log("top: blocked"); }
try { log("cookie: " + JSON.stringify(document.cookie)); } catch (e) { log("cookie: blocked"); }
try { localStorage.setItem("k", "v"); log("storage: allowed"); } catch (e) { log("storage: blocked"); }
log("popup: " + (window.open("/admin/") ? "opened" : "blocked"));
try { document.getElementById("steal").submit(); } catch (e) { log("form: threw"); }
parent.postMessage({type: "artifact-ready"}, "*");
parent.postMessage({type: "artifact-render", kind: "html", source: "<p>forged</p>"}, "*");
parent.postMessage({type: "navigate", url: "/admin/"}, "*");
fetch("/api/v1/threads/", {credentials: "include"})
  .then(() => log("fetch: allowed"), () => log("fetch: blocked"))
  .then(() => setTimeout(() => log("replies: " + replies), 400));
</script>
</body></html>"""

SVG = """<svg xmlns="http://www.w3.org/2000/svg" width="160" height="90" viewBox="0 0 160 90">
<rect id="box" width="160" height="90" rx="12" fill="#3558d8"/>
<text x="80" y="52" text-anchor="middle" fill="#fff" font-size="18">SVG artifact</text>
</svg>"""

MERMAID = """graph TD
  Q[Question] --> M{Model}
  M --> A[Answer]
  M --> P[Preview]"""

ANSWER = (f"Here is a page:\n\n```html\n{HTML}\n```\n\nA badge:\n\n```svg\n{SVG}\n```\n\n"
          f"And the flow:\n\n```mermaid\n{MERMAID}\n```\n\nPlain code stays plain:\n\n```python\nprint('hi')\n```\n")


# How Chromium reports each thing the HTML artifact tries (console errors of the frame).
BLOCKED = ("'allow-top-navigation'", "'allow-popups'", "'allow-forms'", "\"connect-src 'none'\"",
           "Refused to connect")


@pytest.fixture(scope="module")
def platform(upstream):
    yield from started_with_fake_model("embedded", upstream, CHAT_TITLE_GENERATION="false")


@pytest.fixture(scope="module")
def thread_id(platform, upstream):
    """alice's chat whose one answer holds the three artifacts and a Python block."""
    token = flows.login_token(platform, "alice")
    thread = flows.create_thread(platform, token, provider="openai")
    upstream.script(text_chunks(ANSWER, pieces=12))
    with flows.http(platform, token) as client:
        run = client.post(f"/api/v1/threads/{thread}/runs/", json={"content": "Show me three artifacts."})
        assert run.status_code == 202, run.text
        run_id = run.json()["run_id"]
        flows.wait_for(lambda: client.get(f"/api/v1/runs/{run_id}/").json()["status"] == "completed", "the answer")
    return thread


def previews_set(platform, enabled: bool) -> None:
    """The demo workspace's switch, through its admin's ``PATCH /api/v1/workspaces/demo/``."""
    with flows.http(platform, flows.login_token(platform, "admin")) as client:
        r = client.patch("/api/v1/workspaces/demo/", json={"artifacts_enabled": enabled})
    assert r.status_code == 200 and r.json()["artifacts_enabled"] is enabled, r.text


def frame_of(page):
    """The preview frame's Playwright frame (the sandboxed document), once attached."""
    handle = page.wait_for_selector("#artifact-panel iframe.artifact-frame")
    assert handle.get_attribute("sandbox") == "allow-scripts"
    return handle.content_frame()


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_artifacts_preview_sandboxed_copy_download_and_the_workspace_switch(browser, platform, thread_id, width):
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url,
                                  accept_downloads=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # The chat page's own console errors; the frame's are the artifact's blocked attempts.
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    popups: list = []
    context.on("page", lambda p: popups.append(p))
    ARTIFACTS.mkdir(exist_ok=True)
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"artifacts-{width}-{step}.png"))  # noqa: E731
    thread_url = f"/chat/{thread_id}/"
    try:
        flows.sign_in_page(page, platform)
        page.goto(thread_url)
        blocks = page.locator("article.msg.assistant .code-block")
        blocks.nth(3).wait_for()
        assert blocks.count() == 4
        # Preview on the HTML, SVG and Mermaid blocks; the Python block only has Copy.
        assert [blocks.nth(i).locator(".preview-code").count() for i in range(4)] == [1, 1, 1, 0]
        assert all(blocks.nth(i).locator(".copy-code").count() == 1 for i in range(4))
        page.evaluate("() => { window.__sameDocument = true; }")

        # HTML: runs, and is refused everything.
        blocks.nth(0).locator(".preview-code").click()
        panel = page.locator("#artifact-panel")
        panel.wait_for(state="visible")
        frame = frame_of(page)
        frame.locator("#log li", has_text="replies:").wait_for()
        log = frame.locator("#log li").all_inner_texts()
        assert frame.locator("#title").inner_text() == "Hello from an artifact"
        assert {"top: blocked", "cookie: blocked", "storage: blocked", "popup: blocked", "fetch: blocked", "replies: 0"} <= set(log), log
        assert page.url.endswith(thread_url) and page.evaluate("() => window.__sameDocument === true")
        assert frame.locator("#steal").count() == 1  # the form did not navigate the frame away
        assert not popups
        assert page.locator("#artifact-title").inner_text() == "HTML preview"
        box, viewport = panel.bounding_box(), page.viewport_size
        if width == 1280:  # beside the chat: the messages stay visible on the left
            assert box["x"] > 600 and box["x"] + box["width"] <= viewport["width"] + 1
            assert page.locator("#messages").bounding_box()["width"] > 300
            # The narrowed chat's header wraps instead of cutting its title and status short.
            cut = page.evaluate("""() => ['#thread-title', '#conn'].filter((s) => {
                const e = document.querySelector(s); return e && e.scrollWidth > e.clientWidth + 1; })""")
            assert cut == [], cut
        else:  # a full-screen sheet
            assert (box["x"], box["y"], box["width"]) == (0, 0, viewport["width"])
            assert box["height"] >= viewport["height"] - 1
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot("html")

        # Copy and Download give back the source exactly.
        page.click("#artifact-panel .artifact-copy")
        page.wait_for_function("() => document.querySelector('#artifact-panel .artifact-copy').textContent === 'Copied'")
        assert page.evaluate("() => navigator.clipboard.readText()") == HTML + "\n"  # the block's text, as Copy
        with page.expect_download() as download:
            page.click("#artifact-panel .artifact-download")
        assert download.value.suggested_filename == "artifact.html"
        with open(download.value.path(), encoding="utf-8") as fh:
            assert fh.read() == HTML + "\n"

        # Escape closes the panel; focus goes back to the Preview button.
        page.keyboard.press("Escape")
        panel.wait_for(state="hidden")
        assert page.evaluate("() => document.activeElement.classList.contains('preview-code')")

        # SVG: drawn in a fresh frame.
        blocks.nth(1).locator(".preview-code").click()
        frame = frame_of(page)
        frame.locator("svg rect#box").wait_for()
        assert frame.locator("svg text").text_content() == "SVG artifact"
        shot("svg")
        if width == 390:  # the sheet covers the chat: close it to reach the next block
            page.click("#artifact-panel .artifact-close")
            panel.wait_for(state="hidden")

        # Mermaid: the vendored Mermaid renders the diagram to SVG inside the frame.
        blocks.nth(2).locator(".preview-code").click()
        frame = frame_of(page)
        frame.locator("#diagram svg").wait_for()
        labels = [t.strip() for t in frame.locator("#diagram svg .nodeLabel").all_text_contents()]
        assert {"Question", "Model", "Answer", "Preview"} <= set(labels), labels
        assert page.locator("#artifact-title").inner_text() == "Mermaid diagram preview"
        shot("mermaid")
        page.click("#artifact-panel .artifact-close")
        panel.wait_for(state="hidden")
        # Chromium's console names each refusal of the artifact; nothing else went wrong.
        refused = {reason for reason in BLOCKED if any(reason in e for e in errors)}
        assert refused == set(BLOCKED), errors
        assert [e for e in errors if not any(reason in e for reason in BLOCKED)] == []

        # A workspace admin turns previews off on the settings page: no Preview button, Copy stays.
        admin = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
        admin.set_default_timeout(STEP_MS)
        admin_page = admin.new_page()
        flows.sign_in_page(admin_page, platform, "admin")
        admin_page.goto("/chat/settings/#artifact-previews")
        switch = admin_page.locator("#artifacts-demo")
        switch.locator("input[name=artifacts_enabled]").uncheck()
        switch.get_by_role("button", name="Save").click()
        admin_page.locator("#artifacts-saved").wait_for()
        assert not switch.locator("input[name=artifacts_enabled]").is_checked()
        admin_page.locator("#artifact-previews").screenshot(path=str(ARTIFACTS / f"artifacts-{width}-settings.png"))
        admin.close()
        page.reload()
        blocks.nth(3).wait_for()
        assert page.locator(".preview-code").count() == 0 and page.locator("#artifact-panel").count() == 0
        assert blocks.locator(".copy-code").count() == 4
        shot("off")
    finally:
        previews_set(platform, True)
        context.close()
