"""Per-person OAuth for MCP servers (mcp_client.oauth) against a real OAuth-protected MCP server
and authorization server on loopback (tests.mcp.oauth_server): discovery, dynamic
registration, PKCE + resource, the callback's doors, encrypted storage, one refresh for a storm
of calls, a refresh token revoked upstream, revocation on disconnect, SSRF refusals."""

from __future__ import annotations

import threading
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
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
    alice = users["alice"]
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

    # Progress notifications of a person's call reach the run (tool.progress labels).
    labels: list[str] = []
    ctx = ToolContext(1, "t", alice.pk, "r", "member", progress=lambda label, status="running": labels.append(label))
    assert sync._oauth_call(server.pk, "count", {"n": 2}, 20, ctx).content[0].text == "counted to 2"
    assert labels == ["step 1 of 2", "step 2 of 2"]

    # The connections API lists it; bob is not connected and bob's call asks him to connect.
    listed = client.get("/api/v1/mcp/connections/").json()
    assert listed == [{"server": "files", "name": "Files", "status": "connected",
                       "connected_at": listed[0]["connected_at"], "expires_at": listed[0]["expires_at"],
                       "connect_url": "/mcp-oauth/files/connect/"}]
    with pytest.raises(ConnectRequired) as refused:
        sync._oauth_call(server.pk, "whoami", {}, 20, ToolContext(1, "t", users["bob"].pk, "r", "member"))
    assert refused.value.server == "files"


def test_callback_doors(peer, users):
    alice, bob = users["alice"], users["bob"]
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


@pytest.mark.db_backends  # the refresh lease is a compare-and-set: SQLite here, PostgreSQL in the services pass
def test_refresh_storm_is_single_flight(peer, users):
    alice = users["alice"]
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


@pytest.mark.db_backends
def test_refresh_token_revoked_upstream_asks_to_connect_again(peer, users):
    alice = users["alice"]
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
    alice, bob = users["alice"], users["bob"]
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
    page = browser(users["alice"]).get("/mcp-oauth/files/connect/")
    assert page.status_code == 502 and b"private address" in page.content
    assert not MCPOAuthClient.objects.exists() and peer.provider.registrations == 0
    # An address the admin configured is allowed past the private-address check.
    settings.MCP_OAUTH_ALLOWED_HOSTS = ["10.0.0.7"]
    assert oauth.check_url("https://10.0.0.7/x", server) == "https://10.0.0.7/x"


# --- a run parks on a "connect" card and resumes when the callback lands ---------------------------
@pytest.fixture
def listed(peer, users):
    """The OAuth server with its tools listed through a staff member's own connection."""
    admin = users["admin"]
    admin.is_staff = True
    admin.save()
    server = oauth_row(peer, allowlist=["echo", "whoami"])
    client = browser(admin)
    start = client.get("/mcp-oauth/files/connect/", {"listing": "1"})
    back = httpx2.get(start["Location"], follow_redirects=False).headers["location"]
    assert client.get(back.replace("http://testserver", "")).status_code == 302
    server.refresh_from_db()
    assert server.oauth_listing_user == admin
    report = sync.refresh(server)
    assert report.health == "connected", report.health
    return server


def test_run_parks_on_connect_card_and_resumes_without_asking_the_model_again(
        listed, peer, users, openai_provider, fake_openai, sink_for):
    from agents.models import ToolCall
    from agents.services import run_create
    from tests.conftest import make_thread, types
    from tests.fakes.openai_server import text_chunks, tool_call_chunks
    from tests.policy.tooltest import call

    alice = users["alice"]
    thread = make_thread(alice, workspaces_of(alice), openai_provider)
    fake_openai.script(tool_call_chunks([call("c1", "whoami", {})]), text_chunks("You are alice."))
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=alice, content="who am I there?").run
    card = sink.until_parked(run.pk)[-1]
    assert card["rule"] == "connect" and card["waiting_text"] == "Connect Files to continue."
    assert card["connect"] == {"server": "files", "name": "Files",
                               "url": f"/mcp-oauth/files/connect/?tool_call={card['tool_call_id']}"}
    assert card["approver_names"] == ["alice"]
    # Approving cannot stand in for connecting; another person cannot settle it through the callback.
    client = browser(alice)
    refused = client.post(f"/api/v1/tool-calls/{card['tool_call_id']}/decision/", {"decision": "approve"},
                          content_type="application/json")
    assert refused.status_code == 409 and "Connect Files to continue" in str(refused.json()), refused.json()
    assert ToolCall.objects.get(pk=card["tool_call_id"]).status == "awaiting_approval"

    tools = {t["name"]: t for t in client.get(f"/api/v1/threads/{thread.pk}/tools/").json()["tools"]}
    assert tools["whoami"]["connect"] == {"server": "files", "name": "Files", "url": "/mcp-oauth/files/connect/"}
    # The same card waits in alice's approvals inbox (where an unattended run's owner finds it).
    inbox = client.get("/api/v1/approvals/").json()
    items = inbox["results"] if isinstance(inbox, dict) else inbox
    assert [(i["id"], i["approval"]["connect"]["server"]) for i in items] == [(card["tool_call_id"], "files")]
    for other in ("bob", "admin"):  # nobody else's inbox: a workspace admin cannot connect alice's account
        assert browser(users[other]).get("/api/v1/approvals/").json() in ([], {"count": 0, "next": None,
                                                                               "previous": None, "results": []})
    start = client.get(card["connect"]["url"] + "&next=/chat/")
    back = httpx2.get(start["Location"], follow_redirects=False).headers["location"]
    assert client.get(back.replace("http://testserver", "")).status_code == 302
    events = sink.until_terminal(run.pk)
    assert types(events)[-1] == "run.completed"
    resolved = [e for e in events if e["type"] == "approval.resolved"]
    assert resolved and resolved[0]["decision"] == "approve" and resolved[0]["decided_by"] == "alice"
    ledger = ToolCall.objects.get(pk=card["tool_call_id"])
    assert ledger.status == "succeeded" and ledger.result == "subject=alice@example"
    assert len(fake_openai.requests) == 2  # the model was asked once for the call, once after its result
    tools = {t["name"]: t for t in client.get(f"/api/v1/threads/{thread.pk}/tools/").json()["tools"]}
    assert tools["whoami"]["connect"] is None and tools["echo"]["connect"] is None


