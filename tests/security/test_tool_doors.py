"""Issue 17, permissions: a write tool with no roles named is for no one; a call aimed at an
object outside the run's scope is refused before any approval card."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from agents.models import ToolCall, ToolPolicy
from agents.pipeline import policy_views, tool_pipeline, tool_policies_sync
from knowledge.models import KnowledgeItem
from knowledge.services import knowledge_item_create
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call, scoped_toolbox

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def box():
    toolbox, scope = scoped_toolbox()
    with scope:
        yield toolbox


def turn(fake, converse, thread, user, calls):
    fake.script(tool_call_chunks(calls), text_chunks("Done."))
    return converse(thread, user, "please")


def test_write_tool_policy_with_no_roles_is_offered_to_no_role(box, roles):
    ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="always")
    ToolPolicy.objects.create(tool_name="records_purge", risk="dangerous", approval_mode="always")
    ToolPolicy.objects.create(tool_name="kb_lookup", risk="read")
    policies = policy_views()
    for role in ("viewer", "member", "admin"):
        offer = tool_pipeline(role_name=role, object_type=None, allow_model_save=True, policies=policies)
        assert "kb_lookup" in offer.names  # read tools: every role
        assert "note_write" not in offer.names and "records_purge" not in offer.names
        assert offer.excluded["note_write"] == f"role {role!r} not allowed"


@pytest.mark.parametrize("username", ["carol", "alice"])
def test_call_of_a_write_tool_whose_policy_names_no_roles_is_denied_never_a_card(
        box, roles, users, workspaces, openai_provider, fake_openai, converse, username):
    ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="always")
    user = users[username]
    thread = make_thread(user, workspaces["demo"], openai_provider)
    run, events = turn(fake_openai, converse, thread, user, [call("c1", "note_write", {"text": "x"})])
    assert "approval.requested" not in types(events)
    denied = next(e for e in events if e["type"] == "permission.denied")
    assert denied["tool"] == "note_write" and denied["required_role"] == ""
    assert ToolCall.objects.get(call_id="c1").status == "permission_denied"
    assert box.calls == []
    assert run.status == "completed"


def test_seeded_knowledge_write_tools_name_members_and_admins(roles):
    ToolPolicy.objects.all().delete()
    tool_policies_sync()
    for name in ("update_knowledge_item", "delete_knowledge_item", "save_to_knowledge"):
        row = ToolPolicy.objects.get(tool_name=name)
        assert set(row.allowed_roles.values_list("name", flat=True)) == {"member", "admin"}, name
    assert not ToolPolicy.objects.get(tool_name="search_knowledge").allowed_roles.exists()


def test_upgrade_names_declared_roles_and_closes_undeclared_write_tools(box, roles):
    """The data migration: an old write policy with no roles (which meant "every role")."""
    ToolPolicy.objects.all().delete()
    update = ToolPolicy.objects.create(tool_name="update_knowledge_item", risk="write")
    unknown = ToolPolicy.objects.create(tool_name="gone_tool", risk="dangerous")
    read = ToolPolicy.objects.create(tool_name="search_knowledge", risk="read")
    migration = importlib.import_module("agents.migrations.0010_write_tools_need_named_roles")
    migration.name_roles_for_write_tools(apps, None)
    assert set(update.allowed_roles.values_list("name", flat=True)) == {"member", "admin"}
    assert not unknown.allowed_roles.exists()  # closed until an admin names roles
    assert not read.allowed_roles.exists()  # read tools keep "every role"


# --- pre-check before approval ---------------------------------------------------------------
@pytest.fixture
def items(users, workspaces):
    return {
        "foreign": knowledge_item_create(workspace=workspaces["other"], owner=users["dave"], title="dave's",
                                         content="other team's notes"),
        "bobs": knowledge_item_create(workspace=workspaces["demo"], owner=users["bob"], title="bob's",
                                      content="bob's notes"),
        "own": knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="alice's",
                                     content="alice's notes"),
    }


@pytest.mark.parametrize(("tool", "target", "extra"), [
    ("update_knowledge_item", "foreign", {"title": "pwned"}),
    ("delete_knowledge_item", "foreign", {}),
    ("update_knowledge_item", "bobs", {"title": "pwned"}),  # same workspace, not alice's to change
    ("delete_knowledge_item", "bobs", {}),
    ("update_knowledge_item", "missing", {"title": "x"}),
])
def test_call_aimed_outside_the_runs_reach_is_refused_before_any_card(
        roles, users, workspaces, items, openai_provider, fake_openai, converse, tool, target, extra):
    item_id = str(items[target].pk) if target in items else "999999"
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = turn(fake_openai, converse, thread, users["alice"], [call("c1", tool, {"item_id": item_id, **extra})])
    assert "approval.requested" not in types(events)
    assert run.status == "completed"
    ledger = ToolCall.objects.get(call_id="c1")
    assert ledger.status == "failed" and "refused" in ledger.summary
    completed = next(e for e in events if e["type"] == "tool.completed")
    assert completed["is_error"] is True
    if target in items:
        items[target].refresh_from_db()
        assert items[target].title != "pwned"
    assert KnowledgeItem.objects.count() == 3


def test_call_on_an_item_the_user_may_change_still_asks_for_approval(
        roles, users, workspaces, items, openai_provider, fake_openai, sink_for):
    from agents.services import run_create

    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(tool_call_chunks([call("c1", "update_knowledge_item",
                                              {"item_id": str(items["own"].pk), "title": "renamed"})]),
                       text_chunks("Done."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="rename it")
    events = sink.until_parked(created.run.pk)
    assert events[-1]["type"] == "approval.requested" and events[-1]["tool"] == "update_knowledge_item"
