"""Folders and tags in the chat rail, in Chromium against the running platform (one embedded
platform for the module), at 1280 and 390 px: make a folder, file a chat in it (dragged with
the mouse at 1280 px; the chat's "Move to folder…" at 390 px, where there is no drag), fold
it, tag a chat (the ⚙ menu at 1280, the chat's "Tags…" at 390) and filter the rail by the tag
— with the search still narrowing it."""

from __future__ import annotations

import pytest

from . import flows
from .test_browser import ARTIFACTS, STEP_MS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def token(embedded_platform):
    return flows.login_token(embedded_platform, "alice")


def make_chat(platform, token: str, title: str) -> str:
    with flows.http(platform, token) as client:
        r = client.post("/api/v1/threads/", json={"workspace": "demo", "provider": "offline", "title": title})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def read_chat(platform, token: str, thread_id: str) -> dict:
    with flows.http(platform, token) as client:
        return client.get(f"/api/v1/threads/{thread_id}/").json()


@pytest.mark.parametrize("width", [1280, 390])
def test_folders_and_tags_in_the_rail(browser, embedded_platform, token, width):
    platform = embedded_platform
    roadmap = make_chat(platform, token, f"Roadmap {width}")
    make_chat(platform, token, f"Budget {width}")
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)  # CSP violations too
    ARTIFACTS.mkdir(exist_ok=True)
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"folders-{width}-{step}.png"))  # noqa: E731
    phone = width < 700

    def open_rail():
        if phone and not page.evaluate("() => document.body.classList.contains('rail-open')"):
            page.click("#rail-toggle")
            page.locator("#rail").wait_for(state="visible")
            page.wait_for_function("() => document.getElementById('rail').getBoundingClientRect().left >= 0")

    def dialog_confirm():
        page.locator("dialog.app-dialog[open] button[value=ok]").click()
        page.locator("dialog.app-dialog[open]").wait_for(state="detached")

    def chat_menu(title, entry):
        row = page.locator("#thread-list .thread-item", has_text=title)
        row.locator(".menu-toggle").click()
        row.get_by_role("menuitem", name=entry).click()

    try:
        flows.sign_in_page(page, platform)
        open_rail()
        folder_name = f"Planning {width}"
        page.click("#new-folder")
        page.locator("dialog.app-dialog[open] input").fill(f"  {folder_name}  ")
        dialog_confirm()
        folder = page.locator("#thread-list section.folder", has_text=folder_name)
        folder.wait_for()
        assert folder.locator(".f-name").inner_text() == folder_name  # trimmed by the server

        chat = page.locator("#thread-list .thread-item", has_text=f"Roadmap {width}")
        if phone:  # no drag on a touch screen: the chat's menu
            chat_menu(f"Roadmap {width}", "Move to folder…")
            page.locator("dialog.app-dialog[open] select").select_option(label=folder_name)
            dialog_confirm()
        else:
            chat.drag_to(folder.locator(".folder-head"))
        folder.locator(".folder-threads .thread-item", has_text=f"Roadmap {width}").wait_for()
        assert read_chat(platform, token, roadmap)["folder"] == folder.get_attribute("data-folder-id")
        assert folder.locator(".f-count").inner_text() == "1"
        loose = page.locator("#thread-list > .thread-item", has_text=f"Roadmap {width}")
        assert loose.count() == 0  # left the list of chats in no folder
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot("filed")

        # Fold it: the chat is hidden, and it stays folded on the next visit.
        with page.expect_response(lambda r: "/api/v1/folders/" in r.url and r.request.method == "PATCH") as saved:
            folder.locator(".folder-toggle").click()
        assert saved.value.json()["collapsed"] is True
        assert folder.locator(".folder-threads").is_hidden()
        page.reload()
        open_rail()
        assert page.locator("#thread-list section.folder.collapsed", has_text=folder_name).count() == 1
        folder.locator(".folder-toggle").click()
        folder.locator(".folder-threads .thread-item", has_text=f"Roadmap {width}").wait_for()

        tag = f"Urgent-{width}"
        if phone:  # the chat's menu
            chat_menu(f"Roadmap {width}", "Tags…")
            page.locator("dialog.app-dialog[open] input").fill(f"{tag}, <b>Ideas</b>")
            dialog_confirm()
            page.locator("#thread-list .thread-item", has_text=f"Roadmap {width}").locator(
                ".tag-chip", has_text="#" + tag).wait_for()
        else:  # the chat's ⚙ menu, on its page
            page.locator("#thread-list .thread-item a", has_text=f"Roadmap {width}").click()
            page.wait_for_url(f"**/chat/{roadmap}/")
            page.click("#thread-settings summary")
            assert page.locator("#thread-folder option:checked").inner_text() == folder_name
            for name in (tag, "<b>Ideas</b>"):
                page.fill("#thread-tag-input", name)
                page.keyboard.press("Enter")
                page.locator("#thread-tag-list .tag-chip", has_text=name).wait_for()
            assert page.locator("#thread-tags .tag-chip").all_inner_texts() == ["#<b>Ideas</b>", "#" + tag]
            page.locator("#thread-list .thread-item", has_text=f"Roadmap {width}").locator(
                ".tag-chip", has_text="#" + tag).wait_for()  # the rail follows
            shot("settings")
            page.keyboard.press("Escape")
        assert sorted(read_chat(platform, token, roadmap)["tags"]) == sorted([tag, "<b>Ideas</b>"])
        assert page.locator("b", has_text="Ideas").count() == 0  # markup shown as text, never made

        # Filter by the tag: a flat list with only the tagged chat, naming its folder.
        open_rail()
        page.locator("#tag-filter").select_option(tag)
        page.wait_for_function("() => document.getElementById('thread-list').dataset.flat === '1'")
        rows = page.locator("#thread-list .thread-item")
        rows.first.wait_for()
        assert rows.count() == 1 and f"Roadmap {width}" in rows.first.inner_text()
        assert f"▸ {folder_name}" in rows.first.locator(".t-meta").inner_text()
        shot("tag-filter")
        page.fill("#chat-search", f"Budget {width}")  # the search narrows the tagged chats: none
        page.locator("#thread-list-empty:not([hidden])").wait_for()
        assert rows.count() == 0
        page.fill("#chat-search", "Roadmap")
        rows.first.wait_for()
        assert rows.count() == 1
        page.fill("#chat-search", "")
        page.locator("#tag-filter").select_option("")
        page.wait_for_function("() => document.getElementById('thread-list').dataset.flat === '0'")
        page.locator("#thread-list > .thread-item", has_text=f"Budget {width}").wait_for()
        shot("rail")
        # A chat's tag chip filters by that tag too (instead of opening the chat).
        url = page.url
        page.locator("#thread-list .thread-item", has_text=f"Roadmap {width}").locator(
            ".tag-chip", has_text="#" + tag).click()
        page.wait_for_function("() => document.getElementById('thread-list').dataset.flat === '1'")
        assert page.locator("#tag-filter").input_value() == tag and page.url == url
        assert not errors, errors
    finally:
        context.close()
