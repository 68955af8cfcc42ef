"""The policy-change API: simulate, the doors (deleted tool, non-admin, other workspace, own
approval, stale), four eyes, versions and rollback."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from agents.models import ApprovalPolicy, ToolPolicy
from chat.models import Membership
from policies.demo_history import seed_history
from policies.models import PolicyVersion, WorkspacePolicySettings

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
def admins(users, roles, workspaces, django_user_model):
    """admin (superuser) and erin: a second admin of demo with only the policy permissions."""
    first = users["admin"]
    first.is_superuser = first.is_staff = True
    first.save()
    erin = django_user_model.objects.create_user(username="erin", password="pw-erin", is_staff=True)
    erin.user_permissions.set(Permission.objects.filter(codename__in=["change_toolpolicy", "change_approvalpolicy"]))
    Membership.objects.create(user=erin, workspace=workspaces["demo"], role=roles["admin"])
    return first, django_user_model.objects.get(pk=erin.pk)


@pytest.fixture
def history(users, workspaces):
    return seed_history(users=users, workspace_ids={n: workspaces["other" if n == "dave" else "demo"].pk
                                                    for n in users})


def simulate(client, workspace, changes=TIGHTEN, **extra):
    return client.post("/api/v1/policy-simulations/", {"workspace": workspace.pk, "changes": changes, "days": 30,
                                                       "reason": "tighten writes", **extra}, format="json")


@pytest.mark.db_backends  # JSON key lookups and aggregates: SQLite and PostgreSQL
@pytest.mark.django_db
def test_simulation_counts_and_paged_calls_through_the_api(api_for, admins, history, workspaces, settings):
    settings.POLICY_SIM_PAGE_SIZE = 10
    client = api_for(admins[0])
    r = simulate(client, workspaces["demo"])
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["summary"]["by_change"] == {"same": 53, "approvers_changed": 21, "now_needs_approval": 14}
    assert body["truncated"] is False and body["rows_scanned"] == 88
    calls = client.get(body["calls_url"]).json()
    assert calls["count"] == 35 and calls["pages"] == 4 and len(calls["results"]) == 10
    page4 = client.get(body["calls_url"] + "?page=4").json()
    assert len(page4["results"]) == 5
    saves = client.get(body["calls_url"] + "?change=now_needs_approval").json()
    assert saves["count"] == 14
    first = saves["results"][0]
    assert first["tool"] == "save_to_knowledge" and first["requester"] == "alice" and first["env"] == "staging"
    assert first["recorded"] == first["current"] == {"outcome": "auto", "reason": ""}
    assert first["simulated"]["approvers"] == "Write: needs 1 approval from a workspace admin other than alice"
    assert client.get(body["calls_url"] + "?change=bogus").status_code == 400


@pytest.mark.django_db
def test_doors(api_for, admins, users, history, workspaces):
    admin, erin = admins
    # A deleted tool: 400 naming it.
    r = simulate(api_for(admin), workspaces["demo"], {"tool_policies": {"gone_tool": {"enabled": False}}})
    assert r.status_code == 400 and "gone_tool" in r.json()["error"]["message"]
    r = simulate(api_for(admin), workspaces["demo"], {"approval_rules": {"X": {"tool": "gone_tool", "risk": "write"}}})
    assert r.status_code == 400 and "gone_tool" in r.json()["error"]["message"]
    # A member (not an admin): 403; a workspace one is not in: 404; its simulation: 404.
    assert simulate(api_for(users["alice"]), workspaces["demo"]).status_code == 403
    assert simulate(api_for(erin), workspaces["other"]).status_code == 404
    sim = simulate(api_for(admin), workspaces["demo"]).json()
    assert api_for(users["alice"]).get(f"/api/v1/policy-simulations/{sim['id']}/").status_code == 404
    assert api_for(users["dave"]).get(sim["calls_url"]).status_code == 404
    # The other workspace's calls are never counted: dave's 5 are its only ones.
    other = simulate(api_for(admin), workspaces["other"]).json()
    assert other["summary"]["total"] == 5
    assert api_for().post("/api/v1/policy-simulations/", {}, format="json").status_code in (401, 403)


@pytest.mark.db_backends  # JSON key lookups and aggregates: SQLite and PostgreSQL
@pytest.mark.django_db
def test_four_eyes_approval_apply_and_rollback(api_for, admins, history, workspaces):
    admin, erin = admins
    WorkspacePolicySettings.objects.create(workspace=workspaces["other"], four_eyes=True)
    sim = simulate(api_for(admin), workspaces["demo"]).json()
    draft = sim["draft"]
    # Four eyes: applying before a second admin approved is refused; one's own approval too.
    r = api_for(admin).post(f"/api/v1/policy-drafts/{draft}/apply/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "needs_approval"
    r = api_for(admin).post(f"/api/v1/policy-drafts/{draft}/approve/")
    assert r.status_code == 403
    assert api_for(erin).post(f"/api/v1/policy-drafts/{draft}/approve/").json()["approved_by"] == "erin"
    r = api_for(admin).post(f"/api/v1/policy-drafts/{draft}/apply/")
    assert r.status_code == 201, r.content
    v2 = r.json()
    assert v2["number"] == 2 and v2["approved_by"] == "erin" and v2["applied_by"] == "admin"
    assert v2["created_by"] == "admin" and v2["reason"] == "tighten writes"
    assert v2["changes"] == {"tool_policies": {"save_to_knowledge": {"approval_mode": "always"}},
                             "approval_rules": {"Write": {"approver_kind": "workspace_admins",
                                                          "requester_counts": False}}}
    assert ApprovalPolicy.objects.get(name="Write").approver_kind == "workspace_admins"
    assert ToolPolicy.objects.get(tool_name="save_to_knowledge").approval_mode == "always"
    assert PolicyVersion.objects.get(number=1).snapshot["approval_rules"]["Write"]["approver_kind"] == "requester"
    # Rollback to version 1: a simulated draft that undoes it — the same 35 calls move back.
    r = api_for(erin).post("/api/v1/policy-versions/1/rollback/", {"workspace": workspaces["demo"].pk}, format="json")
    assert r.status_code == 201, r.content
    back = r.json()
    back_sim = api_for(erin).get(f"/api/v1/policy-simulations/{back['last_simulation']}/").json()
    assert back_sim["summary"]["by_change"] == {"same": 53, "approvers_changed": 21, "now_runs_without_approval": 14}
    assert back_sim["summary"]["recorded_differs"] == 35  # the live set (v2) no longer decides as recorded
    assert api_for(admin).post(f"/api/v1/policy-drafts/{back['id']}/approve/").status_code == 200
    assert api_for(erin).post(f"/api/v1/policy-drafts/{back['id']}/apply/").json()["number"] == 3
    assert ApprovalPolicy.objects.get(name="Write").approver_kind == "requester"
    assert ToolPolicy.objects.get(tool_name="save_to_knowledge").approval_mode == "never"
    numbers = [v["number"] for v in api_for(erin).get("/api/v1/policy-versions/").json()["results"]]
    assert numbers == [3, 2, 1]


@pytest.mark.django_db
def test_an_approved_draft_goes_stale_when_the_live_policy_changes(api_for, admins, history, workspaces):
    admin, erin = admins
    WorkspacePolicySettings.objects.create(workspace=workspaces["demo"], four_eyes=True)
    draft = simulate(api_for(admin), workspaces["demo"]).json()["draft"]
    assert api_for(erin).post(f"/api/v1/policy-drafts/{draft}/approve/").status_code == 200
    ToolPolicy.objects.filter(tool_name="search_knowledge").update(timeout_s=5)  # someone changed the live set
    r = api_for(admin).post(f"/api/v1/policy-drafts/{draft}/apply/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "stale"
    assert ApprovalPolicy.objects.get(name="Write").approver_kind == "requester"
    # Re-simulating voids the approval: it needs approving again.
    api_for(admin).post("/api/v1/policy-simulations/", {"draft": draft}, format="json")
    assert api_for(admin).get(f"/api/v1/policy-drafts/{draft}/").json()["status"] == "open"
    r = api_for(admin).post(f"/api/v1/policy-drafts/{draft}/apply/")
    assert r.json()["error"]["code"] == "needs_approval"


@pytest.mark.django_db
def test_without_four_eyes_the_author_applies_a_simulated_draft(api_for, admins, history, workspaces):
    admin, _erin = admins
    r = api_for(admin).post("/api/v1/policy-drafts/", {"workspace": workspaces["demo"].pk, "changes": TIGHTEN},
                            format="json")
    draft = r.json()["id"]
    r = api_for(admin).post(f"/api/v1/policy-drafts/{draft}/apply/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_simulated"
    api_for(admin).post("/api/v1/policy-simulations/", {"draft": draft, "days": 7}, format="json")
    assert api_for(admin).post(f"/api/v1/policy-drafts/{draft}/apply/").status_code == 201
    # An applied draft cannot be discarded, applied again or re-simulated.
    assert api_for(admin).post(f"/api/v1/policy-drafts/{draft}/discard/").json()["status"] == "applied"
    assert api_for(admin).post(f"/api/v1/policy-drafts/{draft}/apply/").json()["error"]["code"] == "not_open"
    other = api_for(admin).post("/api/v1/policy-drafts/", {"workspace": workspaces["demo"].pk, "changes": {
        "tool_policies": {"search_knowledge": {"enabled": False}}}}, format="json").json()["id"]
    assert api_for(admin).post(f"/api/v1/policy-drafts/{other}/discard/").json()["status"] == "discarded"
    r = api_for(admin).post("/api/v1/policy-simulations/", {"draft": other}, format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_open"


@pytest.mark.django_db
def test_admin_simulate_action_shows_the_result_and_applies(client, admins, history, workspaces):
    admin, erin = admins
    client.force_login(admin)
    write = ApprovalPolicy.objects.get(name="Write")
    r = client.post("/admin/agents/approvalpolicy/", {"action": "simulate", "_selected_action": [write.pk]})
    assert r.status_code == 302 and "/simulate/?ids=" in r["Location"]
    form = client.get(r["Location"])
    assert form.status_code == 200 and b"Write" in form.content
    prefix = f"row{write.pk}"
    data = {"workspace": workspaces["demo"].pk, "days": 30, "title": "Tighten writes", "reason": "audit finding",
            f"{prefix}-enabled": "on", f"{prefix}-risk": "write", f"{prefix}-env_tier": "",
            f"{prefix}-approver_kind": "workspace_admins", f"{prefix}-approver_role": "",
            f"{prefix}-approvals_needed": 1, f"{prefix}-expires_s": 86400}  # requester_counts unticked
    r = client.post(r["Location"], data)
    assert r.status_code == 302, r.content.decode()[:2000]
    page = client.get(r["Location"])
    text = page.content.decode()
    assert "21 calls would be decided differently" in text
    assert "Write: needs 1 approval from a workspace admin other than alice" in text
    assert ApprovalPolicy.objects.get(name="Write").approver_kind == "requester"  # not applied
    # Apply from the result page (no four eyes): the live rule changes and a version is recorded.
    r = client.post(r["Location"], {"do": "apply"})
    assert r.status_code == 302
    assert ApprovalPolicy.objects.get(name="Write").approver_kind == "workspace_admins"
    assert PolicyVersion.objects.get(number=2).reason == "audit finding"
    # A member sees no result page.
    client.force_login(erin)
    erin.user_permissions.clear()
    assert client.get(page.request["PATH_INFO"]).status_code in (302, 403, 404)


@pytest.mark.django_db
def test_schema_lists_the_policy_endpoints_and_odd_ids_are_404(api_for, admins):
    schema = api_for(admins[0]).get("/api/schema/?format=json").json()
    for path in ["/api/v1/policy-simulations/", "/api/v1/policy-simulations/{simulation_id}/",
                 "/api/v1/policy-simulations/{simulation_id}/calls/", "/api/v1/policy-drafts/",
                 "/api/v1/policy-drafts/{draft_id}/", "/api/v1/policy-drafts/{draft_id}/approve/",
                 "/api/v1/policy-drafts/{draft_id}/apply/", "/api/v1/policy-drafts/{draft_id}/discard/",
                 "/api/v1/policy-versions/",
                 "/api/v1/policy-versions/{number}/rollback/"]:
        assert path in schema["paths"], path
    client = api_for(admins[0])
    assert client.get("/api/v1/policy-simulations/99999999999999999999999/").status_code == 404
    assert client.get("/api/v1/policy-drafts/abc/").status_code == 404
    r = client.post("/api/v1/policy-simulations/", {"workspace": 10**30, "changes": TIGHTEN}, format="json")
    assert r.status_code in (400, 404)
