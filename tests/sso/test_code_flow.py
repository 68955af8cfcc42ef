"""Single sign-on through the OpenID Connect code flow against a real provider
(django-oidc-provider on loopback, ``tests/sso/idp.py``): the platform is Django's test
client, the person's browser an HTTP client that signs in at the provider, and the
platform exchanges the code and fetches the keys and userinfo from the provider over
real HTTP.

Flows: first login (user created, group-mapped roles), a changed group at the next login
(role changed, membership removed, hand-made membership kept, live socket stops getting
events), a forged state, a wrong nonce, an expired ID token, a wrong audience, the provider
down, password login turned off.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from django.core.cache import cache

from agents.services import run_create
from chat.models import Membership, Workspace
from sso.models import SSOGroupRule, SSOIdentity, SSOMembership
from tests.conftest import make_thread

from .idp import CLIENT_ID, CLIENT_SECRET, IdentityProvider

CALLBACK = "http://testserver/oidc/callback/"


@pytest.fixture(scope="module")
def idp():
    provider = IdentityProvider().start()
    provider.client(CALLBACK)
    yield provider
    provider.stop()


@pytest.fixture
def sso(settings, idp, roles, workspaces):
    settings.OIDC_ISSUER = idp.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_ENABLED = True
    settings.OIDC_RP_SCOPES = "openid email profile groups"  # the test provider's groups claim
    settings.AUTHENTICATION_BACKENDS = ["chatplatform.auth_backends.PasswordBackend", "sso.backend.PlatformOIDCBackend"]
    cache.clear()
    SSOGroupRule.objects.create(group="eng", workspace=workspaces["demo"], role=roles["member"])
    SSOGroupRule.objects.create(group="eng-leads", workspace=workspaces["demo"], role=roles["admin"])
    SSOGroupRule.objects.create(group="ops", workspace=workspaces["other"], role=roles["viewer"])
    return idp


def at_provider(authorize_url: str, username: str, password: str) -> str:
    """What the person's browser does at the provider: follow the authorization request to
    the provider's login page, sign in, and come back with the redirect to our callback."""
    with httpx.Client(follow_redirects=False, timeout=20) as browser:
        to_login = browser.get(authorize_url)
        assert to_login.status_code == 302, to_login.text[:300]
        login_url = urljoin(authorize_url, to_login.headers["location"])
        assert browser.get(login_url).status_code == 200
        signed_in = browser.post(login_url, data={
            "username": username, "password": password, "csrfmiddlewaretoken": browser.cookies["idp_csrftoken"],
            "next": parse_qs(urlsplit(login_url).query)["next"][0],
        })
        assert signed_in.status_code == 302, "wrong password at the provider"
        back = browser.get(urljoin(login_url, signed_in.headers["location"]))
        assert back.status_code == 302, back.text[:300]
        return back.headers["location"]


def start(client) -> str:
    from django.conf import settings

    response = client.get("/oidc/authenticate/")
    assert response.status_code == 302
    assert response["Location"].startswith(f"{settings.OIDC_ISSUER}/authorize?")
    query = parse_qs(urlsplit(response["Location"]).query)
    assert query["client_id"] == [CLIENT_ID] and query["code_challenge_method"] == ["S256"] and query["nonce"]
    return response["Location"]


def callback(client, location: str):
    assert location.startswith(CALLBACK), location
    parts = urlsplit(location)
    return client.get(f"{parts.path}?{parts.query}")


def sign_in(client, username: str, password: str):
    return callback(client, at_provider(start(client), username, password))


def login_error(client) -> str:
    page = client.get("/accounts/login/").content.decode()
    marker = 'id="sso-error">'
    return page.split(marker, 1)[1].split("</p>", 1)[0] if marker in page else ""


def memberships(user) -> dict[str, str]:
    return {m.workspace.slug: m.role.name for m in Membership.objects.filter(user=user).select_related("workspace", "role")}


