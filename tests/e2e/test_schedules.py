"""The schedules page in Chromium at 1280 and 390 px against an embedded platform whose own
ticker fires (``config.loop_binding`` starts it beside the reaper): a wrong cron is refused
with its reason and the form keeps what was typed; a schedule made on the page is listed with
its next fire; after a tick its history shows the run; pause and resume change its state."""

from __future__ import annotations

import time

import pytest

from . import flows
from .harness import Platform, started
from .test_browser import ARTIFACTS, STEP_MS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def platform():
    # A 2-second minimum lets the page's interval (minutes) fire within the test.
    yield from started(Platform("embedded", extra_env={"SCHEDULE_TICK_S": "0.3", "SCHEDULE_MIN_INTERVAL_S": "2"}))


def reload_until(page, selector: str, timeout_s: float = 30.0) -> None:
    """The page is server-rendered: reload it until ``selector`` is there (each reload waits
    for the server, which is the condition's own pace)."""
    deadline = time.monotonic() + timeout_s
    while page.locator(selector).count() == 0:
        assert time.monotonic() < deadline, f"timed out waiting for {selector}"
        page.reload()


@pytest.mark.parametrize("width", [1280, 390])
def test_make_see_fire_pause_and_resume_a_schedule_on_the_page(browser, platform, width):
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token)
    with flows.http(platform, token) as client:
        client.patch(f"/api/v1/threads/{thread_id}/", json={"title": f"Ops chat {width}"})
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)  # CSP violations too
    ARTIFACTS.mkdir(exist_ok=True)
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"schedules-{width}-{step}.png"), full_page=True)  # noqa: E731
    name = f"Daily digest {width}"
    try:
        flows.sign_in_page(page, platform)
        page.goto("/schedules/")
        assert page.locator("#rail-schedules").get_attribute("aria-current") == "page"
        form = page.locator("#schedule-form")
        form.locator("input[name=name]").fill(name)
        form.locator("select[name=thread]").select_option(thread_id)
        form.locator("textarea[name=prompt]").fill("Summarise what changed since the last digest.")
        form.locator("input[name=cron]").fill("61 * * * *")
        page.click("#schedule-create")
        assert "not valid" in page.locator("#schedule-error").inner_text()
        shot("error")
        assert form.locator("input[name=name]").input_value() == name  # nothing typed is lost
        assert form.locator("input[name=cron]").get_attribute("aria-invalid") == "true"

        form.locator("input[name=kind][value=interval]").check()
        form.locator("input[name=interval_minutes]").fill("0.05")  # 3 s
        form.locator("select[name=overlap]").select_option("queue")
        page.click("#schedule-create")
        card = page.locator(".schedule-card", has_text=name)
        card.wait_for()
        assert "Active" in card.locator(".schedule-state").inner_text()
        assert card.locator(".schedule-next time").get_attribute("datetime")
        assert "Run once the current run ends" in card.locator(".schedule-overlap").inner_text()
        shot("created")

        reload_until(page, f".schedule-card:has-text('{name}') .history-table tbody tr.fire-started")
        card = page.locator(".schedule-card", has_text=name)
        assert card.locator(".history-table tbody tr.fire-started").first.locator("td").nth(1).inner_text() == "Started"
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        assert card.evaluate("e => e.getBoundingClientRect().right <= window.innerWidth")
        shot("fired")

        card.get_by_role("button", name="Pause").click()
        card = page.locator(".schedule-card", has_text=name)
        assert card.locator(".schedule-state").inner_text() == "Paused"
        assert card.locator(".schedule-next").inner_text() == "—"
        shot("paused")
        card.get_by_role("button", name="Resume").click()
        card = page.locator(".schedule-card", has_text=name)
        assert card.locator(".schedule-state").inner_text() == "Active"
        assert card.locator(".schedule-next time").count() == 1
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        card.get_by_role("button", name="Delete").click()
        dialog = page.locator("dialog.app-dialog[open]")
        assert name in dialog.inner_text()
        shot("confirm-delete")
        dialog.locator("button[value=cancel]").click()  # the safe choice: nothing deleted
        dialog.wait_for(state="detached")
        assert page.locator(".schedule-card", has_text=name).count() == 1
        card.get_by_role("button", name="Delete").click()
        page.locator("dialog.app-dialog[open] button[value=ok]").click()
        page.locator(".schedule-card", has_text=name).wait_for(state="detached")
        assert not errors, errors
    finally:
        context.close()
