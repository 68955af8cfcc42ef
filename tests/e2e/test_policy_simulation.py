"""Policy simulation in the Django admin, in Chromium at 1280 and 390 px: select the demo's
"Write" approval rule, run the "Simulate" action, tighten the rule in the draft form (nothing
is saved) and read the result page — counts and the changed calls in the approval card's
words — without sideways scrolling."""

from __future__ import annotations

import pytest

from . import flows
from .test_browser import ARTIFACTS, STEP_MS


@pytest.fixture(scope="module")
def platform(embedded_platform):
    embedded_platform.manage("seed_policy_history")
    return embedded_platform


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_admin_simulate_action_shows_what_tightening_the_write_rule_changes(browser, platform, width):
    (write_id,), = platform.sql("SELECT id FROM agents_approvalpolicy WHERE name = %s", "Write")
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)  # CSP violations too
    ARTIFACTS.mkdir(exist_ok=True)
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"policy-sim-{width}-{step}.png"), full_page=True)  # noqa: E731
    try:
        flows.sign_in_page(page, platform, "admin")
        page.goto("/admin/agents/approvalpolicy/")
        page.check(f"input[name=_selected_action][value='{write_id}']")
        page.select_option("select[name=action]", "simulate")
        page.click("button[name=index]")
        page.wait_for_url("**/simulate/?ids=*")
        prefix = f"row{write_id}"
        page.select_option("select[name=workspace]", label="Demo team")
        page.fill("input[name=title]", f"Tighten writes ({width})")
        page.select_option(f"select[name={prefix}-approver_kind]", "workspace_admins")
        page.uncheck(f"input[name={prefix}-requester_counts]")
        shot("draft")
        page.click("input[type=submit][value=Simulate]")
        page.wait_for_url("**/result/")
        body = page.locator("#content").inner_text()
        assert "21 calls would be decided differently" in body
        assert "Different approvers" in body
        calls = page.locator("table.sim-calls tbody tr")
        assert calls.count() == 21
        assert "Write: needs 1 approval from a workspace admin other than alice" in calls.first.inner_text() or \
            "other than admin" in calls.first.inner_text()
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
        shot("result")
        # Nothing was applied: the live rule still lets the requester approve.
        (kind,), = platform.sql("SELECT approver_kind FROM agents_approvalpolicy WHERE id = %s", write_id)
        assert kind == "requester"
        assert not errors, errors
    finally:
        context.close()
