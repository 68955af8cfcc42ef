"""Policy simulation on a seeded history (policies.demo_history): the live set reproduces the
recorded decisions; tightening the demo's write rule changes exactly the calls it should."""

from __future__ import annotations

import pytest

from agents.models import ApprovalPolicy, ToolCall, ToolPolicy
from agents.policy_set import CallFacts, call_decide, policy_set_from_snapshot, policy_snapshot
from policies.demo_history import seed_history
from policies.services import draft_create, simulation_run
from policies.simulation import summary
from tests.conftest import make_thread

TIGHTEN = {
    "approval_rules": {"Write": {"approver_kind": "workspace_admins", "requester_counts": False}},
    "tool_policies": {"save_to_knowledge": {"approval_mode": "always"}},
}


@pytest.fixture(autouse=True)
def seeded_rules(db):
    """The seeded approval rules (migration 0012): a transactional test elsewhere may have flushed them."""
    from agents.approvals.defaults import ensure_default_approval_policies

    ensure_default_approval_policies(ApprovalPolicy)


@pytest.fixture
def history(users, workspaces):
    ws = {name: workspaces["other" if name == "dave" else "demo"].pk for name in users}
    return seed_history(users=users, workspace_ids=ws)


@pytest.fixture
def admin(users):
    user = users["admin"]
    user.is_superuser = True
    user.is_staff = True
    user.save()
    return user


def simulate_changes(admin, workspace, changes, days=30):
    draft = draft_create(user=admin, workspace=workspace, changes=changes, title="t")
    return simulation_run(user=admin, draft=draft, days=days)


@pytest.mark.django_db
def test_current_policy_set_reproduces_every_recorded_decision(history, admin, workspaces):
    # A no-op change (a rule set to what it is): the draft equals the live set.
    sim = simulate_changes(admin, workspaces["demo"], {"approval_rules": {"Write": {"enabled": True}}})
    counted = summary(sim.groups)
    assert counted["total"] == 88  # the 40-day-old call and the other workspace's 5 are not counted
    assert counted["by_change"] == {"same": 88}
    assert counted["recorded_differs"] == 0
    assert not sim.truncated and sim.rows_scanned == 88
    recorded = {g["recorded"]["outcome"]: 0 for g in sim.groups}
    for g in sim.groups:
        recorded[g["recorded"]["outcome"]] += g["count"]
    assert recorded == {"auto": 56, "approval": 30, "refused": 2}


@pytest.mark.django_db
def test_tightening_the_demo_write_rule_changes_35_calls(history, admin, workspaces):
    sim = simulate_changes(admin, workspaces["demo"], TIGHTEN)
    counted = summary(sim.groups)
    assert counted["total"] == 88
    assert counted["by_change"] == {"same": 53, "approvers_changed": 21, "now_needs_approval": 14}
    assert counted["by_tool"]["update_knowledge_item"] == {"approvers_changed": 21, "same": 9}
    assert counted["by_tool"]["save_to_knowledge"] == {"now_needs_approval": 14}
    assert counted["by_role"]["admin"] == {"approvers_changed": 7}
    assert counted["by_role"]["member"]["approvers_changed"] == 14
    assert counted["by_env"]["staging"] == {"approvers_changed": 7, "now_needs_approval": 14}
    save = next(g for g in sim.groups if g["tool"] == "save_to_knowledge")
    # The approval card's own words: the Write rule now needs an admin other than the requester.
    assert save["simulated"]["approvers"] == "Write: needs 1 approval from a workspace admin other than the requester"
    assert save["recorded"]["outcome"] == "auto"
    # The live set itself is untouched.
    assert ApprovalPolicy.objects.get(name="Write").approver_kind == "requester"
    assert ToolPolicy.objects.get(tool_name="save_to_knowledge").approval_mode == "never"


@pytest.mark.django_db
def test_taking_members_off_a_tool_refuses_their_calls(history, admin, workspaces):
    sim = simulate_changes(admin, workspaces["demo"],
                           {"tool_policies": {"update_knowledge_item": {"allowed_roles": ["admin"]}}})
    counted = summary(sim.groups)
    assert counted["by_change"]["now_refused"] == 21  # alice 14 + bob 7; admin's 7 and carol's 2 as before
    assert counted["by_role"]["viewer"] == {"same": 16}