def test_declined_consent_ends_the_call_with_the_reason(listed, peer, users, openai_provider, fake_openai,
                                                        sink_for):
    from agents.models import ToolCall
    from agents.services import run_create
    from chat.models import Message
    from tests.conftest import make_thread, types
    from tests.fakes.openai_server import text_chunks, tool_call_chunks
    from tests.policy.tooltest import call

    bob = users["bob"]
    thread = make_thread(bob, workspaces_of(bob), openai_provider)
    fake_openai.script(tool_call_chunks([call("c1", "echo", {"text": "x"})]), text_chunks("Okay."))
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=bob, content="echo x").run
    card = sink.until_parked(run.pk)[-1]
    # alice starting a consent with bob's parked call does not tie it to bob's run
    alice_start = browser(users["alice"]).get(card["connect"]["url"])
    assert alice_start.status_code == 302
    assert MCPAuthRequest.objects.get(user=users["alice"]).tool_call_id is None
    peer.provider.auto_consent = False
    client = browser(bob)
    start = client.get(card["connect"]["url"])
    page = httpx2.get(start["Location"], follow_redirects=False).headers["location"]
    denied = httpx2.get(peer.base + page + "&choice=deny", follow_redirects=False).headers["location"]
    assert client.get(denied.replace("http://testserver", "")).status_code == 200
    events = sink.until_terminal(run.pk)
    assert types(events)[-1] == "run.completed"
    ledger = ToolCall.objects.get(pk=card["tool_call_id"])
    assert ledger.status == "denied" and ledger.summary == "You did not allow access to Files."
    tool_message = Message.objects.get(thread=thread, role="tool")
    assert tool_message.content == "You did not allow access to Files."


def workspaces_of(user):
    return user.memberships.first().workspace


