"""Server health (fails to start, hangs on initialise, unreachable), secrets never shown,
tool-definition drift quarantine and review, and the synthetic resource tool."""

from __future__ import annotations

import sys

import pytest

from agents.models import AuditEvent, ToolPolicy
from agents.pipeline import policy_views, tool_guard, tool_pipeline
from agents.tools import ToolContext, tool_sources
from mcp_client import sync
from mcp_client.models import MCPServer, MCPTool
from tests.mcp.conftest import enable, free_port

pytestmark = pytest.mark.django_db

CTX = ToolContext(workspace_id=1, thread_id="t", user_id=1, run_id="r", role="member")


def offer(role="member"):
    return tool_pipeline(role_name=role, object_type=None, allow_model_save=False, policies=policy_views())


def test_a_server_that_fails_to_start_is_skipped_with_its_root_cause(add_server, http_server):
    broken = add_server("broken", command=sys.executable,
                        args=["-c", "import sys; sys.stderr.write('missing API token\\n'); sys.exit(3)"])
    missing = add_server("missing", command="/nonexistent/mcp-server")
    lab = add_server("lab", url=http_server("lab").url, allowlist=["echo"])
    assert broken.health_status.startswith("failed:") and "missing API token" in broken.health_status
    assert missing.health_status.startswith("failed:") and "No such file" in missing.health_status
    assert broken.health_checked_at is not None
    assert lab.health_status == "connected"
    # the chat keeps working with the rest: built-ins and the healthy server's tools
    names = offer().names
    assert "echo" in names and "search_knowledge" in names


def test_a_server_that_hangs_on_initialise_times_out(add_server):
    row = add_server("sleepy", command=sys.executable, args=["-c", "import time; time.sleep(120)"],
                     connect_timeout_s=1)
    assert row.health_status == "failed: initialise/list: timed out"


def test_unset_variable_and_unreachable_url(add_server, monkeypatch, settings):
    settings.MCP_ENV_ALLOWLIST = ["LAB_TEST_UNSET_VAR", "LAB_TEST_TOKEN"]
    monkeypatch.delenv("LAB_TEST_UNSET_VAR", raising=False)
    row = add_server("cfg", url="http://127.0.0.1:1/mcp", headers={"X-Token": "${LAB_TEST_UNSET_VAR}"})
    assert row.health_status == "failed: ${LAB_TEST_UNSET_VAR} is not set in the platform's environment"
    port = free_port()
    monkeypatch.setenv("LAB_TEST_TOKEN", "s3cret-from-env")
    row = add_server("down", url=f"http://127.0.0.1:{port}/mcp?key=${{LAB_TEST_TOKEN}}",
                     headers={"Authorization": "Bearer ${LAB_TEST_TOKEN}"})
    assert row.health_status.startswith("failed:")
    assert "s3cret-from-env" not in row.health_status


def test_secret_headers_are_sent_but_never_shown(add_server, http_server, admin_client, monkeypatch, caplog):
    lab = http_server("lab")
    row = MCPServer(slug="lab", name="Lab", transport="streamable_http", url=lab.url, enabled=True)
    sync.secret_headers_store(row, {"Authorization": "Bearer top-secret-value"})
    row.save()
    config = sync.server_config(row)
    assert ("Authorization", "Bearer top-secret-value") in config.headers  # what is sent
    assert "top-secret-value" not in row.secret_headers_encrypted
    report = sync.refresh(row)
    assert report.health == "connected"
    page = admin_client.get(f"/admin/agents_mcp/mcpserver/{row.pk}/change/").content.decode()
    assert "top-secret-value" not in page and "Authorization" in page  # the header's name only
    listing = admin_client.post("/admin/agents_mcp/mcpserver/", {"action": "connect_and_list",
                                                                "_selected_action": [row.pk]}).content.decode()
    assert "top-secret-value" not in listing and "echo" in listing
    assert "top-secret-value" not in caplog.text


