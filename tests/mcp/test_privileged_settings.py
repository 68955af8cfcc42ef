"""Only superusers may make the platform run a command or read its environment through an
MCP server (stdio command/args/env, ``${VAR}``), and ``${VAR}`` reaches only allowlisted
variables, never the platform's own. Real admin POSTs; real stdio / HTTP MCP servers."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError

from agents.models import AuditEvent
from mcp_client import sync, trust
from mcp_client.models import MCPServer
from mcp_client.runtime import runtime

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
STDIO_SERVER = str(ROOT / "tests" / "mcp" / "stdio_server.py")
FORMSET = {"tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0"}


@pytest.fixture
def staff_client(client):
    """A staff user holding every MCP-server and MCP-tool admin permission, and nothing else."""
    user = get_user_model().objects.create_user("mcp-staff", password="pw-staff-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="agents_mcp"))
    client.force_login(user)
    return client


def stdio_form(**overrides) -> dict:
    data = {"slug": "box", "name": "Box", "enabled": "", "transport": "stdio", "command": "id", "args": "[]",
            "env": "{}", "url": "", "headers": "{}", "allowlist": "[]", "connect_timeout_s": "15",
            "call_timeout_s": "30", **FORMSET}
    data.update(overrides)
    return data


def http_form(url: str, **overrides) -> dict:
    data = {"slug": "web", "name": "Web", "enabled": "", "transport": "streamable_http", "url": url,
            "headers": "{}", "allowlist": "[]", "connect_timeout_s": "15", "call_timeout_s": "30", **FORMSET}
    data.update(overrides)
    return data


def call(slug: str, tool: str, **arguments) -> str:
    result = runtime.call(slug, tool, arguments, timeout_s=15, cancelled=threading.Event(), progress=lambda _: None)
    return result.content[0].text


def test_staff_with_only_mcp_permissions_cannot_add_a_stdio_server(staff_client):
    page = staff_client.get("/admin/agents_mcp/mcpserver/add/")
    assert page.status_code == 200
    assert 'name="command"' not in page.content.decode()  # read-only for them
    response = staff_client.post("/admin/agents_mcp/mcpserver/add/", stdio_form())
    html = response.content.decode()
    assert response.status_code == 200
    assert "Only a superuser may configure a stdio server" in html
    assert not MCPServer.objects.exists()
    assert not AuditEvent.objects.filter(kind="mcp_server_changed").exists()
    denied = AuditEvent.objects.get(kind="permission_denied")
    assert denied.user.username == "mcp-staff" and denied.detail["server"] == "box"
    assert denied.detail["reason"].startswith("Only a superuser may configure a stdio server")


def test_staff_cannot_use_variable_expansion_or_turn_a_server_into_stdio(staff_client, http_server):
    url = http_server("lab").url
    response = staff_client.post("/admin/agents_mcp/mcpserver/add/",
                                 http_form(url, headers=json.dumps({"X-Key": "${OPENAI_API_KEY}"})))
    assert response.status_code == 200
    assert "Only a superuser may set ${VAR} expansion" in response.content.decode()
    assert not MCPServer.objects.exists()
    assert AuditEvent.objects.get(kind="permission_denied").detail["action"] == "mcp_server_privileged"
    # a plain HTTP server is theirs to add; turning it into a stdio server is not
    assert staff_client.post("/admin/agents_mcp/mcpserver/add/", http_form(url)).status_code == 302
    server = MCPServer.objects.get(slug="web")
    response = staff_client.post(f"/admin/agents_mcp/mcpserver/{server.pk}/change/",
                                 http_form(url, transport="stdio", command="id"))
    assert response.status_code == 200
    assert "Only a superuser may configure a stdio server" in response.content.decode()
    server.refresh_from_db()
    assert server.transport == "streamable_http" and server.command == ""


def test_staff_cannot_change_a_stdio_servers_command_and_sees_env_values_masked(staff_client, add_server):
    server = add_server("box", command=sys.executable, args=[STDIO_SERVER], env={"TOKEN": "literal-s3cret"},
                        refresh=False, enabled=False)
    html = staff_client.get(f"/admin/agents_mcp/mcpserver/{server.pk}/change/").content.decode()
    assert "TOKEN=••••" in html and "literal-s3cret" not in html
    assert 'name="command"' not in html and 'name="env"' not in html
    response = staff_client.post(f"/admin/agents_mcp/mcpserver/{server.pk}/change/", stdio_form(
        name="Box renamed", call_timeout_s="60", command="id", args='["-u"]', env='{"X": "${DATABASE_URL}"}'))
    assert response.status_code == 302
    server.refresh_from_db()
    # what they may change changed; the command, args and env did not, and it still runs
    assert server.name == "Box renamed"
    assert (server.command, server.args, server.env) == (sys.executable, [STDIO_SERVER], {"TOKEN": "literal-s3cret"})
    assert trust.is_signed(server)
    row = AuditEvent.objects.get(kind="mcp_server_changed")
    assert row.user.username == "mcp-staff" and row.detail["fields"] == ["name"]


def test_model_clean_refuses_privileged_changes_from_anyone_but_a_superuser(django_user_model):
    staff = django_user_model.objects.create_user("s", is_staff=True)
    boss = django_user_model.objects.create_superuser("boss", password="pw-boss-123")
    row = MCPServer(slug="box", name="Box", transport="stdio", command="id")
    for actor in (None, staff):
        row._actor = actor
        with pytest.raises(ValidationError, match="Only a superuser may set a stdio server's command"):
            row.full_clean()
    row._actor = boss
    row.full_clean()
    assert trust.is_signed(row)
    row.save()
    row.args = ["-u"]  # a later change by no one in particular breaks the signature
    row._actor = None
    with pytest.raises(ValidationError):
        row.full_clean()


def test_superuser_adds_a_stdio_server_and_it_gets_only_the_allowed_env(admin_client, settings, monkeypatch):
    settings.MCP_ENV_ALLOWLIST = ["LAB_SERVICE_TOKEN"]
    monkeypatch.setenv("LAB_SERVICE_TOKEN", "token-for-the-box")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-platform-key")
    monkeypatch.setenv("DATABASE_URL", "postgres://platform:pw@db/chat")
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pw")
    response = admin_client.post("/admin/agents_mcp/mcpserver/add/", stdio_form(
        enabled="on", command=sys.executable, args=json.dumps([STDIO_SERVER]),
        env=json.dumps({"BOX_GREETING": "hello", "BOX_TOKEN": "${LAB_SERVICE_TOKEN}"})))
    assert response.status_code == 302, response.content.decode()[:3000]
    server = MCPServer.objects.get(slug="box")
    assert trust.is_signed(server)
    audit = AuditEvent.objects.get(kind="mcp_server_changed")
    assert audit.user.username == "admin" and audit.detail["action"] == "added" and audit.detail["privileged"]
    report = sync.refresh(server)
    assert report.health == "connected"
    env = json.loads(call("box", "environment"))
    assert env["BOX_GREETING"] == "hello" and env["BOX_TOKEN"] == "token-for-the-box"
    for name in ("OPENAI_API_KEY", "DATABASE_URL", "DEMO_PASSWORD", "SECRET_KEY", "LAB_SERVICE_TOKEN"):
        assert name not in env
    assert "sk-platform-key" not in json.dumps(env)


def test_a_row_no_superuser_signed_never_runs(add_server, tmp_path):
    marker = tmp_path / "ran"
    script = f"open({str(marker)!r}, 'w').write('x')"
    row = add_server("fixture", command=sys.executable, args=["-c", script], signed=False)
    assert row.health_status == ("failed: a stdio server's command, args or env was not set by a superuser; "
                                 "a superuser must review and save this server")
    assert not marker.exists()
    # signed, then changed behind the admin's back (shell, fixture, SQL): refused again
    ok = add_server("box", command=sys.executable, args=[STDIO_SERVER])
    assert ok.health_status == "connected"
    MCPServer.objects.filter(pk=ok.pk).update(args=["-c", script])
    sync.refresh(MCPServer.objects.get(pk=ok.pk))
    assert MCPServer.objects.get(pk=ok.pk).health_status.startswith("failed: a stdio server's command")
    assert not marker.exists()


def test_expansion_allowlist_both_ways(add_server, http_server, settings, monkeypatch, admin_client):
    lab = http_server("lab")
    monkeypatch.setenv("LAB_SERVICE_TOKEN", "lab-token-1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-platform-key")
    # listed: expanded and sent
    settings.MCP_ENV_ALLOWLIST = ["LAB_SERVICE_TOKEN"]
    ok = add_server("ok", url=lab.url, headers={"X-Token": "${LAB_SERVICE_TOKEN}"})
    assert ok.health_status == "connected"
    # not listed (any more): the connection fails with a clear status, nothing is sent
    settings.MCP_ENV_ALLOWLIST = []
    off = add_server("off", url=lab.url + "?k=${LAB_SERVICE_TOKEN}")
    assert off.health_status == "failed: ${LAB_SERVICE_TOKEN} is not in MCP_ENV_ALLOWLIST"
    # the platform's own: refused even when listed, at save time and at connection time
    settings.MCP_ENV_ALLOWLIST = ["OPENAI_API_KEY", "DATABASE_URL", "SECRET_KEY"]
    own = add_server("own", url=lab.url, headers={"Authorization": "Bearer ${OPENAI_API_KEY}"})
    assert own.health_status == ("failed: ${OPENAI_API_KEY} is one of the platform's own settings and is never "
                                 "passed to an MCP server")
    response = admin_client.post("/admin/agents_mcp/mcpserver/add/",
                                 http_form(lab.url, slug="leak", headers=json.dumps({"X": "${DATABASE_URL}"})))
    assert response.status_code == 200
    assert "${DATABASE_URL} is one of the platform&#x27;s own settings" in response.content.decode()
    assert not MCPServer.objects.filter(slug="leak").exists()


def test_every_documented_platform_variable_is_refused(settings):
    settings.MCP_ENV_ALLOWLIST = []
    names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert {"SECRET_KEY", "DATABASE_URL", "OPENAI_API_KEY", "DEMO_PASSWORD", "FIELD_ENCRYPTION_KEY"} <= names
    settings.MCP_ENV_ALLOWLIST = sorted(names)
    allowed = [n for n in names if not trust.variable_refusal(n).endswith("never passed to an MCP server")]
    assert allowed == []


def test_a_fixture_loaded_by_anyone_cannot_bring_a_command_or_a_variable(tmp_path, settings, monkeypatch):
    settings.MCP_ENV_ALLOWLIST = ["LAB_SERVICE_TOKEN"]
    monkeypatch.setenv("LAB_SERVICE_TOKEN", "lab-token-1")
    marker = tmp_path / "ran"
    fixture = tmp_path / "servers.json"
    fixture.write_text(json.dumps([
        {"model": "agents_mcp.mcpserver", "pk": 901, "fields": {
            "slug": "evil", "name": "Evil", "transport": "stdio", "command": sys.executable,
            "args": ["-c", f"open({str(marker)!r}, 'w').write('x')"], "env": {}, "enabled": True,
            "privileged_signature": "0" * 64, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z"}},
        {"model": "agents_mcp.mcpserver", "pk": 902, "fields": {
            "slug": "leaky", "name": "Leaky", "transport": "streamable_http", "url": "http://127.0.0.1:1/mcp",
            "headers": {"X": "${LAB_SERVICE_TOKEN}"}, "enabled": True, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z"}},
    ]))
    from django.core.management import call_command

    call_command("loaddata", str(fixture), verbosity=0)
    sync.reconcile()
    evil, leaky = MCPServer.objects.get(slug="evil"), MCPServer.objects.get(slug="leaky")
    assert evil.health_status.startswith("failed: a stdio server's command, args or env was not set by a superuser")
    assert leaky.health_status.startswith("failed: ${VAR} expansion was not set by a superuser")
    assert runtime.connection("evil") is None and runtime.connection("leaky") is None
    assert not marker.exists()
