"""Fixtures for the MCP tests: real MCP servers only.

* ``http_server(flavour)`` — the tests' own streamable-HTTP server (``tests.mcp.http_server``)
  as a real process on a free loopback port; ``.url``, ``.log()``, ``.drift()``, ``.kill()``.
* ``mcp_server_row(...)`` — an ``MCPServer`` row, connected and listed (``sync.refresh``).
* every test ends with ``sync.reset()``: connections closed, server processes stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mcp_client import sync, trust
from mcp_client.models import MCPServer

ROOT = Path(__file__).resolve().parents[2]
NPM_CACHE = ROOT / "var" / "mcp-npm"
NPM_PACKAGES = ("@modelcontextprotocol/server-everything", "@modelcontextprotocol/server-filesystem")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    def __init__(self, flavour: str, env: dict | None = None) -> None:
        self.flavour = flavour
        self.env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> HttpServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp.http_server", self.flavour, str(self.port)],
            cwd=ROOT, env={**os.environ, **self.env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                assert self.proc.poll() is None, f"MCP test server {self.flavour} exited early"
                time.sleep(0.05)
        raise RuntimeError(f"MCP test server {self.flavour} did not start")

    def log(self) -> list[dict]:
        with urllib.request.urlopen(self.base + "/control/log", timeout=5) as response:
            return json.loads(response.read())

    def drift(self) -> None:
        req = urllib.request.Request(self.base + "/control/drift", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=5).read()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def http_server():
    started: list[HttpServer] = []

    def start(flavour: str, env: dict | None = None) -> HttpServer:
        server = HttpServer(flavour, env).start()
        started.append(server)
        return server

    yield start
    sync.reset()  # close the sessions before their servers go
    for server in started:
        server.stop()


@pytest.fixture(autouse=True)
def mcp_clean():
    sync.reset()
    yield
    sync.reset()


@pytest.fixture
def add_server(db):
    """``add_server(slug, url=… | command=…, args=[…], **fields)`` → the row, connected and
    listed (its health says why when it is not); its stdio command and ``${VAR}`` settings
    signed as a superuser's save would (``signed=False``: as written by any other path)."""

    def add(slug: str, *, refresh: bool = True, signed: bool = True, **fields) -> MCPServer:
        if "url" in fields:
            fields.setdefault("transport", MCPServer.Transport.STREAMABLE_HTTP)
        fields.setdefault("enabled", True)
        fields.setdefault("connect_timeout_s", 15)
        row = MCPServer(slug=slug, name=slug.title(), **fields)
        if signed:
            trust.sign(row)
        row.save()
        if refresh:
            sync.refresh(row)
            row.refresh_from_db()
        return row

    return add


def enable(*names: str, roles=None) -> None:
    """Enable the named tools' policies as an admin would: a write or dangerous tool also gets
    roles (member and admin unless ``roles`` says otherwise) — with none named it is for no one."""
    from agents.models import Role, ToolPolicy

    for name in names:
        policy = ToolPolicy.objects.get(tool_name=name)
        policy.enabled = True
        policy.save()
        named = roles
        if named is None and policy.risk != "read":
            named = list(Role.objects.filter(name__in=("member", "admin")))
        if named is not None:
            policy.allowed_roles.set(named)
    sync.reconcile()


def npm_packages() -> Path:
    """Install the reference npm MCP servers into ``var/mcp-npm`` once (npm's own cache);
    skip when npm cannot reach its registry and CI is not ``true``."""
    marker = NPM_CACHE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "package.json"
    if marker.exists() and (NPM_CACHE / "node_modules" / "@modelcontextprotocol" / "server-filesystem").exists():
        return NPM_CACHE
    npm = shutil.which("npm")
    ci = os.environ.get("CI") == "true"
    if npm is None:
        if ci:
            pytest.fail("npm is not installed (required with CI=true)")
        pytest.skip("npm is not installed")
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(NPM_CACHE), *NPM_PACKAGES],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        if ci:
            pytest.fail(f"npm install of the MCP reference servers failed: {result.stderr[-500:]}")
        pytest.skip(f"npm registry unreachable: {result.stderr.strip().splitlines()[-1:]}")
    return NPM_CACHE