@pytest.mark.django_db
def test_call_decide_matches_the_live_wrappers_for_every_tool_role_and_tier(users, admin):
    from agents.approvals.policy import rule_for
    from agents.pipeline import policy_views, tool_guard
    from agents.risk import risk_classify

    live = policy_set_from_snapshot(policy_snapshot())
    assert dict(live.tools) == policy_views()
    for tool in policy_views():
        for role in ("viewer", "member", "admin", ""):
            for env in ("", "prod", "staging", "dev"):
                decision = call_decide(live, CallFacts(tool_name=tool, role=role, tier=env or None))
                guard = tool_guard(name=tool, role_name=role, policies=policy_views(), offered=[])
                if not guard.allowed:
                    assert decision.outcome == "refused" and decision.reason == guard.kind
                    continue
                policy = policy_views()[tool]
                assessment = risk_classify(risk=policy.risk, approval_mode=policy.approval_mode, env_name=env,
                                           permission_granted=True)
                if assessment.needs_approval:
                    assert decision.rule == rule_for(tool_name=tool, risk=policy.risk, tier=assessment.env_context)
                else:
                    assert decision.outcome == "auto"



@pytest.mark.django_db
def test_the_time_cap_truncates_and_says_so(history, admin, workspaces):
    from datetime import timedelta

    from django.utils import timezone

    from policies.simulation import simulate

    ticks = iter(range(0, 1000, 30))  # every look at the clock: 30 s later
    live = policy_set_from_snapshot(policy_snapshot())
    until = timezone.now()
    result = simulate(workspace_id=workspaces["demo"].pk, since=until - timedelta(days=30), until=until, draft=live,
                      live=live, chunk_rows=20, max_seconds=50, clock=lambda: next(ticks))
    assert result.truncated and result.truncated_reason == "time"
    assert result.rows_scanned == 20  # clock 0 → 30 s: one chunk of 20; then 60 s > 50 s: stop
    assert summary(result.groups)["total"] == 20


@pytest.mark.django_db(transaction=True)
def test_the_replay_reproduces_what_the_live_loop_recorded(users, roles, workspaces, openai_provider, fake_openai,
                                                           converse, sink_for):
    """Calls made through the real loop (scripted model): the live set replays to exactly the
    recorded decisions — ran, refused, parked — and a draft moves the one it should."""
    from agents.services import run_create
    from tests.fakes.openai_server import text_chunks, tool_call_chunks
    from tests.policy.tooltest import call, scoped_toolbox

    box, scope = scoped_toolbox()
    with scope:
        for name, risk, allowed, mode in (("kb_lookup", "read", (), "never"),
                                          ("note_write", "write", ("member", "admin"), "never"),
                                          ("records_purge", "dangerous", ("admin",), "always")):
            row = ToolPolicy.objects.create(tool_name=name, risk=risk, approval_mode=mode)
            row.allowed_roles.set([roles[r] for r in allowed])
        admin = users["admin"]
        admin.is_superuser = True
        admin.save()
        demo = workspaces["demo"]
        fake_openai.script(tool_call_chunks([call("c1", "kb_lookup", {"query": "q"}),
                                             call("c2", "note_write", {"text": "x"})]), text_chunks("Done."))
        converse(make_thread(users["alice"], demo, openai_provider), users["alice"], "go")
        fake_openai.script(tool_call_chunks([call("c3", "note_write", {"text": "x"})]), text_chunks("Done."))
        converse(make_thread(users["carol"], demo, openai_provider), users["carol"], "go")
        fake_openai.script(tool_call_chunks([call("c4", "records_purge", {"ids": [1]})]))
        thread = make_thread(admin, demo, openai_provider)
        sink = sink_for(thread.pk)
        sink.until_parked(run_create(thread=thread, user=admin, content="purge").run.pk)
        assert sorted(ToolCall.objects.values_list("call_id", "status")) == [
            ("c1", "succeeded"), ("c2", "succeeded"), ("c3", "permission_denied"), ("c4", "awaiting_approval")]

        same = simulate_changes(admin, demo, {"tool_policies": {"kb_lookup": {"timeout_s": 31}}})
        counted = summary(same.groups)
        assert counted["by_change"] == {"same": 4} and counted["recorded_differs"] == 0
        assert sorted((g["tool"], g["recorded"]["outcome"]) for g in same.groups) == [
            ("kb_lookup", "auto"), ("note_write", "auto"), ("note_write", "refused"), ("records_purge", "approval")]

        tighter = simulate_changes(admin, demo, {"tool_policies": {"note_write": {"allowed_roles": ["admin"]}}})
        assert summary(tighter.groups)["by_change"] == {"same": 3, "now_refused": 1}
