"""Approvals that route (issue 13): who may decide under the seeded and admin-set rules,
the two-person rule, roles read at decision time, expiry, the ledger of approvers, the inbox
API and the per-user notices. Database-specific paths (conditional UPDATEs racing, the
unique decision row) run on SQLite and again on PostgreSQL (``db_backends``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.approvals.defaults import DEFAULT_RULES, ensure_default_approval_policies
from agents.approvals.policy import rule_for
from agents.models import (
    ApprovalDecision,
    ApprovalPolicy,
    AuditEvent,
    Role,
    Run,
    ToolCall,
    ToolPolicy,
)
from agents.runs import lifecycle
from agents.runs.reaper import approvals_expire_due
from agents.services import approval_decide
from chat.models import Membership, Message
from chat.services import message_create
from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


@pytest.fixture
def rules(db):
    ensure_default_approval_policies(ApprovalPolicy)  # transactional tests flush the migration's rows
    return {p.name: p for p in ApprovalPolicy.objects.all()}


@pytest.fixture
def people(users, roles, workspaces, django_user_model):
    """``users`` (alice, bob: members; carol: viewer; admin) plus admin2 and erin
    (``prod-approver``), all in the demo workspace."""
    approver = Role.objects.create(name="prod-approver", label="Prod approver", rank=25)
    out = dict(users)
    for name, role in (("admin2", roles["admin"]), ("erin", approver)):
        out[name] = django_user_model.objects.create_user(name, password="pw")
        Membership.objects.create(user=out[name], workspace=workspaces["demo"], role=role)
    return out


@pytest.fixture
def no_executor(settings):
    settings.RUN_EXECUTOR = "none"  # a decision re-queues the run; nothing needs to execute it here


TIER_ENV = {"dev": "dev", "staging": "staging", "prod": "prod", None: ""}


def park(people, workspaces, *, requester: str, risk: str, tier: str | None, tool: str = "note_write") -> ToolCall:
    """A run of ``requester`` parked on one ``tool`` call of ``risk`` in ``tier``, under the
    rule that fires for it (the same calls the loop makes)."""
    thread = make_thread(people[requester], workspaces["demo"], None, title=f"{risk} in {tier}")
    run = Run.objects.create(thread=thread, user=people[requester], status=Run.Status.AWAITING_APPROVAL)
    message = message_create(thread_id=thread.pk, run=run, role=Message.Role.ASSISTANT, content="",
                             tool_calls=[{"id": "c1", "name": tool, "arguments": "{}"}])
    ledger, _ = lifecycle.tool_call_open(run=run, message=message, call_id="c1", tool_name=tool, raw_arguments="{}")
    ledger.risk, ledger.env_context = risk, tier or ""
    ledger.risk_level = {"write": "guarded", "dangerous": "dangerous"}.get(risk, "safe")
    ledger.arguments = {"text": "x", "env_id": TIER_ENV[tier]}
    ledger.save()
    rule = rule_for(tool_name=tool, risk=risk, tier=tier)
    assert lifecycle.tool_call_park(ledger=ledger, approval=rule.as_dict(), approvals_needed=rule.approvals_needed,
                                    expires_s=rule.expires_s)
    # The countdown of dangerous calls is its own rule (tested elsewhere): start after it.
    ToolCall.objects.filter(pk=ledger.pk).update(requested_at=timezone.now() - timedelta(seconds=11))
    return ToolCall.objects.select_related("run__thread", "run__user").get(pk=ledger.pk)


def decide(api_for, user, ledger, decision="approve"):
    return api_for(user).post(f"/api/v1/tool-calls/{ledger.pk}/decision/", {"decision": decision}, format="json")


# --- the seeded table ----------------------------------------------------------------------
def test_the_seeded_rules_are_the_issues_defaults(rules):
    table = [(p.name, p.risk, p.env_tier or "any", p.approver_kind, p.approvals_needed, p.requester_counts, p.expires_s)
             for p in ApprovalPolicy.objects.order_by("pk")]
    print("\nseeded approval policies:\n" + "\n".join(
        f"  {n:<22} risk={r:<9} tier={t:<5} approvers={k:<16} needed={c} requester_counts={q!s:<5} expires_s={e}"
        for n, r, t, k, c, q, e in table))
    assert [(n, r, t or "any", k, c, q, e) for n, r, t, k, c, q, e in DEFAULT_RULES] == table
    assert rule_for(tool_name="x", risk="write", tier="dev").rule == "Write"
    assert rule_for(tool_name="x", risk="write", tier=None).rule == "Write"
    assert rule_for(tool_name="x", risk="write", tier="prod").rule == "Production write"
    assert rule_for(tool_name="x", risk="dangerous", tier="staging").rule == "Dangerous"
    two = rule_for(tool_name="x", risk="dangerous", tier="prod")
    assert (two.rule, two.approvals_needed, two.requester_counts) == ("Production dangerous", 2, False)
    assert rule_for(tool_name="x", risk="read", tier="prod").rule == "Approval"  # nothing seeded: the fallback


def test_the_most_specific_rule_wins_and_disabled_rules_do_not_count(rules, roles):
    note = ToolPolicy.objects.create(tool_name="note_write", risk="write")
    approver = Role.objects.create(name="prod-approver", label="Prod approver")
    ApprovalPolicy.objects.create(name="Notes in prod", tool_policy=note, env_tier="prod", approver_kind="role",
                                  approver_role=approver, requester_counts=False, expires_s=600)
    assert rule_for(tool_name="note_write", risk="write", tier="prod").rule == "Notes in prod"
    assert rule_for(tool_name="other_write", risk="write", tier="prod").rule == "Production write"
    assert rule_for(tool_name="note_write", risk="write", tier="dev").rule == "Write"
    ApprovalPolicy.objects.filter(name="Notes in prod").update(enabled=False)
    assert rule_for(tool_name="note_write", risk="write", tier="prod").rule == "Production write"


def test_a_two_person_rule_never_lets_the_requester_count(rules):
    from django.core.exceptions import ValidationError
    from django.db import IntegrityError

    bad = ApprovalPolicy(name="x", approver_kind="workspace_admins", approvals_needed=2, requester_counts=True)
    with pytest.raises(ValidationError) as err:
        bad.full_clean()
    assert "requester_counts" in err.value.message_dict
    with pytest.raises(IntegrityError):
        bad.save()  # the database holds the rule too


# --- risk × environment × requester role × decider role -----------------------------------
ALLOWED, FORBIDDEN, HIDDEN, SECOND = "allowed", "403", "404", "needs a second approval"
# HIDDEN: the rule is "the requester (or an admin)" and the decider cannot see the thread.


@pytest.mark.parametrize(("risk", "tier", "requester", "decider", "expected"), [
    # dev / staging / no environment writes: the requester (or a workspace admin)
    ("write", "dev", "alice", "alice", ALLOWED),
    ("write", "dev", "alice", "admin", ALLOWED),
    ("write", "dev", "alice", "bob", HIDDEN),
    ("write", "dev", "alice", "erin", HIDDEN),
    ("write", "staging", "alice", "alice", ALLOWED),
    ("write", "staging", "alice", "carol", HIDDEN),
    ("write", None, "alice", "alice", ALLOWED),
    # prod writes: one workspace admin other than the requester
    ("write", "prod", "alice", "alice", FORBIDDEN),
    ("write", "prod", "alice", "admin", ALLOWED),
    ("write", "prod", "alice", "bob", FORBIDDEN),
    ("write", "prod", "alice", "erin", FORBIDDEN),
    ("write", "prod", "admin", "admin", FORBIDDEN),   # an admin's own prod write: another admin
    ("write", "prod", "admin", "admin2", ALLOWED),
    # dangerous outside prod: the requester (or an admin)
    ("dangerous", "staging", "alice", "alice", ALLOWED),
    ("dangerous", "dev", "alice", "bob", HIDDEN),
    # dangerous in prod: two approvers, requester excluded
    ("dangerous", "prod", "alice", "alice", FORBIDDEN),
    ("dangerous", "prod", "alice", "admin", SECOND),
    ("dangerous", "prod", "alice", "bob", FORBIDDEN),
    ("dangerous", "prod", "admin", "admin", FORBIDDEN),
    ("dangerous", "prod", "admin", "admin2", SECOND),
])
def test_who_may_decide_table(rules, people, workspaces, api_for, no_executor, risk, tier, requester, decider, expected):
    ledger = park(people, workspaces, requester=requester, risk=risk, tier=tier)
    response = decide(api_for, people[decider], ledger)
    ledger.refresh_from_db()
    if expected in (FORBIDDEN, HIDDEN):
        assert response.status_code == int(expected), response.json()
        if expected == FORBIDDEN:
            assert response.json()["error"]["code"] == "not_allowed" and response.json()["error"]["message"]
        assert ledger.status == "awaiting_approval" and ledger.approvals_so_far == 0
        assert not ApprovalDecision.objects.filter(tool_call=ledger).exists()
    elif expected == SECOND:
        assert response.status_code == 200, response.json()
        body = response.json()
        assert body["status"] == "awaiting_approval"
        assert (body["approval"]["approvals_so_far"], body["approval"]["approvals_needed"]) == (1, 2)
        assert body["approval"]["approved_by"] == [decider]
        assert Run.objects.get(pk=ledger.run_id).status == "awaiting_approval"  # still parked
    else:
        assert response.status_code == 200, response.json()
        assert ledger.status == "approved" and ledger.decided_by == people[decider]
        assert Run.objects.get(pk=ledger.run_id).status == "queued"


def test_a_refusal_says_why_and_is_audited(rules, people, workspaces, api_for, no_executor):
    ledger = park(people, workspaces, requester="alice", risk="write", tier="prod")
    response = decide(api_for, people["alice"], ledger)
    assert response.status_code == 403
    assert response.json()["error"]["message"] == ("Production write: the requester cannot approve their own call; "
                                                   "it needs a workspace admin other than alice.")
    audit = AuditEvent.objects.get(kind="decision_refused", user=people["alice"])
    assert audit.detail["tool_call_id"] == str(ledger.pk) and audit.detail["role"] == "member"


def test_a_named_role_rule_admits_its_role_and_no_one_else(rules, people, workspaces, api_for, no_executor):
    note = ToolPolicy.objects.create(tool_name="note_write", risk="write")
    ApprovalPolicy.objects.create(name="Notes in prod", tool_policy=note, env_tier="prod", approver_kind="role",
                                  approver_role=Role.objects.get(name="prod-approver"), requester_counts=False)
    ledger = park(people, workspaces, requester="alice", risk="write", tier="prod")
    assert ledger.approval["rule"] == "Notes in prod"
    refused = decide(api_for, people["admin"], ledger)
    assert refused.status_code == 403 and "prod-approver" in refused.json()["error"]["message"]
    # erin cannot read alice's thread, yet decides: the call is hers to decide.
    assert api_for(people["erin"]).get(f"/api/v1/threads/{ledger.run.thread_id}/").status_code == 404
    (row,) = api_for(people["erin"]).get("/api/v1/approvals/").json()
    assert row["id"] == str(ledger.pk) and row["thread_visible"] is False  # the inbox shows no dead link
    body = api_for(people["alice"]).get("/api/v1/tool-calls/?status=awaiting_approval").json()
    rows = body["results"] if isinstance(body, dict) else body
    assert [(r["id"], r["thread_visible"]) for r in rows] == [(str(ledger.pk), True)]
    assert decide(api_for, people["erin"], ledger).status_code == 200
    assert decide(api_for, people["dave"], ledger).status_code == 404  # another workspace: not even there


# --- two-person rule ------------------------------------------------------------------------
def test_two_person_rule(rules, people, workspaces, api_for, no_executor):
    ledger = park(people, workspaces, requester="alice", risk="dangerous", tier="prod")
    assert decide(api_for, people["admin"], ledger).status_code == 200
    twice = decide(api_for, people["admin"], ledger)
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "already_decided"
    own = decide(api_for, people["alice"], ledger)
    assert own.status_code == 403 and own.json()["error"]["code"] == "not_allowed"
    final = decide(api_for, people["admin2"], ledger)
    assert final.status_code == 200 and final.json()["status"] == "approved"
    ledger.refresh_from_db()
    assert (ledger.approvals_so_far, ledger.decided_by) == (2, people["admin2"])
    rows = list(ApprovalDecision.objects.filter(tool_call=ledger))
    print("\ntwo-person approval in the ledger (ApprovalDecision rows):")
    for row in rows:
        print(f"  {row.decided_at:%Y-%m-%d %H:%M:%S.%f} {row.username:<7} role={row.role:<6} "
              f"as_requester={row.as_requester} decision={row.decision}")
    print(f"  ToolCall {ledger.tool_name}: status={ledger.status} approvals={ledger.approvals_so_far}/"
          f"{ledger.approvals_needed} rule={ledger.approval['rule']!r} decided_by={ledger.decided_by}")
    assert [(r.username, r.role, r.decision, r.as_requester) for r in rows] == [
        ("admin", "admin", "approve", False), ("admin2", "admin", "approve", False)]
    audit = AuditEvent.objects.filter(kind="approval_decided").order_by("created_at")
    assert [(a.user.username, a.detail["approvals_so_far"], a.detail["approvals_needed"], a.detail["role"])
            for a in audit] == [("admin", 1, 2, "admin"), ("admin2", 2, 2, "admin")]
    assert Run.objects.get(pk=ledger.run_id).status == "queued"


def test_any_deny_ends_a_two_person_request(rules, people, workspaces, api_for, no_executor):
    ledger = park(people, workspaces, requester="alice", risk="dangerous", tier="prod")
    assert decide(api_for, people["admin"], ledger).status_code == 200
    denied = decide(api_for, people["admin2"], ledger, "deny")
    assert denied.status_code == 200 and denied.json()["status"] == "denied"
    assert [(d.username, d.decision) for d in ApprovalDecision.objects.filter(tool_call=ledger)] == [
        ("admin", "approve"), ("admin2", "deny")]
    assert Run.objects.get(pk=ledger.run_id).status == "queued"


def test_a_requester_who_is_an_admin_is_never_the_second_approver(rules, people, workspaces, api_for, no_executor):
    ledger = park(people, workspaces, requester="admin", risk="dangerous", tier="prod")
    assert decide(api_for, people["admin2"], ledger).status_code == 200
    second = decide(api_for, people["admin"], ledger)
    assert second.status_code == 403 and "requester" in second.json()["error"]["message"]
    ledger.refresh_from_db()
    assert ledger.status == "awaiting_approval" and ledger.approvals_so_far == 1


@pytest.mark.parametrize("who", ["admin", "erin"])
def test_an_approver_removed_from_the_role_before_deciding_is_refused(rules, people, workspaces, roles, api_for,
                                                                      no_executor, who):
    if who == "erin":
        ApprovalPolicy.objects.filter(name="Production write").update(
            approver_kind="role", approver_role=Role.objects.get(name="prod-approver"))
    ledger = park(people, workspaces, requester="alice", risk="write", tier="prod")
    assert who in ledger_names(api_for, people["alice"], ledger)  # could decide when it was requested
    Membership.objects.filter(user=people[who]).update(role=roles["member"])  # the role is taken away
    response = decide(api_for, people[who], ledger)
    assert response.status_code == 403, response.json()
    ledger.refresh_from_db()
    assert ledger.status == "awaiting_approval"
    assert api_for(people[who]).get("/api/v1/approvals/").json() == []


def ledger_names(api_for, user, ledger) -> list[str]:
    rows = api_for(user).get("/api/v1/tool-calls/?status=awaiting_approval").json()["results"]
    return next(r for r in rows if r["id"] == str(ledger.pk))["approval"]["approver_names"]


def test_two_approvals_at_once_count_once_each(rules, people, workspaces, no_executor):
    """The conditional UPDATE on ``approvals_so_far``: the second of two racing approvals by
    different people cannot overwrite the first (it re-reads and becomes the deciding one)."""
    ledger = park(people, workspaces, requester="alice", risk="dangerous", tier="prod")
    stale = ToolCall.objects.select_related("run__thread", "run__user").get(pk=ledger.pk)  # read before
    approval_decide(tool_call=ledger, user=people["admin"], decision="approve")
    assert not lifecycle.tool_call_count_approval(ledger=stale, so_far=0)  # the stale count loses
    assert not lifecycle.tool_call_decide(ledger=stale, decision="approve", user=people["admin2"], so_far=0)
    assert stale.approvals_so_far == 0
    # The service re-reads the count under the thread's lock: the second approver decides it.
    decided = approval_decide(tool_call=stale, user=people["admin2"], decision="approve")
    assert (decided.status, decided.approvals_so_far) == ("approved", 2)
    assert ApprovalDecision.objects.filter(tool_call=ledger).count() == 2


# --- expiry ---------------------------------------------------------------------------------
def test_expiry_denies_the_call_requeues_the_run_and_a_late_decision_gets_409(rules, people, workspaces, api_for,
                                                                              no_executor):
    ledger = park(people, workspaces, requester="alice", risk="write", tier="prod")
    assert ledger.expires_at - ledger.requested_at >= timedelta(seconds=3600 - 12)  # the rule's hour
    assert approvals_expire_due() == []  # not yet
    ToolCall.objects.filter(pk=ledger.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire_due() == [str(ledger.pk)]
    ledger.refresh_from_db()
    assert (ledger.status, ledger.decision) == ("denied", "expired")
    assert "expired" in ledger.summary
    assert Run.objects.get(pk=ledger.run_id).status == "queued"  # the run goes on
    assert ApprovalDecision.objects.get(tool_call=ledger).decision == "expired"
    assert AuditEvent.objects.filter(kind="approval_expired", run_id=ledger.run_id).exists()
    late = decide(api_for, people["admin"], ledger)
    assert late.status_code == 409 and late.json()["error"]["code"] == "expired"


def test_a_run_going_on_after_a_decision_or_an_expiry_is_enqueued_ahead_of_new_runs(rules, people, workspaces,
                                                                                     monkeypatch, no_executor):
    """An approved, denied or expired call lets its run go on: it began before, so it is sent
    at the broker's first priority (``executors.PRIORITY_REQUEUED``), not behind the sends
    queued while it waited."""
    from agents.runs import executors

    enqueued = []
    monkeypatch.setattr(executors, "enqueue_run", lambda run_id, requeued=False: enqueued.append((run_id, requeued)))
    approved = park(people, workspaces, requester="alice", risk="write", tier="dev")
    approval_decide(tool_call=approved, user=people["alice"], decision="approve")
    denied = park(people, workspaces, requester="alice", risk="write", tier="dev")
    approval_decide(tool_call=denied, user=people["alice"], decision="deny")
    expired = park(people, workspaces, requester="alice", risk="write", tier="prod")
    ToolCall.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire_due() == [str(expired.pk)]
    assert enqueued == [(approved.run_id, True), (denied.run_id, True), (expired.run_id, True)]


def test_a_decision_after_the_deadline_expires_the_request_itself(rules, people, workspaces, api_for, no_executor):
    """The reaper runs every few seconds; a decision that arrives in between is still late."""
    ledger = park(people, workspaces, requester="alice", risk="write", tier="dev")
    ToolCall.objects.filter(pk=ledger.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    late = decide(api_for, people["alice"], ledger)
    assert late.status_code == 409 and late.json()["error"]["code"] == "expired"
    assert ToolCall.objects.get(pk=ledger.pk).decision == "expired"


# --- what the request carries; the inbox ----------------------------------------------------
def test_the_rest_representation_carries_the_rule(rules, people, workspaces, api_for, no_executor):
    ledger = park(people, workspaces, requester="alice", risk="dangerous", tier="prod")
    row = api_for(people["alice"]).get("/api/v1/tool-calls/?status=awaiting_approval").json()["results"][0]
    approval = row["approval"]
    assert approval["rule"] == "Production dangerous"
    assert approval["approvers"] == "two workspace admins other than alice"
    assert approval["approver_names"] == ["admin", "admin2"]
    assert (approval["approvals_needed"], approval["approvals_so_far"], approval["approved_by"]) == (2, 0, [])
    assert approval["expires_at"] == ledger.expires_at.isoformat()
    assert approval["waiting_text"] == ("Production dangerous: needs 2 approvals from two workspace admins "
                                        "other than alice")
    assert row["may_decide"] is False and row["thread_title"] == "dangerous in prod"


def test_the_inbox_lists_what_each_person_may_decide(rules, people, workspaces, api_for, no_executor):
    prod = park(people, workspaces, requester="alice", risk="write", tier="prod")
    dev = park(people, workspaces, requester="alice", risk="write", tier="dev")
    two = park(people, workspaces, requester="bob", risk="dangerous", tier="prod")

    def inbox(name):
        return [row["id"] for row in api_for(people[name]).get("/api/v1/approvals/").json()]

    assert inbox("alice") == [str(dev.pk)]
    assert inbox("bob") == []
    assert inbox("admin") == [str(prod.pk), str(dev.pk), str(two.pk)]
    assert inbox("dave") == [] and inbox("carol") == []
    decide(api_for, people["admin"], two)
    assert inbox("admin") == [str(prod.pk), str(dev.pk)]  # decided by them: out of their inbox
    assert inbox("admin2") == [str(prod.pk), str(dev.pk), str(two.pk)]
    row = api_for(people["admin2"]).get("/api/v1/approvals/").json()[2]
    assert row["approval"]["approved_by"] == ["admin"] and row["may_decide"] is True
    assert row["arguments"] == {"text": "x", "env_id": "prod"} and row["thread_title"] == "dangerous in prod"
    assert row["approval"]["requester"] == "bob" and row["env_context"] == "prod" and row["risk"] == "dangerous"


def test_everyone_who_may_decide_is_notified_on_their_own_group(rules, people, workspaces, no_executor):
    from channels.layers import get_channel_layer

    from chat.access import user_group
    from chatplatform.loops import run_coroutine

    layer = get_channel_layer()
    channels = {}
    for name in ("alice", "bob", "admin", "admin2", "erin"):
        channels[name] = run_coroutine(layer.new_channel())
        run_coroutine(layer.group_add(user_group(people[name].pk), channels[name]))

    pending: dict[str, object] = {}  # one receive per channel, kept across timeouts

    async def next_notice(name, wait):
        # Never cancel a pending receive: the production pub/sub layer unsubscribes a channel
        # whose receive was cancelled (channels-redis treats that as the consumer leaving).
        if name not in pending:
            pending[name] = asyncio.ensure_future(layer.receive(channels[name]))
        done, _ = await asyncio.wait({pending[name]}, timeout=wait)
        return pending.pop(name).result()["event"] if done else None

    def received(name, expected: int = 0) -> list[dict]:
        """The notices on ``name``'s channel: the first ``expected`` waited for (up to 10 s
        each), then whatever else comes within 0.3 s."""
        out = []
        while True:
            wait = 10.0 if len(out) < expected else 0.3
            event = run_coroutine(next_notice(name, wait), timeout=wait + 5)
            if event is None:
                return out
            out.append(event)

    from agents.approvals.requests import inbox_notify

    ledger = park(people, workspaces, requester="alice", risk="dangerous", tier="prod")
    inbox_notify(ledger=ledger, run=ledger.run, state="pending")
    for name in ("alice", "admin", "admin2"):
        assert received(name, 1) == [{"type": "inbox.changed", "tool_call_id": str(ledger.pk), "state": "pending"}], name
    assert received("bob") == [] and received("erin") == []
    approval_decide(tool_call=ledger, user=people["admin"], decision="approve")
    assert [e["state"] for e in received("admin2", 1)] == ["progress"]
    assert [e["state"] for e in received("admin", 1)] == ["progress"]  # the first approver hears of it too


def test_the_admin_shows_the_rules_and_every_approver(rules, people, workspaces, no_executor, client, django_user_model):
    ledger = park(people, workspaces, requester="alice", risk="dangerous", tier="prod")
    approval_decide(tool_call=ledger, user=people["admin"], decision="approve")
    approval_decide(tool_call=ToolCall.objects.get(pk=ledger.pk), user=people["admin2"], decision="approve")
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    page = client.get(f"/admin/agents/toolcall/{ledger.pk}/change/").content.decode()
    for text in ("admin2", "Production dangerous", "approve"):
        assert text in page, text
    assert page.count('<td class="field-username">') == 2  # both approvers, inline on the call
    listing = client.get("/admin/agents/approvalpolicy/").content.decode()
    assert all(name in listing for name, *_ in DEFAULT_RULES)
    form = client.post("/admin/agents/approvalpolicy/add/", {
        "name": "Bad", "enabled": "on", "approver_kind": "workspace_admins", "approvals_needed": "2",
        "requester_counts": "on", "expires_s": "60"})
    assert form.status_code == 200 and "requester never counts" in form.content.decode()  # refused, explained
