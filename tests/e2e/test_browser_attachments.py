"""Attachments in the chat, in a real browser (system Chromium, Playwright) at 1280 and 390 px:
an image pasted and a text file picked with the paperclip upload with a progress bar while the
page stays usable, an SVG dropped on the composer is refused with its reason, the model
request carries the image and the file (the real ``openai`` SDK against the fake upstream),
and the question shows the thumbnails again after a reload; on the landing page (no chat yet)
files are held and uploaded right after the send creates the chat. One platform for the module."""

from __future__ import annotations

import base64
import re

import pytest

from tests.fakes.images import make_image
from tests.fakes.openai_server import text_chunks

from .harness import started_with_fake_model
from .test_chat_ui import RUN_MS, STEP_MS, Session, reset

pytestmark = pytest.mark.browser

NOTES = b"Standup moved to 09:40.\nBring the PERIWINKLE badge.\n"


@pytest.fixture(scope="module")
def attach_platform(upstream):
    # The fake answers to any model name; this one reads images by its name (llm.capabilities).
    yield from started_with_fake_model("embedded", upstream, OPENAI_MODEL="gpt-4o-mini")


@pytest.mark.parametrize("width", [1280, 390], ids=["desktop", "phone"])
def test_attach_an_image_and_a_file_send_and_see_them_after_a_reload(browser, attach_platform, upstream, width):
    png = make_image("PNG", (96, 64), color=(220, 30, 30))
    reset(upstream, text_chunks("A red rectangle, and your notes say 09:40."))
    s = Session(browser, attach_platform, width)
    page = s.page
    upload_url = re.compile(r"/api/v1/threads/[^/]+/attachments/$")
    held = []
    try:
        s.new_chat()
        # The text file through the paperclip, its upload held: a progress bar, the page usable.
        page.route(upload_url, lambda route: held.append(route))
        with page.expect_file_chooser() as chooser:
            page.click("#attach")
        chooser.value.set_files([{"name": "notes.txt", "mimeType": "text/plain", "buffer": NOTES}])
        uploading = page.locator(".attachment-chip.uploading")
        uploading.wait_for()
        assert uploading.locator("progress.chip-progress").is_visible()
        page.fill("#input", "What is in these?")  # typing goes on meanwhile
        assert page.is_disabled("#send")  # not before the file is up
        s.shot("attach-uploading")
        for _ in range(200):  # the held request reaches the route handler while Playwright waits
            if held:
                break
            page.wait_for_function("() => true")
        assert held, "the upload never started"
        for route in held:
            route.continue_()
        page.unroute(upload_url)

        # The image by pasting it into the message box.
        page.evaluate(
            """(b64) => { const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
                 const dt = new DataTransfer(); dt.items.add(new File([bytes], 'red.png', {type: 'image/png'}));
                 document.getElementById('input').dispatchEvent(
                   new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true})); }""",
            base64.b64encode(png).decode())
        # An SVG dropped on the composer: refused, with the reason in its chip.
        svg = page.evaluate_handle(
            "() => { const dt = new DataTransfer();"
            " dt.items.add(new File(['<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>'],"
            " 'logo.svg', {type: 'image/svg+xml'})); return dt; }")
        page.dispatch_event("#composer", "dragover", {"dataTransfer": svg})
        page.dispatch_event("#composer", "drop", {"dataTransfer": svg})
        failed = page.locator(".attachment-chip.failed")
        failed.wait_for()
        assert "SVG images can carry scripts" in failed.locator(".chip-status").inner_text()
        assert "SVG images can carry scripts" in page.locator("#composer-counter").inner_text()
        page.wait_for_function("() => document.querySelectorAll('.attachment-chip.ready').length === 2", timeout=STEP_MS)
        assert page.locator(".attachment-chip.ready img.chip-thumb").count() == 1
        page.wait_for_function("() => { const i = document.querySelector('.attachment-chip img.chip-thumb');"
                               " return i.complete && i.naturalWidth > 0; }")  # the server's thumbnail
        s.shot("attach-chips")
        s.no_horizontal_overflow()
        failed.locator(".chip-remove").click()  # take the refused one out
        assert page.locator(".attachment-chip").count() == 2

        page.reload()  # uploaded, not sent yet: the chips come back
        page.wait_for_selector("#conn.ok", state="attached")
        page.wait_for_function("() => document.querySelectorAll('.attachment-chip.ready').length === 2")
        page.fill("#input", "What is in these?")
        page.click("#send")
        page.locator("article.msg.assistant .body").filter(has_text="your notes say 09:40").wait_for(timeout=RUN_MS)
        s.wait_idle()
        assert page.locator(".attachment-chip").count() == 0  # the files went with the message

        # The model request carried both, at the SDK's wire format.
        user_turn = upstream.requests[-1]["messages"][-1]
        text, image = user_turn["content"]
        assert "<<<file notes.txt\nStandup moved to 09:40.\nBring the PERIWINKLE badge." in text["text"]
        assert text["text"].endswith("What is in these?")
        assert image == {"type": "image_url",
                         "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}

        page.reload()
        page.wait_for_selector("#conn.ok", state="attached")
        question = page.locator("article.msg.user").last
        thumb = question.locator("img.file-thumb")
        thumb.wait_for()
        page.wait_for_function("() => { const i = document.querySelector('article.msg.user img.file-thumb');"
                               " return i && i.complete && i.naturalWidth > 0; }")
        assert thumb.get_attribute("alt") == "red.png"
        assert question.locator(".msg-file.document .file-name").inner_text() == "notes.txt"
        assert question.locator(".msg-file.document a").get_attribute("download") == "notes.txt"
        s.no_horizontal_overflow()
        s.shot("attach-after-reload")
        assert not s.errors, s.errors
    finally:
        s.context.close()


@pytest.mark.parametrize("width", [1280, 390], ids=["desktop", "phone"])
def test_attach_on_the_landing_page_and_send(browser, attach_platform, upstream, width):
    """On the landing page (no chat yet) files are held in the composer and uploaded right after
    the send creates the chat: refused files (an SVG, a "PNG" that is text) leave no chat
    behind, each says why at once (the first refusal used to stop the others being tried), and
    the text and the other files come back; sent again, the model request carries the image
    and the text file."""
    png = make_image("PNG", (96, 64), color=(30, 160, 60))
    reset(upstream, text_chunks("A green rectangle, and your notes say 09:40."))
    asked = len(upstream.requests)
    s = Session(browser, attach_platform, width)
    page = s.page
    try:
        before = {t["id"] for t in s.api("GET", "/api/v1/threads/").json()["results"]}
        with page.expect_file_chooser() as chooser:
            page.click("#attach")
        chooser.value.set_files([{"name": "notes.txt", "mimeType": "text/plain", "buffer": NOTES}])
        page.evaluate(
            """(b64) => { const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
                 const dt = new DataTransfer(); dt.items.add(new File([bytes], 'green.png', {type: 'image/png'}));
                 document.getElementById('input').dispatchEvent(
                   new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true})); }""",
            base64.b64encode(png).decode())
        svg = page.evaluate_handle(
            "() => { const dt = new DataTransfer();"
            " dt.items.add(new File(['<svg xmlns=\"http://www.w3.org/2000/svg\"/>'], 'logo.svg',"
            " {type: 'image/svg+xml'})); dt.items.add(new File(['hello'], 'fake.png', {type: 'image/png'}));"
            " return dt; }")
        page.dispatch_event("#landing", "dragover", {"dataTransfer": svg})
        page.dispatch_event("#landing", "drop", {"dataTransfer": svg})
        held = page.locator(".attachment-chip.held")
        assert held.count() == 4 and set(held.locator(".chip-status").all_inner_texts()) == {"ready to send"}
        page.wait_for_function("() => { const i = document.querySelector('.attachment-chip.held img.chip-thumb');"
                               " return i && i.complete && i.naturalWidth > 0; }")  # a local preview
        page.fill("#input", "What is in these?")
        s.no_horizontal_overflow()
        s.shot("landing-attach")
        # Both bad files are refused once the chat exists: the chat goes again, nothing else is lost.
        page.press("#input", "Enter")
        failed = page.locator(".attachment-chip.failed")
        page.wait_for_function("() => document.querySelectorAll('.attachment-chip.failed').length === 2",
                               timeout=RUN_MS)
        page.wait_for_function("() => !document.getElementById('input').readOnly")  # the send is over
        reasons = " ".join(failed.all_inner_texts())
        assert "SVG images can carry scripts" in reasons and "not a PNG, JPEG, WebP or GIF image" in reasons, reasons
        assert "2 files can't be sent" in page.locator("#composer-counter").inner_text()
        page.wait_for_function("() => document.querySelectorAll('.attachment-chip.held').length === 2")
        assert page.input_value("#input") == "What is in these?" and re.search(r"/chat/$", page.url)
        assert {t["id"] for t in s.api("GET", "/api/v1/threads/").json()["results"]} == before
        assert len(upstream.requests) == asked
        s.shot("landing-attach-refused")
        for _ in range(2):
            failed.first.locator(".chip-remove").click()
        page.click("#send")
        page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"), timeout=RUN_MS)
        page.locator("article.msg.assistant .body").filter(has_text="your notes say 09:40").wait_for(timeout=RUN_MS)
        user_turn = upstream.requests[asked]["messages"][-1]
        text, image = user_turn["content"]
        assert "<<<file notes.txt\nStandup moved to 09:40.\nBring the PERIWINKLE badge." in text["text"]
        assert text["text"].endswith("What is in these?")
        assert image == {"type": "image_url",
                         "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}
        question = page.locator("article.msg.user").last
        question.locator("img.file-thumb").wait_for()
        assert question.locator(".msg-file.document .file-name").inner_text() == "notes.txt"
        assert len({t["id"] for t in s.api("GET", "/api/v1/threads/").json()["results"]} - before) == 1
        s.no_horizontal_overflow()
        s.shot("landing-attach-sent")
        assert not s.errors, s.errors
    finally:
        s.context.close()
