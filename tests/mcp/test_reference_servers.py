"""The reference MCP servers, unmodified, as stdio tool sources: ``mcp-server-time`` and
``mcp-server-git`` from PyPI (dev dependencies), ``@modelcontextprotocol/server-everything``
and ``@modelcontextprotocol/server-filesystem`` from npm (installed into ``var/mcp-npm``)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from agents.models import ToolCall, ToolPolicy
from agents.pipeline import policy_views, tool_pipeline
from agents.services import run_create
from agents.tools import ToolContext, tool_sources
from mcp_client import sync
from mcp_client.models import MCPTool
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.mcp.conftest import enable, npm_packages
from tests.policy.tooltest import call

BIN = Path(sys.executable).parent
CTX = ToolContext(workspace_id=1, thread_id="t", user_id=1, run_id="r", role="member")


def offer(role="member"):
    return tool_pipeline(role_name=role, object_type=None, allow_model_save=False, policies=policy_views())


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "Test")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    git(path, "commit", "-qm", "first")
    return path


@pytest.mark.django_db
def test_time_server_read_only_tools(add_server):
    server = add_server("time", command=str(BIN / "mcp-server-time"), args=["--local-timezone", "UTC"],
                        allowlist=["get_current_time", "convert_time"])
    assert server.health_status == "connected"
    names = {t.name: t for t in MCPTool.objects.filter(server=server)}
    assert set(names) == {"get_current_time", "convert_time"}
    for tool in names.values():
        assert tool.policy.risk == "read" and tool.policy.enabled  # readOnlyHint → read; allowlisted
        assert tool.current_definition["annotations"]["readOnlyHint"] is True
    assert {"get_current_time", "convert_time"} <= set(offer().names)
    out = json.loads(tool_sources.get("get_current_time").func(ctx=CTX, timezone="Europe/Berlin"))
    assert out["timezone"] == "Europe/Berlin" and "datetime" in out
    converted = json.loads(tool_sources.get("convert_time").func(
        ctx=CTX, source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"))
    assert converted["target"]["datetime"].split("T")[1].startswith("21:00")


@pytest.mark.django_db(transaction=True)
def test_git_server_reads_run_and_a_commit_needs_approval(add_server, repo, users, workspaces, openai_provider,
                                                          fake_openai, sink_for):
    server = add_server("git", command=str(BIN / "mcp-server-git"), args=["--repository", str(repo)])
    assert server.health_status == "connected"
    risks = {t.name: t.policy.risk for t in MCPTool.objects.filter(server=server).select_related("policy")}
    assert risks["git_status"] == "read" and risks["git_commit"] == "write" and risks["git_reset"] == "dangerous"
    enable("git_status", "git_add", "git_commit")
    ToolPolicy.objects.filter(tool_name="git_add").update(approval_mode="never")
    sync.reconcile()

    (repo / "notes.txt").write_text("a note\n")
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(
        tool_call_chunks([call("c1", "git_status", {"repo_path": str(repo)}),
                          call("c2", "git_add", {"repo_path": str(repo), "files": ["notes.txt"]}),
                          call("c3", "git_commit", {"repo_path": str(repo), "message": "Add a note"})]),
        text_chunks("Committed."),
    )
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=users["alice"], content="commit my note").run
    events = sink.until_parked(run.pk)
    request = events[-1]
    assert request["tool"] == "git_commit" and request["risk_level"] == "guarded"
    status = ToolCall.objects.get(run=run, tool_name="git_status")
    assert status.status == "succeeded" and "notes.txt" in status.result
    assert git(repo, "log", "--format=%s").split() == ["first"]  # nothing committed yet
    client = APIClient()
    client.force_authenticate(users["alice"])
    assert client.post(f"/api/v1/tool-calls/{request['tool_call_id']}/decision/", {"decision": "approve"},
                       format="json").status_code == 200
    rest = sink.until_terminal(run.pk)
    assert types(rest)[-1] == "run.completed"
    assert git(repo, "log", "--format=%s").splitlines() == ["Add a note", "first"]
    assert ToolCall.objects.get(pk=request["tool_call_id"]).status == "succeeded"


@pytest.mark.django_db
def test_everything_server_progress_resources_annotations(add_server):
    root = npm_packages()
    entry = root / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    server = add_server("everything", command="node", args=[str(entry), "stdio"], connect_timeout_s=30)
    assert server.health_status == "connected", server.health_status
    tools = {t.name: t for t in MCPTool.objects.filter(server=server).select_related("policy")}
    assert tools["trigger-long-running-operation"].current_definition["annotations"]["readOnlyHint"] is True
    assert tools["trigger-long-running-operation"].policy.risk == "read"
    assert tools["toggle-simulated-logging"].policy.risk == "write"  # readOnlyHint false, not destructive
    assert all(t.policy.risk == sync.proposed_risk(t.current_definition["annotations"]) for t in tools.values())
    assert not any(t.policy.enabled for t in tools.values())  # nothing offered until enabled
    # progress notifications reach ctx.progress
    enable("trigger-long-running-operation", "get-tiny-image")
    labels: list[str] = []
    ctx = dataclasses.replace(CTX, progress=lambda label, status="running": labels.append(label))
    result = tool_sources.get("trigger-long-running-operation").func(ctx=ctx, duration=1, steps=3)
    assert "completed" in result.lower() and len(labels) == 3
    # an image result becomes a short description, never its bytes
    image = tool_sources.get("get-tiny-image").func(ctx=CTX)
    assert "[image (image/png," in image and "not shown" in image
    # resources through the synthetic read tool
    reader = tool_sources.get("get_context")
    uris = reader.parameters["properties"]["uri"]["enum"]
    assert uris
    text_uri = next((u for u in uris if "static/resource/1" in u or "text" in u.lower()), uris[0])
    assert reader.func(ctx=CTX, uri=text_uri)


@pytest.mark.django_db
def test_filesystem_server_reads_and_writes_need_approval(add_server, tmp_path):
    root = npm_packages()
    entry = root / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("hello from disk\n")
    server = add_server("fs", command="node", args=[str(entry), str(shared)], connect_timeout_s=30)
    assert server.health_status == "connected", server.health_status
    tools = {t.name: t for t in MCPTool.objects.filter(server=server).select_related("policy")}
    reader = "read_text_file" if "read_text_file" in tools else "read_file"
    assert tools[reader].policy.risk == "read"
    assert tools["write_file"].policy.risk in ("write", "dangerous")
    assert tools["write_file"].policy.approval_mode == "always"
    enable(tools[reader].exposed_name)
    text = tool_sources.get(tools[reader].exposed_name).func(ctx=CTX, path=str(shared / "hello.txt"))
    assert text.strip() == "hello from disk"
