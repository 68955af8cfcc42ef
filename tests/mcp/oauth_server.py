"""A real OAuth-protected MCP server with its own authorization server, on loopback in the
test process: the SDK's ``MCPServer`` (streamable HTTP) with ``mcp.server.auth`` — metadata
(RFC 8414 / RFC 9728), dynamic client registration, PKCE, token and revocation endpoints and
bearer verification with the ``resource`` check — over :class:`Provider`, the in-memory
``OAuthAuthorizationServerProvider`` below.

The authorization endpoint shows a small consent page (``GET /consent?ticket=…`` with Allow and
Deny links) unless ``auto_consent`` is set; Allow redirects to the client's ``redirect_uri``
with a code, Deny with ``error=access_denied``. Counters: ``refreshes`` (refresh-token
exchanges), ``exchanges`` (codes), ``revoked``; ``access_ttl_s`` sets the access tokens' life.
Tools: ``whoami`` (the token's subject), ``echo`` and ``count`` (progress notifications).

``OAuthPeer(...).start()`` → ``.url`` (the MCP endpoint), ``.base``; ``.stop()`` — in the test
process, its counters read directly. ``OAuthPeerProcess().start()``: the same server in a process
of its own (``python -m tests.mcp.oauth_server PORT``), for end-to-end tests that should share
nothing with the test process but the network; its counters come from ``GET /test/state``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from html import escape
from pathlib import Path

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse

# Django-free, so this module also runs alone (python -m tests.mcp.oauth_server PORT).
from tests.e2e.harness import free_port, tcp_reachable


class Provider:
    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.tickets: dict[str, tuple[OAuthClientInformationFull, AuthorizationParams]] = {}
        self.refreshes = 0
        self.exchanges = 0
        self.revoked = 0
        self.registrations = 0
        self.access_ttl_s = 3600
        self.auto_consent = True
        self.subject = "alice@example"
        self.last_authorize: AuthorizationParams | None = None
        self.lock = threading.Lock()

    async def get_client(self, client_id: str):
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.registrations += 1
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params: AuthorizationParams) -> str:
        self.last_authorize = params
        ticket = secrets.token_urlsafe(16)
        self.tickets[ticket] = (client, params)
        if self.auto_consent:
            return self.allow(ticket)
        return f"/consent?ticket={ticket}"

    def allow(self, ticket: str) -> str:
        client, params = self.tickets.pop(ticket)
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client.client_id,
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
            subject=self.subject)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    def deny(self, ticket: str) -> str:
        _client, params = self.tickets.pop(ticket)
        return construct_redirect_uri(str(params.redirect_uri), error="access_denied", state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        code = self.codes.get(authorization_code)
        return code if code and code.client_id == client.client_id else None

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, subject: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time() + self.access_ttl_s), resource=resource,
                                          subject=subject)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource,
                                             subject=subject)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.access_ttl_s,
                          refresh_token=refresh, scope=" ".join(scopes) or None)

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:
            raise TokenError("invalid_grant", "code already used")
        self.exchanges += 1
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource,
                           authorization_code.subject)

    async def load_refresh_token(self, client, refresh_token: str):
        token = self.refresh.get(refresh_token)
        return token if token and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        with self.lock:
            self.refreshes += 1
        self.refresh.pop(refresh_token.token, None)  # rotated: each refresh token works once
        return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource,
                           refresh_token.subject)

    async def load_access_token(self, token: str):
        found = self.access.get(token)
        if found is None or (found.expires_at and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token) -> None:
        self.revoked += 1
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    # test controls
    def expire_all_access(self) -> None:
        for token in self.access.values():
            token.expires_at = int(time.time()) - 1

    def revoke_all_refresh(self) -> None:
        self.refresh.clear()


class OAuthPeer:
    def __init__(self) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        self.provider = Provider()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def build(self):
        provider = self.provider
        mcp = MCPServer("oauth-test", auth_server_provider=provider, auth=AuthSettings(
            issuer_url=self.base, resource_server_url=self.url, validate_token_resource=True,
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=["files"],
                                                                  default_scopes=["files"]),
            revocation_options=RevocationOptions(enabled=True), required_scopes=["files"]))

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True), description="Who the token belongs to.")
        def whoami() -> str:
            token = get_access_token()
            return f"subject={token.subject if token else None}"

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True), description="Echo the text back.")
        def echo(text: str) -> str:
            return f"echo: {text}"

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True), description="Count with progress.")
        async def count(n: int, ctx: Context) -> str:
            for i in range(1, n + 1):
                await ctx.report_progress(i, n, f"step {i} of {n}")
            return f"counted to {n}"

        @mcp.custom_route("/consent", methods=["GET"])
        async def consent(request: Request):
            ticket = request.query_params.get("ticket", "")
            if ticket not in provider.tickets:
                return HTMLResponse("unknown ticket", status_code=400)
            choice = request.query_params.get("choice")
            if choice == "allow":
                return RedirectResponse(provider.allow(ticket), status_code=302)
            if choice == "deny":
                return RedirectResponse(provider.deny(ticket), status_code=302)
            t = escape(ticket)
            return HTMLResponse(f"<!doctype html><title>Consent</title><h1>Allow chatplatform?</h1>"
                                f"<a id='allow' href='/consent?ticket={t}&choice=allow'>Allow</a> "
                                f"<a id='deny' href='/consent?ticket={t}&choice=deny'>Deny</a>")

        from tests.mcp.asking import add_asking_tools  # a tool that asks the person (elicitation)

        asked: list[dict] = []
        add_asking_tools(mcp, lambda tool, **facts: asked.append({"tool": tool, "arguments": facts}))

        @mcp.custom_route("/test/state", methods=["GET"])
        async def state(request: Request):
            return JSONResponse({"revoked": provider.revoked, "refreshes": provider.refreshes,
                                 "exchanges": provider.exchanges, "registrations": provider.registrations,
                                 "asked": asked})

        return mcp.streamable_http_app(host="127.0.0.1")

    def start(self) -> OAuthPeer:
        config = uvicorn.Config(self.build(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="oauth-peer", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the OAuth MCP test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)


class OAuthPeerProcess:
    """:class:`OAuthPeer` in a child process (auto-consent; long-lived access tokens)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        self._proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 20.0) -> OAuthPeerProcess:
        root = Path(__file__).resolve().parents[2]
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.mcp.oauth_server", str(self.port)], cwd=root,
                                      env=env, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not tcp_reachable("127.0.0.1", self.port, timeout=0.5):  # until it accepts (or died)
            if self._proc.poll() is not None:
                raise RuntimeError(f"the OAuth MCP test server exited with {self._proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("the OAuth MCP test server did not start")
            time.sleep(0.05)
        return self

    def state(self) -> dict:
        """The server's counters: ``revoked``, ``refreshes``, ``exchanges``, ``registrations``."""
        import httpx

        return httpx.get(f"{self.base}/test/state", timeout=10, trust_env=False).json()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)


if __name__ == "__main__":  # python -m tests.mcp.oauth_server PORT: serve until terminated
    peer = OAuthPeer()
    peer.port = int(sys.argv[1])
    peer.base = f"http://127.0.0.1:{peer.port}"
    peer.url = f"{peer.base}/mcp"
    uvicorn.run(peer.build(), host="127.0.0.1", port=peer.port, log_level="warning", lifespan="on")
