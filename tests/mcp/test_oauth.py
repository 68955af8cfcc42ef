"""Per-person OAuth for MCP servers (mcp_client.oauth) against a real OAuth-protected MCP server
and authorization server on loopback (tests.mcp.oauth_server): discovery, dynamic
registration, PKCE + resource, the callback's doors, encrypted storage, one refresh for a storm
of calls, a refresh token revoked upstream, revocation on disconnect, SSRF refusals."""

from __future__ import annotations

import threading
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import AuditEvent
from agents.tools import ConnectRequired, ToolContext
from mcp_client import oauth, sync
from mcp_client.models import MCPAuthRequest, MCPOAuthClient, MCPServer, MCPUserToken
from tests.mcp.oauth_server import OAuthPeer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def peer():
    server = OAuthPeer().start()
    yield server
    sync.reset()
    server.stop()


@pytest.fixture
def users(db):
    User = get_user_model()
    return User.objects.create_user("alice", password="pw-alice-123"), User.objects.create_user("bob", password="pw-bob-123")


def oauth_row(peer, slug="files", **fields) -> MCPServer:
    return MCPServer.objects.create(slug=slug, name="Files", transport=MCPServer.Transport.STREAMABLE_HTTP,
                                    url=peer.url, auth=MCPServer.Auth.OAUTH, enabled=True, **fields)


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def consent(client: Client, slug: str, *, next_url: str = "/chat/") -> tuple[str, dict]:
    """Start at /mcp-oauth/<slug>/connect/ and follow the authorization server's redirect
    (auto-consent): the callback URL's query."""
    start = client.get(f"/mcp-oauth/{slug}/connect/", {"next": next_url})
    assert start.status_code == 302, start.content[:300]
    auth_url = start["Location"]
    answer = httpx2.get(auth_url, follow_redirects=False)
    assert answer.status_code == 302, answer.text
    back = answer.headers["location"]
    return auth_url, {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}


def test_connect_discovers_registers_and_stores_encrypted_tokens(peer, users):
    alice, _bob = users
    server = oauth_row(peer)
    client = browser(alice)
    auth_url, query = consent(client, "files")
    params = {k: v[0] for k, v in parse_qs(urlsplit(auth_url).query).items()}
    assert auth_url.startswith(peer.base + "/authorize?")
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) == 43
    assert params["resource"] == peer.url  # RFC 8707, from the protected-resource metadata
    assert params["redirect_uri"] == "http://testserver/mcp-oauth/callback/"
    assert peer.provider.registrations == 1 and params["client_id"] in peer.provider.clients  # RFC 7591
    assert peer.provider.last_authorize.resource == peer.url

    done = client.get("/mcp-oauth/callback/", query)
    assert done.status_code == 302 and done["Location"] == "/chat/"
    token = MCPUserToken.objects.get(user=alice, server=server)
    assert token.status == "connected" and token.expires_at is not None
    issued = next(iter(peer.provider.access))
    assert issued not in token.access_token_encrypted  # stored encrypted
    assert oauth.access_token(alice.pk, server)[0] == issued
    assert MCPOAuthClient.objects.get(server=server).registered
    assert AuditEvent.objects.filter(kind="mcp_oauth", user=alice, detail__action="connected").exists()

    # The person's call carries their own token: the server sees its subject.
    result = sync._oauth_call(server.pk, "whoami", {}, 20, ToolContext(1, "t", alice.pk, "r", "member"))
    assert "subject=alice@example" in result.content[0].text

    # The connections API lists it; bob is not connected and bob's call asks him to connect.
    listed = client.get("/api/v1/mcp/connections/").json()
    assert listed == [{"server": "files", "name": "Files", "status": "connected",
                       "connected_at": listed[0]["connected_at"], "expires_at": listed[0]["expires_at"],
                       "connect_url": "/mcp-oauth/files/connect/"}]
    with pytest.raises(ConnectRequired) as refused:
        sync._oauth_call(server.pk, "whoami", {}, 20, ToolContext(1, "t", users[1].pk, "r", "member"))
    assert refused.value.server == "files"


def test_callback_doors(peer, users):
    alice, bob = users
    oauth_row(peer)
    client = browser(alice)
    _auth_url, query = consent(client, "files")

    wrong = client.get("/mcp-oauth/callback/", {**query, "state": "not-a-state"})
    assert wrong.status_code == 400 and not MCPUserToken.objects.exists()
    other = browser(bob).get("/mcp-oauth/callback/", query)  # bob lands on alice's callback
    assert other.status_code == 400 and not MCPUserToken.objects.exists()
    assert MCPAuthRequest.objects.get(state=query["state"]).used_at is None  # bob's try spent nothing

    assert client.get("/mcp-oauth/callback/", query).status_code == 302
    replay = client.get("/mcp-oauth/callback/", query)  # the same state and code again
    assert replay.status_code == 400 and b"already used" in replay.content
    assert peer.provider.exchanges == 1

    # A code replayed under a fresh state: the authorization server refuses it, nothing stored.
    MCPUserToken.objects.all().delete()
    _u, fresh = consent(client, "files")
    page = client.get("/mcp-oauth/callback/", {**fresh, "code": query["code"]})
    assert page.status_code == 200 and b"refused" in page.content
    assert not MCPUserToken.objects.exists()

    # Declined at the consent page.
    peer.provider.auto_consent = False
    start = client.get("/mcp-oauth/files/connect/")
    page_url = httpx2.get(start["Location"], follow_redirects=False).headers["location"]
    denied = httpx2.get(peer.base + page_url + "&choice=deny", follow_redirects=False).headers["location"]
    declined = client.get(denied.replace("http://testserver", ""))
    assert declined.status_code == 200 and b"did not allow" in declined.content
    assert not MCPUserToken.objects.exists()

    # Unknown or non-OAuth servers are 404s.
    assert client.get("/mcp-oauth/nope/connect/").status_code == 404


