"""Workspace assistants against the running platform (one embedded platform for the module,
the fake upstream as its ``openai`` provider, so the system prompt each run sent is visible):

* the real ``openai`` SDK names an assistant as the model: ``/v1/models`` lists it, the answer
  echoes it, and the upstream request carries the assistant's instructions;
* Chromium at 1280 and 390 px: make an assistant on the settings page, pick it in the landing
  page's model picker, see its starter prompts, send one, and the run used its instructions.
"""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import started_with_fake_model
from .test_browser import ARTIFACTS, STEP_MS


@pytest.fixture(scope="module")
def platform(upstream):
    yield from started_with_fake_model("embedded", upstream, COMPAT_API_WAIT_S="60")


def system_prompt(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "system")


def test_the_openai_sdk_names_an_assistant_as_the_model(platform, upstream):
    session = flows.login_session(platform, "alice")
    headers = {"X-CSRFToken": session.cookies["csrftoken"], "Referer": platform.base_url + "/"}
    made = session.post("/api/v1/assistants/", headers=headers, json={
        "workspace": "demo", "name": "Release notes", "provider": "openai",
        "instructions": "Write every answer as a release note with a version number."})
    assert made.status_code == 201, made.text
    model_id = made.json()["model_id"]
    client = openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=flows.login_token(platform, "alice"),
                           max_retries=0, timeout=60, http_client=httpx.Client(trust_env=False))
    assert model_id in [m.id for m in client.models.list()]
    upstream.script(text_chunks("v1.2: hello."))
    answer = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "hi"}])
    assert (answer.choices[0].message.content, answer.model) == ("v1.2: hello.", model_id)
    assert "Write every answer as a release note" in system_prompt(upstream.requests[-1])
    with pytest.raises(openai.NotFoundError):  # an unknown (or not visible) assistant: as any unknown model
        client.chat.completions.create(model="assistant:00000000-0000-4000-8000-000000000000",
                                       messages=[{"role": "user", "content": "hi"}])
    session.close()


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_make_an_assistant_pick_it_see_its_starters_and_send(browser, platform, upstream, width):
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)  # CSP violations too
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"assistants-{width}-{step}.png"), full_page=True)  # noqa: E731
    name = f"Pirate {width}"
    try:
        flows.sign_in_page(page, platform)
        page.goto("/chat/settings/")
        page.locator("#assistant-tool-checks input").first.wait_for(state="attached")
        # Each tool says what it does under its name (a phone has no hover for a tooltip).
        search = page.locator("#assistant-tool-checks .tool-check", has=page.locator("code", has_text="search_knowledge"))
        assert search.locator(".tool-desc").is_visible() and len(search.locator(".tool-desc").inner_text()) > 10
        page.fill("#assistant-name", name)
        assert page.input_value("#assistant-model").startswith("openai/")  # a new chat's model: the fake upstream
        page.fill("#assistant-instructions", f"Talk like a pirate ({width}).")
        page.fill("#assistant-starters", "Where is the treasure?\nName the ship")
        page.select_option("#assistant-visibility", "workspace")
        page.click("#assistant-save")
        page.locator("#assistant-list li", has_text=name).wait_for()
        api_id = page.locator("#assistant-list li", has_text=name).locator(".assistant-api-id code").inner_text()
        assert re.fullmatch(r"assistant:[0-9a-f-]{36}", api_id), api_id  # the name to give /v1
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot("settings")

        page.goto("/chat/")
        page.click("#model-picker-button")
        page.locator("#model-group-assistants").wait_for()
        shot("picker")
        panel = page.locator("#model-panel").bounding_box()  # on screen, and the page did not shift sideways
        assert panel["x"] >= 0 and panel["x"] + panel["width"] <= width, panel
        assert page.evaluate("() => window.scrollX === 0 && document.body.scrollLeft === 0")
        page.fill("#model-search", name)
        page.locator("#model-list [role=option]", has_text=name).click()
        assert page.locator("#model-picker-label").inner_text() == name
        starters = page.locator("#starter-prompts .starter")
        starters.first.wait_for()
        assert starters.all_inner_texts() == ["Where is the treasure?", "Name the ship"]
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot("landing")
        starters.first.click()
        assert page.input_value("#input") == "Where is the treasure?"
        upstream.script(text_chunks("Arr, under the palm tree."))
        page.click("#send")
        page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
        page.locator(".msg.assistant", has_text="under the palm tree").wait_for()
        assert f"Talk like a pirate ({width})." in system_prompt(upstream.requests[-1])
        assert page.locator("#model-picker-label").inner_text() == name  # the chat remembers it
        # The rail names the chat by its assistant, not by the model's provider (after a reload too).
        row = page.locator(".thread-item.active .t-meta")
        row.locator(".t-assistant", has_text=name).wait_for()
        page.reload()
        row.locator(".t-assistant", has_text=name).wait_for()
        page.locator(".msg.assistant", has_text="under the palm tree").wait_for()
        assert "openai ·" not in row.inner_text()
        shot("thread")
        assert errors == []
    finally:
        context.close()
