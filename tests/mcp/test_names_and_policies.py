"""External MCP servers under the platform's governance: names (case platform/05), safe
policy defaults, RBAC on offer and invocation, calls reaching the right server."""

from __future__ import annotations

import re

import pytest

from agents.models import ToolPolicy
from agents.pipeline import policy_views, tool_guard, tool_pipeline
from agents.tools import ToolContext, tool_sources
from mcp_client import naming
from mcp_client.models import MCPTool
from tests.conftest import load_case
from tests.mcp.conftest import enable
from tests.mcp.http_server import LONG_NAME

CASE = load_case("platform/05-mcp-tool-names.json")
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_naming_rules_unit():
    names = naming.exposed_names(
        [("github", "search"), ("github", "create_branch"), ("neon", "create_branch"), ("neon", "db.query"),
         ("neon", LONG_NAME), ("lab", "search_knowledge")],
        reserved={"search_knowledge"},
    )
    assert names[("github", "search")] == "search"
    assert names[("github", "create_branch")] == "github__create_branch"
    assert names[("neon", "create_branch")] == "neon__create_branch"
    assert names[("neon", "db.query")] == "neon__db_query"
    assert names[("lab", "search_knowledge")] == "lab__search_knowledge"  # a built-in keeps its name
    long = names[("neon", LONG_NAME)]
    assert len(long) == 64 and long.startswith("neon__summarise_the_quarterly")
    assert re.fullmatch(r".*_[0-9a-f]{8}", long)
    assert all(NAME_RE.match(n) for n in names.values()) and len(set(names.values())) == len(names)
    # stable: the same input gives the same names
    assert naming.exposed_names(list(names)[::-1], reserved={"search_knowledge"}) == names


@pytest.mark.django_db
def test_case_platform_05_two_servers_same_tool_name(http_server, add_server, roles):
    """github: search, create_branch; neon: create_branch, db.query, a 70-char name. The
    role may use neon's create_branch but not github's."""
    assert "neon" in CASE["setup"] and "github" in CASE["setup"]
    github = add_server("github", url=http_server("github").url)
    neon_proc = http_server("neon")
    neon = add_server("neon", url=neon_proc.url)
    assert github.health_status == "connected" and neon.health_status == "connected"

    exposed = {(t.server.slug, t.name): t.exposed_name for t in MCPTool.objects.select_related("server")}
    assert exposed[("github", "search")] == "search"
    assert exposed[("github", "create_branch")] == "github__create_branch"
    assert exposed[("neon", "create_branch")] == "neon__create_branch"
    assert exposed[("neon", "db.query")] == "neon__db_query"
    assert len(exposed[("neon", LONG_NAME)]) == 64
    assert all(NAME_RE.match(n) for n in exposed.values()) and len(set(exposed.values())) == 5
    # nothing dropped: every tool is a spec of the tool sources
    assert set(exposed.values()) <= {s.name for s in tool_sources.all()}

    # Safe defaults: discovered tools are not offered until an admin enables them.
    assert not ToolPolicy.objects.get(tool_name="neon__create_branch").enabled
    offer = tool_pipeline(role_name="member", object_type=None, allow_model_save=False, policies=policy_views())
    assert not set(exposed.values()) & set(offer.names)
    assert offer.excluded["neon__create_branch"] == "disabled by policy"

    enable("neon__create_branch")
    enable("github__create_branch", roles=[roles["admin"]])
    policies = policy_views()
    member = tool_pipeline(role_name="member", object_type=None, allow_model_save=False, policies=policies)
    assert "neon__create_branch" in member.names and "github__create_branch" not in member.names
    assert member.excluded["github__create_branch"] == "role 'member' not allowed"
    admin = tool_pipeline(role_name="admin", object_type=None, allow_model_save=False, policies=policies)
    assert {"neon__create_branch", "github__create_branch"} <= set(admin.names)
    # the guard checks the same (server, tool) pair
    guard = tool_guard(name="github__create_branch", role_name="member", policies=policies, offered=member.names)
    assert guard.kind == "permission_denied" and guard.required_role == "admin"
    assert tool_guard(name="neon__create_branch", role_name="member", policies=policies,
                      offered=member.names).allowed
    assert tool_sources.get("neon__create_branch").origin == ("neon", "create_branch")
    assert tool_sources.get("github__create_branch").origin == ("github", "create_branch")

    # Calling neon__create_branch reaches neon with the original name.
    spec = tool_sources.get("neon__create_branch")
    ctx = ToolContext(workspace_id=1, thread_id="t", user_id=1, run_id="r", role="member")
    assert spec.func(ctx=ctx, name="feature-x") == "neon branch feature-x created"
    assert neon_proc.log() == [{"tool": "create_branch", "arguments": {"name": "feature-x"}}]


@pytest.mark.django_db
def test_defaults_from_annotations_allowlist_and_rename(http_server, add_server):
    lab = add_server("lab", url=http_server("lab").url, allowlist=["echo", "add_note"])
    policies = {p.tool_name: p for p in ToolPolicy.objects.filter(mcp_tool__server=lab)}
    assert policies["echo"].risk == "read" and policies["echo"].approval_mode == "never"
    assert policies["add_note"].risk == "write" and policies["add_note"].approval_mode == "always"
    assert policies["echo"].enabled and policies["add_note"].enabled  # on the allowlist
    assert not policies["count"].enabled
    assert policies["echo"].timeout_s == lab.call_timeout_s
    offer = tool_pipeline(role_name="member", object_type=None, allow_model_save=False, policies=policy_views())
    assert {"echo", "add_note"} <= set(offer.names)
    # off the allowlist: never offered, and a call says why
    enable("count")
    policies_now = policy_views()
    offer = tool_pipeline(role_name="member", object_type=None, allow_model_save=False, policies=policies_now)
    assert "count" not in offer.names and "allowlist" in offer.excluded["count"]
    guard = tool_guard(name="count", role_name="member", policies=policies_now, offered=offer.names)
    assert guard.kind == "unavailable" and "allowlist of MCP server 'lab'" in guard.message

    # A second server offering ``echo``: both become prefixed, and the admin's settings of the
    # first stay with its (server, tool) pair under the new name.
    policy = ToolPolicy.objects.get(tool_name="echo")
    policy.timeout_s = 7
    policy.save()
    add_server("lab2", url=http_server("lab").url)
    renamed = ToolPolicy.objects.get(tool_name="lab__echo")
    assert renamed.pk == policy.pk and renamed.timeout_s == 7 and renamed.enabled
    assert not ToolPolicy.objects.get(tool_name="lab2__echo").enabled
    assert not ToolPolicy.objects.filter(tool_name="echo").exists()