@pytest.mark.django_db
def test_first_login_creates_the_user_with_group_mapped_roles(client, sso):
    sso.user("erin", password="pw-erin", email="erin@example.com", first_name="Erin", groups=["eng", "ops"])
    response = sign_in(client, "erin", "pw-erin")
    assert response.status_code == 302 and response["Location"] == "/chat/"
    user = response.wsgi_request.user
    assert user.is_authenticated and user.username == "erin" and user.email == "erin@example.com"
    assert user.first_name == "Erin" and not user.has_usable_password()
    identity = SSOIdentity.objects.get(user=user)
    assert identity.issuer == sso.issuer and identity.groups == ["eng", "ops"]
    assert memberships(user) == {"demo": "member", "other": "viewer"}
    assert client.get("/chat/").status_code == 200  # a real session
    listed = client.get("/api/v1/workspaces/").json()
    assert {w["slug"]: w["role"] for w in listed.get("results", listed)} == {"demo": "member", "other": "viewer"}


@pytest.mark.django_db
def test_a_changed_group_changes_the_role_and_removes_the_membership_at_next_login(client, sso, workspaces, roles):
    sso.user("finn", password="pw-finn", email="finn@example.com", groups=["eng", "ops"])
    first = sign_in(client, "finn", "pw-finn").wsgi_request.user
    third = Workspace.objects.create(slug="third", name="Third")
    Membership.objects.create(user=first, workspace=third, role=roles["member"])  # by hand: SSO leaves it
    client.logout()

    sso.user("finn", groups=["eng-leads"])
    again = sign_in(client, "finn", "pw-finn").wsgi_request.user
    assert again.pk == first.pk  # matched by (issuer, sub), not created twice
    assert memberships(again) == {"demo": "admin", "third": "member"}
    assert set(SSOMembership.objects.filter(user=again).values_list("workspace__slug", flat=True)) == {"demo"}


@pytest.mark.django_db(transaction=True)
def test_a_socket_of_a_removed_member_gets_no_further_events(client, sso, offline):
    from channels.testing import WebsocketCommunicator
    from rest_framework.authtoken.models import Token

    from config.asgi import application

    sso.user("gwen", password="pw-gwen", email="gwen@example.com", groups=["eng"])
    gwen = sign_in(client, "gwen", "pw-gwen").wsgi_request.user
    thread = make_thread(gwen, Workspace.objects.get(slug="demo"), offline)
    key = Token.objects.create(user=gwen).key
    sso.user("gwen", groups=[])

    async def go():
        from asgiref.sync import sync_to_async

        comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                     headers=[(b"authorization", f"Token {key}".encode())])
        connected, _ = await comm.connect(timeout=5)
        assert connected
        await sync_to_async(lambda: sign_in(client, "gwen", "pw-gwen"))()  # the next login drops the membership
        await sync_to_async(lambda: run_create(thread=thread, user=gwen, content="hello"))()
        first = await comm.receive_output(timeout=10)
        await comm.disconnect()
        return first

    assert asyncio.run(go()) == {"type": "websocket.close", "code": 4403}
    assert memberships(gwen) == {}


@pytest.mark.django_db
def test_a_forged_state_is_refused(client, sso):
    sso.user("hal", password="pw-hal", email="hal@example.com", groups=["eng"])
    location = at_provider(start(client), "hal", "pw-hal")
    forged = location.replace("state=", "state=forged")
    response = callback(client, forged)
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert "could not be verified" in login_error(client)
    assert not SSOIdentity.objects.exists()
    assert client.get("/chat/")["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_a_wrong_nonce_is_refused(client, sso):
    sso.user("ivy", password="pw-ivy", email="ivy@example.com", groups=["eng"])
    authorize = start(client)
    session = client.session
    state = parse_qs(urlsplit(authorize).query)["state"][0]
    session["oidc_states"][state]["nonce"] = "not-the-nonce-the-provider-saw"
    session.save()
    response = callback(client, at_provider(authorize, "ivy", "pw-ivy"))
    assert response["Location"] == "/accounts/login/"
    assert login_error(client) == "Single sign-on failed: the sign-in&#x27;s nonce verification failed."
    assert not SSOIdentity.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("fault", "reason"), [
    ("expired", "Single sign-on failed: the identity provider&#x27;s token has expired."),
    ("wrong-audience", "Single sign-on failed: the identity provider&#x27;s token was issued for another application (audience)."),
])
def test_a_token_with_bad_claims_is_refused(client, sso, fault, reason):
    name = f"fault-{fault}"
    sso.user(name, password="pw", email=f"{name}@example.com", groups=["eng", f"token-fault:{fault}"])
    response = sign_in(client, name, "pw")
    assert response["Location"] == "/accounts/login/"
    assert login_error(client) == reason
    assert not SSOIdentity.objects.exists() and not Membership.objects.filter(user__username=name).exists()


