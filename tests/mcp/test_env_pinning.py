"""The environment of a tool call is the send's, never the model's (security review: a model
adding ``"env_id": "dev"`` to an MCP call in a production send turned the production rule
into the plain write rule, and the requester approved her own production write).

A real MCP server (``tests.mcp.http_server``) and the scripted model (the fake OpenAI server)
drive the real loop; runs on SQLite and again on PostgreSQL (``db_backends``)."""

from __future__ import annotations

import pytest

from agents.approvals.defaults import ensure_default_approval_policies
from agents.models import ApprovalPolicy, ToolCall, ToolPolicy
from agents.services import run_create
from mcp_client import sync
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


@pytest.fixture
def rules(db):
    ensure_default_approval_policies(ApprovalPolicy)


@pytest.fixture
def thread(users, workspaces, openai_provider):
    return make_thread(users["alice"], workspaces["demo"], openai_provider)


@pytest.mark.parametrize("model_env", ["dev", "localhost", " dev ", ""])
def test_a_model_named_environment_never_downgrades_a_production_send(
        model_env, rules, http_server, add_server, thread, users, fake_openai, sink_for, api_for):
    lab = http_server("lab")
    add_server("lab", url=lab.url, allowlist=["add_note"])
    # Every write needs approval: in dev the plain "Write" rule (the requester may approve),
    # in production "Production write" (a workspace admin other than the requester).
    ToolPolicy.objects.filter(tool_name="add_note").update(approval_mode="always")
    sync.reconcile()
    asked = {"text": "x", "env_id": model_env, "workspace_id": 999, "user_id": 4242}
    fake_openai.script(tool_call_chunks([call("c1", "add_note", asked)]), text_chunks("Done."))
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=users["alice"], content="add the note", env_id="production").run

    request = sink.until_parked(run.pk)[-1]
    assert request["type"] == "approval.requested"
    assert (request["env_context"], request["rule"]) == ("prod", "Production write")
    assert request["waiting_text"] == "Production write: needs 1 approval from a workspace admin other than alice"
    ledger = ToolCall.objects.get(pk=request["tool_call_id"])
    assert ledger.env_context == "prod" and ledger.approval["rule"] == "Production write"
    # what the model asked is kept as a record, not used; the ledger's scope is the run's
    assert ledger.arguments["model_scope_args"] == {"env_id": model_env, "workspace_id": 999, "user_id": 4242}
    assert ledger.arguments["user_id"] == users["alice"].pk and ledger.arguments["text"] == "x"
    shown = api_for(users["admin"]).get("/api/v1/tool-calls/?status=awaiting_approval").json()["results"]
    assert [row["arguments"] for row in shown] == [{"text": "x"}]

    url = f"/api/v1/tool-calls/{ledger.pk}/decision/"
    refused = api_for(users["alice"]).post(url, {"decision": "approve"}, format="json")
    assert refused.status_code == 403
    assert ToolCall.objects.get(pk=ledger.pk).status == "awaiting_approval"
    assert [e for e in lab.log() if "tool" in e] == []

    assert api_for(users["admin"]).post(url, {"decision": "approve"}, format="json").status_code == 200
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"
    # the scope names the server does not declare never reach it
    assert [e for e in lab.log() if "tool" in e] == [{"tool": "add_note", "arguments": {"text": "x"}}]


def test_a_dev_send_stays_dev_whatever_environment_the_model_names(
        rules, http_server, add_server, thread, users, fake_openai, sink_for, api_for):
    """The other way round: the model cannot raise the stakes either, nor pick a rule."""
    lab = http_server("lab")
    add_server("lab", url=lab.url, allowlist=["add_note"])
    ToolPolicy.objects.filter(tool_name="add_note").update(approval_mode="always")
    sync.reconcile()
    fake_openai.script(tool_call_chunks([call("c1", "add_note", {"text": "y", "env_id": "prod-eu"})]),
                       text_chunks("Done."))
    sink = sink_for(thread.pk)
    run = run_create(thread=thread, user=users["alice"], content="add it", env_id="dev-1").run
    request = sink.until_parked(run.pk)[-1]
    assert (request["env_context"], request["rule"]) == ("dev", "Write")
    response = api_for(users["alice"]).post(f"/api/v1/tool-calls/{request['tool_call_id']}/decision/",
                                            {"decision": "approve"}, format="json")
    assert response.status_code == 200
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"
    assert [e for e in lab.log() if "tool" in e] == [{"tool": "add_note", "arguments": {"text": "y"}}]