def test_refresh_storm_is_single_flight(peer, users):
    alice, _bob = users
    server = oauth_row(peer)
    client = browser(alice)
    _u, query = consent(client, "files")
    client.get("/mcp-oauth/callback/", query)
    peer.provider.expire_all_access()  # the server refuses the stored token
    MCPUserToken.objects.update(expires_at="2000-01-01T00:00:00Z")  # and we know it expired

    results, errors = [], []

    def call(i: int) -> None:
        from django.db import connection

        try:
            out = sync._oauth_call(server.pk, "echo", {"text": str(i)}, 30, ToolContext(1, "t", alice.pk, "r", "m"))
            results.append(out.content[0].text)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(results) == sorted(f"echo: {i}" for i in range(20))
    assert peer.provider.refreshes == 1  # exactly one refresh request at the authorization server
    row = MCPUserToken.objects.get(user=alice)
    assert row.version == 2 and row.lease_until is None


def test_refresh_token_revoked_upstream_asks_to_connect_again(peer, users):
    alice, _bob = users
    server = oauth_row(peer)
    client = browser(alice)
    _u, query = consent(client, "files")
    client.get("/mcp-oauth/callback/", query)
    peer.provider.expire_all_access()
    peer.provider.revoke_all_refresh()
    ctx = ToolContext(1, "t", alice.pk, "r", "member")
    with pytest.raises(ConnectRequired):
        sync._oauth_call(server.pk, "echo", {"text": "x"}, 20, ctx)
    assert MCPUserToken.objects.get(user=alice).status == "expired"
    refreshes = peer.provider.refreshes
    with pytest.raises(ConnectRequired):  # no loop: the next call does not try again
        sync._oauth_call(server.pk, "echo", {"text": "x"}, 20, ctx)
    assert peer.provider.refreshes == refreshes
    # connecting again works
    _u, query = consent(client, "files")
    client.get("/mcp-oauth/callback/", query)
    assert sync._oauth_call(server.pk, "echo", {"text": "y"}, 20, ctx).content[0].text == "echo: y"


def test_disconnect_revokes_upstream(peer, users):
    alice, bob = users
    server = oauth_row(peer)
    client = browser(alice)
    _u, query = consent(client, "files")
    client.get("/mcp-oauth/callback/", query)
    assert browser(bob).delete("/api/v1/mcp/connections/files/").status_code == 404  # not bob's
    assert client.delete("/api/v1/mcp/connections/files/").status_code == 204
    assert peer.provider.revoked == 2 and not peer.provider.access and not peer.provider.refresh
    assert not MCPUserToken.objects.filter(user=alice, server=server).exists()
    assert client.delete("/api/v1/mcp/connections/files/").status_code == 404


def test_metadata_for_another_issuer_or_private_address_is_refused(peer, users, monkeypatch, settings):
    server = oauth_row(peer)
    real_get = oauth._get

    def tampered(kind: str, value: str):
        def fake_get(http, url, srv):
            response = real_get(http, url, srv)
            if kind in url and response.status_code == 200:
                body = response.json()
                body.update({"issuer" if kind == "authorization-server" else "authorization_servers":
                             value if kind == "authorization-server" else [value]})
                return httpx2.Response(200, json=body, request=response.request)
            return response
        return fake_get

    monkeypatch.setattr(oauth, "_get", tampered("authorization-server", "https://evil.example"))
    with pytest.raises(oauth.OAuthError, match="another issuer"):
        oauth.discover(server)
    monkeypatch.setattr(oauth, "_get", tampered("protected-resource", "http://10.1.2.3/"))
    with pytest.raises(oauth.OAuthError, match="must use https"):
        oauth.discover(server)
    monkeypatch.setattr(oauth, "_get", tampered("protected-resource", "https://169.254.169.254/"))
    with pytest.raises(oauth.OAuthError, match="private address"):
        oauth.discover(server)
    # The page says why; nothing was registered.
    monkeypatch.setattr(oauth, "_get", tampered("protected-resource", "https://10.0.0.7/"))
    page = browser(users[0]).get("/mcp-oauth/files/connect/")
    assert page.status_code == 502 and b"private address" in page.content
    assert not MCPOAuthClient.objects.exists() and peer.provider.registrations == 0
    # An address the admin configured is allowed past the private-address check.
    settings.MCP_OAUTH_ALLOWED_HOSTS = ["10.0.0.7"]
    assert oauth.check_url("https://10.0.0.7/x", server) == "https://10.0.0.7/x"