@pytest.mark.django_db
def test_a_lookalike_of_an_existing_username_from_the_provider_is_refused(client, sso, settings, users):
    """The provider names the person ``ａｄｍｉｎ`` (full width; here through the given_name
    claim, as an operator may configure): NFKC reads it as the local ``admin``, so no
    look-alike account is created beside it and the sign-in ends with the reason."""
    from django.contrib.auth import get_user_model

    settings.OIDC_USERNAME_CLAIM = "given_name"
    sso.user("mallory", password="pw-mallory", first_name="\uff41\uff44\uff4d\uff49\uff4e", groups=["eng"])
    before = set(get_user_model().objects.values_list("username", flat=True))
    response = sign_in(client, "mallory", "pw-mallory")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session
    error = login_error(client)
    assert "reads the same as the existing account" in error and "admin" in error, error
    assert set(get_user_model().objects.values_list("username", flat=True)) == before
    assert not SSOIdentity.objects.exists()


@pytest.mark.django_db
def test_a_provider_username_is_stored_in_nfkc_form(client, sso, settings, users):
    settings.OIDC_USERNAME_CLAIM = "given_name"
    sso.user("nina", password="pw-nina", first_name="\U0001d427ina", groups=["eng"])  # mathematical bold n
    response = sign_in(client, "nina", "pw-nina")
    assert response.status_code == 302 and response["Location"] == "/chat/"
    assert response.wsgi_request.user.username == "nina"


@pytest.mark.django_db
def test_the_provider_down_is_a_clear_message_and_password_login_still_works(client, sso, settings, users):
    settings.OIDC_ISSUER = "http://127.0.0.1:9/openid"  # nothing listens on the discard port
    response = client.get("/oidc/authenticate/")
    assert response["Location"] == "/accounts/login/"
    assert login_error(client).startswith("Single sign-on is unavailable: identity provider metadata unavailable")
    ok = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert ok.status_code == 302 and ok["Location"] == "/chat/"


@pytest.mark.django_db
def test_password_login_can_be_turned_off(client, sso, settings, users):
    settings.PASSWORD_LOGIN_ENABLED = False
    page = client.get("/accounts/login/").content.decode()
    assert 'id="sso-login"' in page and 'name="password"' not in page
    refused = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert refused["Location"] == "/accounts/login/"
    assert login_error(client) == "Password sign-in is turned off; use single sign-on."
    assert client.get("/chat/")["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_without_configuration_there_is_no_sso(client, settings, db):
    settings.OIDC_ENABLED = False
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    page = client.get("/accounts/login/").content.decode()
    assert 'id="sso-login"' not in page and 'name="password"' in page


@pytest.mark.django_db
def test_the_sso_backend_ignores_a_login_that_is_not_its_callback(sso, rf):
    """Django asks every backend at every login; for a password login (whatever the URL
    carries) the SSO backend answers None at once instead of exchanging a code."""
    from sso.backend import PlatformOIDCBackend

    request = rf.post("/accounts/login/?code=abc&state=xyz")
    assert PlatformOIDCBackend().authenticate(request, username="alice", password="pw-alice") is None
    assert not hasattr(request, "sso_error")  # no exchange was attempted (it would have failed with a reason)
