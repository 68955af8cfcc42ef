"""Single sign-on in a real browser: the login page's SSO button, the provider's own login
page (django-oidc-provider on loopback), back to the chat signed in with the workspace the
groups claim maps to; after the group changes at the provider, the next sign-in shows the
new role and the lost workspace is gone."""

from __future__ import annotations

import re

import pytest

from tests.sso.idp import CLIENT_ID, CLIENT_SECRET, IdentityProvider

from .harness import Platform, PlatformError
from .test_browser import ARTIFACTS, STEP_MS  # the browser fixture is in tests/e2e/conftest.py

pytestmark = pytest.mark.browser

RULES = """
from agents.models import Role
from chat.models import Workspace
from sso.models import SSOGroupRule
for group, slug, role in (("eng", "demo", "member"), ("eng-leads", "demo", "admin"), ("ops", "other", "member")):
    SSOGroupRule.objects.update_or_create(group=group, workspace=Workspace.objects.get(slug=slug),
                                          defaults={"role": Role.objects.get(name=role)})
"""


@pytest.fixture(scope="module")
def sso_platform():
    idp = IdentityProvider().start()
    platform = Platform("embedded", extra_env={
        "OIDC_ISSUER": idp.issuer, "OIDC_CLIENT_ID": CLIENT_ID, "OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_BUTTON_LABEL": "Sign in with Test IdP", "OIDC_SCOPES": "openid email profile groups",
    })
    try:
        platform.start()
        platform.manage("shell", "-c", RULES)
        idp.client(f"{platform.base_url}/oidc/callback/")
    except (PlatformError, Exception) as exc:
        platform.stop()
        idp.stop()
        pytest.fail(f"SSO platform did not start: {exc}", pytrace=False)
    yield platform, idp
    platform.stop()
    idp.stop()


def sign_in_via_sso(page, idp, username: str = "", password: str = "") -> None:
    """Click the SSO button; with ``username`` the provider's login page must come and is
    filled in, without it the provider still has a session and sends the browser straight back."""
    page.goto("/accounts/login/")
    page.click("#sso-login")
    if username:
        page.wait_for_selector("#idp-username")  # the provider's own page, on its own origin
        assert page.url.startswith(idp.base_url + "/accounts/login/"), page.url
        page.fill("#idp-username", username)
        page.fill("#idp-password", password)
        page.click("#idp-submit")
    page.wait_for_url(re.compile(r"/chat/$"))
    assert page.url.startswith("http://127.0.0.1:") and not page.url.startswith(idp.base_url)


def test_sign_in_with_the_identity_provider(browser, sso_platform):
    platform, idp = sso_platform
    idp.user("nora", password="pw-nora", email="nora@example.com", groups=["eng", "ops"])
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto("/accounts/login/")
        assert page.locator("#sso-login").inner_text() == "Sign in with Test IdP"
        sign_in_via_sso(page, idp, "nora", "pw-nora")
        assert "nora" in page.locator(".rail-head").inner_text()
        roles = {w["slug"]: w["role"] for w in page.request.get("/api/v1/workspaces/").json()["results"]}
        assert roles == {"demo": "member", "other": "member"}
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "sso-signed-in.png"))

        # The provider moves nora: lead of eng, out of ops. The next sign-in follows.
        page.click("form[action='/accounts/logout/'] button")
        page.wait_for_url(re.compile(r"/accounts/login/"))
        idp.user("nora", groups=["eng-leads"])
        sign_in_via_sso(page, idp)  # still signed in at the provider: straight back
        roles = {w["slug"]: w["role"] for w in page.request.get("/api/v1/workspaces/").json()["results"]}
        assert roles == {"demo": "admin"}
        assert not errors, errors
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "sso-failure.png"), full_page=True)
        raise
    finally:
        context.close()


@pytest.mark.parametrize(("fault", "reason"), [
    ("expired", "Single sign-on failed: the identity provider's token has expired."),
    ("wrong-audience", "Single sign-on failed: the identity provider's token was issued for another application (audience)."),
])
def test_a_bad_token_lands_on_the_login_page_with_the_reason(browser, sso_platform, fault, reason):
    platform, idp = sso_platform
    name = f"browser-{fault}"
    idp.user(name, password="pw", email=f"{name}@example.com", groups=["eng", f"token-fault:{fault}"])
    context = browser.new_context(base_url=platform.base_url)
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.click("#sso-login")
        page.fill("#idp-username", name)
        page.fill("#idp-password", "pw")
        page.click("#idp-submit")
        page.wait_for_selector("#sso-error")
        assert page.url == f"{platform.base_url}/accounts/login/"
        assert page.locator("#sso-error").inner_text() == reason
        page.goto("/chat/")
        assert "/accounts/login/" in page.url  # not signed in
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"sso-{fault}-failure.png"), full_page=True)
        raise
    finally:
        context.close()