def test_admin_shows_each_persons_state_and_disconnects_them(peer, users, django_user_model):
    alice = users["alice"]
    server = oauth_row(peer)
    _u, query = consent(browser(alice), "files")
    browser(alice).get("/mcp-oauth/callback/", query)
    MCPUserToken.objects.filter(user=users["alice"]).update(status="connected")
    boss = django_user_model.objects.create_superuser("boss", password="pw-boss-123")
    admin = browser(boss)
    page = admin.get(f"/admin/agents_mcp/mcpserver/{server.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"authorization server {peer.base}" in html and "registered dynamically" in html
    assert "Connect my account (lists the tools)" in html and "alice" in html
    listing = admin.get("/admin/agents_mcp/mcpusertoken/")
    assert listing.status_code == 200 and "connected" in listing.content.decode()
    token = MCPUserToken.objects.get(user=alice)
    done = admin.post("/admin/agents_mcp/mcpusertoken/", {"action": "disconnect", "_selected_action": [token.pk]})
    assert done.status_code == 302
    assert not MCPUserToken.objects.exists() and peer.provider.revoked == 2
    row = AuditEvent.objects.get(kind="mcp_oauth", detail__action="disconnected")
    assert row.user == boss and row.detail["for_user_id"] == alice.pk and row.detail["revoked"] is True
    # The form keeps the client secret write-only.
    form = admin.get(f"/admin/agents_mcp/mcpserver/{server.pk}/change/").content.decode()
    assert 'name="oauth_client_secret"' in form and 'type="password"' in form
    # Another URL: nobody's token of the old one is ever sent there — everyone connects again.
    _u, query = consent(browser(alice), "files")
    browser(alice).get("/mcp-oauth/callback/", query)
    assert MCPUserToken.objects.filter(user=alice).exists()
    changed = admin.post(f"/admin/agents_mcp/mcpserver/{server.pk}/change/", {
        "slug": "files", "name": "Files", "enabled": "on", "transport": "streamable_http", "args": "[]",
        "env": "{}", "url": peer.url + "/", "headers": "{}", "allowlist": "[]", "auth": "oauth",
        "oauth_client_id": "", "oauth_scopes": "", "connect_timeout_s": "10", "call_timeout_s": "30",
        "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0", "user_tokens-TOTAL_FORMS": "1",
        "user_tokens-INITIAL_FORMS": "1", "user_tokens-0-id": MCPUserToken.objects.get(user=alice).pk,
        "user_tokens-0-server": server.pk})
    assert changed.status_code == 302, changed.context["errors"]
    assert not MCPUserToken.objects.exists() and not MCPOAuthClient.objects.exists()
    assert AuditEvent.objects.filter(kind="mcp_oauth", detail__action="reset", detail__people=1).exists()


def test_an_expired_connect_card_ends_the_call_and_a_late_callback_resumes_nothing(
        listed, peer, users, openai_provider, fake_openai, sink_for):
    from datetime import UTC, datetime, timedelta

    from agents.approvals.expiry import approvals_expire_due
    from agents.models import ToolCall
    from agents.services import run_create
    from agents.services.decisions import requeue_decided
    from tests.conftest import make_thread, types
    from tests.fakes.openai_server import text_chunks, tool_call_chunks
    from tests.policy.tooltest import call

    bob = users["bob"]
    thread = make_thread(bob, workspaces_of(bob), openai_provider)
    fake_openai.script(tool_call_chunks([call("c1", "echo", {"text": "x"})]), text_chunks("Later then."))
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=bob, content="echo x").run
    card = sink.until_parked(run.pk)[-1]
    client = browser(bob)
    start = client.get(card["connect"]["url"])  # the consent starts, the card expires meanwhile
    ToolCall.objects.filter(pk=card["tool_call_id"]).update(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert approvals_expire_due(requeue=requeue_decided) == [card["tool_call_id"]]
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"
    ledger = ToolCall.objects.get(pk=card["tool_call_id"])
    assert ledger.status == "denied" and ledger.decision == "expired" and "expired" in ledger.summary
    back = httpx2.get(start["Location"], follow_redirects=False).headers["location"]
    assert client.get(back.replace("http://testserver", "")).status_code == 302  # bob is connected now
    assert MCPUserToken.objects.get(user=bob).status == "connected"
    ledger.refresh_from_db()
    assert ledger.status == "denied" and ledger.attempts == 0  # the expired call never ran


def test_an_oauth_servers_question_reaches_its_person_on_their_own_session(peer, users, openai_provider,
                                                                           fake_openai, sink_for):
    """Elicitation on a per-person session (``runtime.call_once``): the card, the answer, the
    values at the server."""
    from agents.services import run_create
    from tests.conftest import make_thread
    from tests.fakes.openai_server import text_chunks, tool_call_chunks
    from tests.policy.tooltest import call

    admin = users["admin"]
    admin.is_staff = True
    admin.save()
    server = oauth_row(peer, allowlist=["book_table"])
    client = browser(admin)
    start = client.get("/mcp-oauth/files/connect/", {"listing": "1"})
    back = httpx2.get(start["Location"], follow_redirects=False).headers["location"]
    assert client.get(back.replace("http://testserver", "")).status_code == 302
    assert sync.refresh(server).health == "connected"
    alice = users["alice"]
    alice_client = browser(alice)
    _auth_url, query = consent(alice_client, "files")
    assert alice_client.get("/mcp-oauth/callback/", query).status_code == 302

    thread = make_thread(alice, workspaces_of(alice), openai_provider)
    fake_openai.script(tool_call_chunks([call("c1", "book_table", {})]), text_chunks("Booked."))
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=alice, content="book it").run
    while (asked := sink.until_any(run.pk))["type"] != "elicitation.requested":
        pass
    assert asked["server_name"] == "Files"
    answered = alice_client.post(f"/api/v1/mcp/elicitations/{asked['elicitation_id']}/", {
        "action": "accept", "content": {"name": "Ann", "size": 3, "seating": "inside", "newsletter": False}},
        content_type="application/json")
    assert answered.status_code == 200, answered.content
    events = sink.until_terminal(run.pk)
    assert events[-1]["type"] == "run.completed"
    assert httpx2.get(peer.base + "/test/state").json()["asked"] == [{"tool": "book_table", "arguments": {
        "action": "accept", "name": "Ann", "size": 3, "seating": "inside", "newsletter": False}}]
