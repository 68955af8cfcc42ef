"""Knowledge upload in a real browser (system Chromium, Playwright): several files at once
through the file picker and one by drag-and-drop, each with its own row; good files end as
links to their new items, bad ones with their reason; the list refreshes live."""

from __future__ import annotations

import re

import pytest

from tests.fakes.documents import encrypt_pdf, make_docx, make_pdf

from .test_browser import ARTIFACTS, STEP_MS  # the browser fixture is in tests/e2e/conftest.py

pytestmark = pytest.mark.browser

IMPORT_MS = 60_000


def test_upload_files_from_the_knowledge_page(browser, embedded_platform):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=embedded_platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    # Console errors too: a module that fails to load, a Content-Security-Policy violation.
    page.on("console", lambda msg: page_errors.append(msg.text) if msg.type == "error" else None)
    try:
        page.goto("/accounts/login/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", embedded_platform.password)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/chat/$"))
        page.goto("/knowledge/")
        page.wait_for_selector("#kb-live.ok", state="attached")  # the live feed is connected

        files = [
            {"name": "e2e-runbook.md", "mimeType": "text/markdown",
             "buffer": b"# E2E upload runbook\n\nRestart the **zeppelin** service first.\n"},
            {"name": "e2e-handbook.pdf", "mimeType": "application/pdf",
             "buffer": make_pdf([["Zeppelin hangar rules."], ["Second page."]], title="E2E hangar handbook")},
            {"name": "e2e-onboarding.docx",
             "mimeType": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
             "buffer": make_docx(heading="E2E onboarding", paragraphs=["Zeppelin tours on day two."])},
            {"name": "e2e-locked.pdf", "mimeType": "application/pdf",
             "buffer": encrypt_pdf(make_pdf("secret"), user_password="pw")},
            {"name": "e2e-tool.exe", "mimeType": "application/octet-stream", "buffer": b"MZ"},
        ]
        page.set_input_files("#kb-file", files)
        rows = page.locator("#kb-upload-list li")
        assert rows.count() == 5
        page.wait_for_function(
            "() => [...document.querySelectorAll('#kb-upload-list li')]"
            ".every(li => li.classList.contains('done') || li.classList.contains('failed'))",
            timeout=IMPORT_MS,
        )
        by_name = {r.locator(".name").inner_text(): r for r in rows.all()}
        for name in ("e2e-runbook.md", "e2e-handbook.pdf", "e2e-onboarding.docx"):
            row = by_name[name]
            assert "done" in row.get_attribute("class"), row.inner_text()
            assert row.locator(".state a").inner_text() == "created"
        assert by_name["e2e-locked.pdf"].locator(".state").inner_text() == "e2e-locked.pdf: the PDF is password-protected"
        assert by_name["e2e-tool.exe"].locator(".state").inner_text().startswith("unsupported file type .exe")

        # The list refreshed live with the three new items, their snippets rendered.
        titles = page.locator("#kb-results .kb-item-title")
        page.wait_for_function(
            "() => ['E2E upload runbook', 'E2E hangar handbook', 'E2E onboarding'].every(t =>"
            " [...document.querySelectorAll('#kb-results .kb-item-title')].some(a => a.textContent === t))",
            timeout=STEP_MS,
        )
        runbook = page.locator("#kb-results .kb-item", has=page.locator(".kb-item-title", has_text="E2E upload runbook"))
        assert runbook.locator(".kb-snippet").inner_text() == "E2E upload runbook Restart the zeppelin service first."
        assert titles.count() >= 3

        # Drag and drop one more file onto the page.
        handle = page.evaluate_handle(
            "() => { const dt = new DataTransfer();"
            " dt.items.add(new File(['# E2E dropped note\\n\\nDropped zeppelin facts.'], 'e2e-dropped.md', {type: 'text/markdown'}));"
            " return dt; }"
        )
        page.dispatch_event("#kb-drop", "dragenter", {"dataTransfer": handle})
        page.dispatch_event("#kb-drop", "drop", {"dataTransfer": handle})
        dropped = page.locator("#kb-upload-list li", has=page.locator(".name", has_text="e2e-dropped.md"))
        dropped.locator(".state a").wait_for(timeout=IMPORT_MS)
        assert dropped.locator(".state a").inner_text() == "created"

        # Search shows the highlighted match.
        page.fill("#kb-filters input[name=q]", "zeppelin")
        page.click("#kb-filters button[type=submit]")
        page.wait_for_url(re.compile(r"q=zeppelin"))
        marks = page.locator("#kb-results .kb-snippet mark").all_inner_texts()
        assert marks and {m.lower() for m in marks} == {"zeppelin"}, marks
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "knowledge-upload.png"), full_page=True)
        assert not page_errors, page_errors
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "upload-failure.png"), full_page=True)
        raise
    finally:
        context.close()
