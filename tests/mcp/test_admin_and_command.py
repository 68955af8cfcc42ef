"""The admin pages and ``manage.py mcp_refresh``."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from agents.models import AuditEvent
from mcp_client import sync
from mcp_client.models import MCPServer, MCPTool
from tests.mcp.conftest import enable

pytestmark = pytest.mark.django_db


def test_connect_and_list_shows_tools_schema_annotations_health_and_warns(admin_client, add_server, http_server):
    lab = add_server("lab", url=http_server("lab").url, refresh=False)
    page = admin_client.post("/admin/agents_mcp/mcpserver/", {"action": "connect_and_list",
                                                              "_selected_action": [lab.pk]})
    html = page.content.decode()
    assert page.status_code == 200
    assert "treat them as untrusted text" in html
    assert "connected" in html and "Count to n, reporting progress." in html
    assert "&quot;readOnlyHint&quot;: true" in html  # annotations, escaped
    assert "&quot;text&quot;" in html  # echo's input schema
    assert "style=" not in html.split('id="content"', 1)[1] and "chat/admin-mcp.css" in html  # CSP: no inline styles
    assert MCPServer.objects.get(pk=lab.pk).health_checked_at is not None


def test_untrusted_description_is_escaped_and_drift_is_reviewed_side_by_side(admin_client, add_server, http_server):
    proc = http_server("lab")
    server = add_server("lab", url=proc.url)
    enable("drifty")
    proc.drift()
    sync.refresh(server)
    tool = MCPTool.objects.get(server=server, name="drifty")
    assert tool.quarantined
    html = admin_client.get(f"/admin/agents_mcp/mcptool/{tool.pk}/change/").content.decode()
    assert "approved" in html and "offered now (changed lines marked)" in html
    assert "Look up a fact.&quot;" in html and "evil.example" in html  # both definitions shown
    # The site's CSP allows no inline styles: the layout comes from a stylesheet (issue 54),
    # and the changed lines are marked on both sides.
    assert "style=" not in html.split('id="content"', 1)[1]
    assert "chat/admin-mcp.css" in html and 'class="mcp-drift"' in html
    changed = [line for line in html.split("\n") if 'class="line changed"' in line]
    assert any("evil.example" in line for line in changed) and any("Look up a fact." in line for line in changed)
    response = admin_client.post("/admin/agents_mcp/mcptool/", {"action": "approve_definition",
                                                                "_selected_action": [tool.pk]})
    assert response.status_code == 302
    tool.refresh_from_db()
    assert not tool.quarantined and tool.approved_hash == tool.current_hash
    assert AuditEvent.objects.filter(kind="mcp_tool_reviewed", user__username="admin").count() == 1


def test_secret_headers_form_is_write_only(admin_client, http_server):
    url = http_server("lab").url
    response = admin_client.post("/admin/agents_mcp/mcpserver/add/", {
        "slug": "lab", "name": "Lab", "enabled": "", "transport": "streamable_http", "command": "", "args": "[]",
        "env": "{}", "url": url, "headers": "{}", "allowlist": "[]", "connect_timeout_s": "10",
        "call_timeout_s": "30", "secret_headers": "X-Api-Key: very-secret-123",
        "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    server = MCPServer.objects.get(slug="lab")
    assert sync.secret_headers(server) == {"X-Api-Key": "very-secret-123"}
    html = admin_client.get(f"/admin/agents_mcp/mcpserver/{server.pk}/change/").content.decode()
    assert "very-secret-123" not in html and "X-Api-Key: ••••" in html
    bad = admin_client.post("/admin/agents_mcp/mcpserver/add/", {
        "slug": "bad", "name": "Bad", "transport": "streamable_http", "url": "", "args": "[]", "env": "{}",
        "headers": "{}", "allowlist": "[]", "connect_timeout_s": "10", "call_timeout_s": "30",
        "secret_headers": "no colon here", "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0",
    })
    html = bad.content.decode()
    assert bad.status_code == 200 and "A streamable HTTP server needs a URL." in html
    assert "Header-Name: value" in html


def test_mcp_refresh_command(add_server, http_server):
    add_server("lab", url=http_server("lab").url, allowlist=["echo"], refresh=False)
    out = io.StringIO()
    call_command("mcp_refresh", "lab", stdout=out)
    text = out.getvalue()
    assert text.startswith("lab (enabled): connected")
    assert "  echo → echo [read, enabled]" in text and "  add_note → add_note [write, off]" in text
    with pytest.raises(CommandError, match="no MCP server nope"):
        call_command("mcp_refresh", "nope")
    add_server("down", command="/nonexistent/server", refresh=False)
    with pytest.raises(CommandError, match="1 server"):
        call_command("mcp_refresh", "down", stdout=io.StringIO())


def test_listing_a_disabled_server_offers_nothing(add_server, http_server):
    from agents.tools import tool_sources

    server = add_server("lab", url=http_server("lab").url, enabled=False, refresh=False)
    out = io.StringIO()
    call_command("mcp_refresh", "lab", stdout=out)
    assert out.getvalue().startswith("lab (disabled): connected")
    tools = MCPTool.objects.filter(server=server)
    assert tools.filter(name="echo").exists()
    assert not tools.exclude(exposed_name="").exists() and not tools.exclude(policy=None).exists()
    sync.reconcile()
    assert not any(s.source == "mcp:lab" for s in tool_sources.all())
    assert MCPServer.objects.get(pk=server.pk).health_status == "connected"
