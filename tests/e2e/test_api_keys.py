"""Self-service API keys against the running platform (one embedded platform for the module,
the fake upstream as its ``openai`` provider):

* the real ``openai`` SDK with a key made through ``/api/v1/api-keys/`` (a signed-in session,
  CSRF and all): it works, and right after the owner revokes it the next call is a 401 and a
  ``/v1`` stream open with it ends with the ``access_revoked`` error chunk;
* a websocket opened with a key closes (4403) when the key is revoked;
* the settings page in Chromium at 1280 and 390 px: make a key, see it once, copy it, revoke it.
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import openai
import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import started_with_fake_model
from .test_browser import ARTIFACTS, STEP_MS

NOTICE_BOUND_S = 2.0  # a revocation reaches an open stream or socket within this
LONG_TEXT = " ".join(f"w{n}" for n in range(300))


@pytest.fixture(scope="module")
def platform(upstream):
    yield from started_with_fake_model("embedded", upstream, SSE_KEEPALIVE_S="1", COMPAT_API_WAIT_S="60",
                                       STREAM_ACCESS_RECHECK_S="30")


class Keys:
    """alice's key management through the API, with her browser-like session."""

    def __init__(self, platform) -> None:
        self.client = flows.login_session(platform, "alice")
        self.headers = {"X-CSRFToken": self.client.cookies["csrftoken"], "Referer": platform.base_url + "/"}

    def create(self, name: str) -> dict:
        response = self.client.post("/api/v1/api-keys/", json={"name": name}, headers=self.headers)
        assert response.status_code == 201, response.text
        return response.json()

    def revoke(self, key_id: str) -> float:
        response = self.client.delete(f"/api/v1/api-keys/{key_id}/", headers=self.headers)
        assert response.status_code == 204, response.text
        return time.monotonic()


@pytest.fixture(scope="module")
def keys(platform):
    k = Keys(platform)
    yield k
    k.client.close()


def sdk(platform, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=key, max_retries=0, timeout=60,
                         http_client=httpx.Client(trust_env=False))


def test_the_openai_sdk_with_a_key_made_through_the_api_is_refused_right_after_revoke(platform, upstream, keys):
    made = keys.create("sdk script")
    client = sdk(platform, made["key"])
    assert "openai" in [m.id for m in client.models.list()]
    upstream.script(text_chunks("Hello with a key."))
    answer = client.chat.completions.create(model="openai", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Hello with a key."
    listed = keys.client.get("/api/v1/api-keys/").json()
    assert [(k["prefix"], k["last_used_at"] is not None) for k in listed if k["id"] == made["id"]] == \
        [(made["key"][:9], True)]
    assert made["key"] not in keys.client.get("/api/v1/api-keys/").text

    keys.revoke(made["id"])
    with pytest.raises(openai.AuthenticationError) as refused:
        client.models.list()
    assert refused.value.status_code == 401 and refused.value.body["code"] == "api_key_revoked"
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="openai", messages=[{"role": "user", "content": "again"}])


def test_a_v1_stream_open_with_a_key_ends_when_the_key_is_revoked(platform, upstream, keys):
    made = keys.create("streaming script")
    upstream.delay_s = 0.2
    upstream.script(text_chunks(LONG_TEXT, pieces=300))
    try:
        stream = sdk(platform, made["key"]).chat.completions.create(
            model="openai", stream=True, messages=[{"role": "user", "content": "long, please"}])
        got, revoked_at, revoker = 0, None, None
        with pytest.raises(openai.APIError) as ended:
            for chunk in stream:
                got += bool(chunk.choices and chunk.choices[0].delta.content)
                if got == 3 and revoker is None:
                    revoker = threading.Thread(target=lambda: setattr(keys, "revoked_at", keys.revoke(made["id"])))
                    revoker.start()
        ended_at = time.monotonic()
        revoker.join(30)
        revoked_at = keys.revoked_at
    finally:
        upstream.release()
        upstream.delay_s = 0.0
    print(f"\n/v1 stream ended {ended_at - revoked_at:+.2f} s from the revocation's answer, after {got} deltas")
    assert ended.value.body["code"] == "access_revoked", ended.value.body
    assert got < 300 and ended_at - revoked_at < NOTICE_BOUND_S


def test_a_websocket_opened_with_a_key_closes_when_the_key_is_revoked(platform, keys):
    made = keys.create("socket script")
    thread_id = flows.create_thread(platform, made["key"])  # REST with the key (Token scheme)
    with flows.ws_connect(platform, thread_id, token=made["key"]) as ws:
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.5)  # accepted and open
        revoked_at = keys.revoke(made["id"])
        code = flows.close_code(ws, timeout=10)
        closed_at = time.monotonic()
    print(f"\nwebsocket closed {closed_at - revoked_at:.2f} s after the revocation's answer")
    assert code == 4403
    assert closed_at - revoked_at < NOTICE_BOUND_S
    with flows.http(platform, made["key"]) as client:
        assert client.get("/api/v1/workspaces/").json()["error"]["code"] == "api_key_revoked"


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_settings_page_makes_shows_once_copies_and_revokes_a_key(browser, platform, width):
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=platform.base_url)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)  # CSP violations too
    ARTIFACTS.mkdir(exist_ok=True)
    shot = lambda step: page.screenshot(path=str(ARTIFACTS / f"api-keys-{width}-{step}.png"), full_page=True)  # noqa: E731
    try:
        flows.sign_in_page(page, platform)
        page.goto("/chat/settings/")
        page.wait_for_selector("#api-key-list:not([hidden]), #api-key-empty:not([hidden])", state="attached")

        name = f"browser {width}"
        page.fill("#api-key-name", name)
        page.select_option("#api-key-expiry", "7")
        page.click("#api-key-create")
        secret_box = page.locator("#api-key-secret")
        secret_box.wait_for(state="visible")
        secret = page.locator("#api-key-secret-value").inner_text()
        assert re.fullmatch(r"cp_[A-Za-z0-9_-]{43}", secret), secret
        row = page.locator("#api-key-list tbody tr", has_text=name)
        row.wait_for()
        assert secret[:9] + "…" in row.inner_text() and secret not in row.inner_text()
        assert page.locator("#api-key-secret-value").evaluate("e => e.scrollWidth <= e.parentElement.clientWidth + 1")
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot("created")

        page.click("#api-key-copy")
        page.wait_for_function("() => document.getElementById('api-key-copy').textContent === 'Copied'")
        assert page.evaluate("() => navigator.clipboard.readText()") == secret
        with flows.http(platform, secret) as client:
            assert client.get("/v1/models").status_code == 200  # the copied key works

        page.click("#api-key-done")
        assert secret_box.is_hidden() and page.locator("#api-key-secret-value").inner_text() == ""
        page.reload()
        page.locator("#api-key-list tbody tr", has_text=name).wait_for()
        assert secret not in page.content()  # shown once: never again, not even in the page's HTML
        shot("listed")

        page.locator("#api-key-list tbody tr", has_text=name).get_by_role("button", name=f"Revoke {name}").click()
        dialog = page.locator("dialog.app-dialog[open]")
        assert "stops working at once" in dialog.inner_text()
        shot("confirm")
        dialog.locator("button[value=ok]").click()
        page.locator("#api-key-list tbody tr", has_text=name).wait_for(state="detached")
        shot("revoked")
        with flows.http(platform, secret) as client:
            refused = client.get("/v1/models")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "api_key_revoked"
        assert not errors, errors
    finally:
        context.close()