def test_drift_quarantines_an_enabled_tool_until_an_admin_approves(add_server, http_server, admin_user):
    lab = http_server("lab")
    server = add_server("lab", url=lab.url)
    enable("drifty")
    assert "drifty" in offer().names
    approved = MCPTool.objects.get(server=server, name="drifty").approved_hash

    lab.drift()
    sync.refresh(server)
    tool = MCPTool.objects.get(server=server, name="drifty")
    assert tool.quarantined and tool.approved_hash == approved and tool.current_hash != approved
    assert "evil.example" in tool.current_definition["description"]
    assert "evil.example" not in tool.approved_definition["description"]
    audit = AuditEvent.objects.get(kind="mcp_tool_quarantined")
    assert audit.tool_name == "drifty" and audit.detail["server"] == "lab"
    assert audit.detail["old_hash"] == approved and audit.detail["new_hash"] == tool.current_hash

    now = offer()
    assert "drifty" not in now.names and "quarantined" in now.excluded["drifty"]
    guard = tool_guard(name="drifty", role_name="member", policies=policy_views(), offered=now.names)
    assert guard.kind == "unavailable" and "an administrator must review the change" in guard.message
    # the model-facing description is still the approved one while quarantined
    assert "evil.example" not in tool_sources.get("drifty").description

    sync.approve_definition(tool, admin_user)
    sync.reconcile()
    assert "drifty" in offer().names and "evil.example" in tool_sources.get("drifty").description
    review = AuditEvent.objects.get(kind="mcp_tool_reviewed")
    assert review.user == admin_user and review.detail["new_hash"] == tool.current_hash


def test_drift_of_a_tool_never_enabled_is_taken_silently(add_server, http_server):
    lab = http_server("lab")
    server = add_server("lab", url=lab.url)
    lab.drift()
    sync.refresh(server)
    tool = MCPTool.objects.get(server=server, name="drifty")
    assert not tool.quarantined and tool.approved_hash == tool.current_hash
    assert not AuditEvent.objects.filter(kind="mcp_tool_quarantined").exists()


def test_resources_through_the_synthetic_read_tool(add_server, http_server):
    add_server("lab", url=http_server("lab").url)
    spec = tool_sources.get("get_context")
    assert spec is not None and spec.risk == "read"
    assert spec.parameters["properties"]["uri"]["enum"] == ["lab://readme"]
    assert "lab://readme" in spec.description and "The lab's readme." in spec.description
    assert spec.func(ctx=CTX, uri="lab://readme") == "The lab readme: be careful with die_write."
    assert "get_context" in offer().names
    assert ToolPolicy.objects.get(tool_name="get_context").risk == "read"


def test_environment_binding_classifies_every_call(add_server, http_server):
    from agents.models import Environment

    prod = Environment.objects.create(name="eu-main", tier="prod")
    add_server("lab", url=http_server("lab").url, allowlist=["add_note"], environment=prod)
    assert tool_sources.get("add_note").env_name == "eu-main"


def test_a_new_url_is_listed_afresh_and_deleting_a_server_removes_its_policies(add_server, http_server):
    from tests.mcp.http_server import LONG_NAME

    server = add_server("ext", url=http_server("github").url)
    assert {t.name for t in MCPTool.objects.filter(server=server, present=True)} == {"search", "create_branch"}
    server.url = http_server("neon").url
    server.save()
    sync.refresh(server)
    assert {t.name for t in MCPTool.objects.filter(server=server, present=True)} == {
        "create_branch", "db.query", LONG_NAME}
    assert tool_sources.get("search") is None  # gone from the server: no longer offered
    policy_ids = list(MCPTool.objects.filter(server=server).values_list("policy_id", flat=True))
    assert len(policy_ids) == 4 and None not in policy_ids
    server.delete()
    assert not ToolPolicy.objects.filter(pk__in=policy_ids).exists()
    sync.reconcile()
    assert tool_sources.get("create_branch") is None
