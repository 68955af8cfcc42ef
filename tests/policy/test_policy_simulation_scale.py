"""Policy simulation over a large generated ledger on PostgreSQL (services tier): aggregated
in the database in chunks, exact counts, and the row cap's "truncated" flag."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents.approvals.defaults import ensure_default_approval_policies
from agents.approvals.policy import rule_for
from agents.models import ApprovalPolicy, Run
from agents.policy_set import policy_set_from_snapshot, policy_snapshot
from chat.models import Message, Thread
from policies.drafts import changes_validate, snapshot_apply
from policies.simulation import simulate, summary

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def postgres_with_rules(db):
    if connection.vendor != "postgresql":
        pytest.skip("the large ledger is generated with PostgreSQL's generate_series (services tier)")
    ensure_default_approval_policies(ApprovalPolicy)  # transactional tests flush the migration's rows

ROWS = 150_000
TIGHTEN = {"approval_rules": {"Write": {"approver_kind": "workspace_admins", "requester_counts": False}}}


def _generate(users, workspaces) -> dict[str, int]:
    """ROWS calls over 20 days, in one INSERT … SELECT: call i is by alice, bob, carol in turn;
    every other triple is search_knowledge (ran), the rest update_knowledge_item (waited for
    approval under the Write rule; carol, a viewer: refused). Returns the expected counts."""
    runs = []
    for name in ("alice", "bob", "carol"):
        thread = Thread.objects.create(owner=users[name], workspace=workspaces["demo"], title="bulk")
        run = Run.objects.create(thread=thread, user=users[name], status=Run.Status.COMPLETED)
        message = Message.objects.create(thread=thread, position=1, role="assistant", content="", run=run)
        runs.append((str(run.pk), message.pk))
    rule = rule_for(tool_name="update_knowledge_item", risk="write", tier=None).as_dict()
    assert rule["rule"] == "Write"
    now = timezone.now()
    with connection.cursor() as cur:
        cur.execute("""
            INSERT INTO agents_toolcall (id, run_id, message_id, call_id, tool_name, arguments, raw_arguments, risk,
                risk_level, env_context, status, summary, is_error, attempts, requested_at, decision, approval,
                approvals_needed, approvals_so_far, created_at, updated_at)
            SELECT gen_random_uuid(),
                   (ARRAY[%(r0)s, %(r1)s, %(r2)s])[i %% 3 + 1]::uuid,
                   (ARRAY[%(m0)s, %(m1)s, %(m2)s])[i %% 3 + 1],
                   'c' || i,
                   CASE WHEN (i / 3) %% 2 = 0 THEN 'search_knowledge' ELSE 'update_knowledge_item' END,
                   '{}'::jsonb, '',
                   CASE WHEN (i / 3) %% 2 = 0 THEN 'read' WHEN i %% 3 = 2 THEN '' ELSE 'write' END,
                   CASE WHEN (i / 3) %% 2 = 0 THEN 'safe' WHEN i %% 3 = 2 THEN '' ELSE 'guarded' END,
                   '',
                   CASE WHEN (i / 3) %% 2 = 1 AND i %% 3 = 2 THEN 'permission_denied' ELSE 'succeeded' END,
                   '', false, 1,
                   CASE WHEN (i / 3) %% 2 = 1 AND i %% 3 < 2 THEN %(now)s - i * interval '5 seconds' END,
                   '',
                   CASE WHEN (i / 3) %% 2 = 1 AND i %% 3 < 2 THEN %(rule)s::jsonb ELSE '{}'::jsonb END,
                   1, 0, %(now)s - i * interval '5 seconds', %(now)s
            FROM generate_series(0, %(last)s) AS i
        """, {"r0": runs[0][0], "r1": runs[1][0], "r2": runs[2][0], "m0": runs[0][1], "m1": runs[1][1],
              "m2": runs[2][1], "now": now, "rule": __import__("json").dumps(rule), "last": ROWS - 1})
        cur.execute("ANALYZE agents_toolcall")
    updates = sum(1 for i in range(ROWS) if (i // 3) % 2 == 1)
    by_members = sum(1 for i in range(ROWS) if (i // 3) % 2 == 1 and i % 3 < 2)
    return {"updates": updates, "by_members": by_members}


def test_a_large_ledger_is_simulated_in_bounded_time_with_exact_counts(users, workspaces, capsys):
    expected = _generate(users, workspaces)
    live = policy_snapshot()
    draft = policy_set_from_snapshot(snapshot_apply(live, changes_validate(TIGHTEN, live)))
    until = timezone.now() + timedelta(seconds=1)
    started = time.monotonic()
    result = simulate(workspace_id=workspaces["demo"].pk, since=until - timedelta(days=30), until=until,
                      draft=draft, live=policy_set_from_snapshot(live), chunk_rows=100_000)
    seconds = time.monotonic() - started
    counted = summary(result.groups)
    assert result.rows_scanned == ROWS and not result.truncated
    assert counted["by_change"] == {"approvers_changed": expected["by_members"], "same": ROWS - expected["by_members"]}
    assert counted["recorded_differs"] == 0
    assert seconds < 60
    with capsys.disabled():
        print(f"\npolicy simulation: {ROWS} rows in {seconds:.2f} s = {ROWS / seconds:,.0f} rows/s")

    # The row cap: only the newest calls are counted, and the result says so.
    capped = simulate(workspace_id=workspaces["demo"].pk, since=until - timedelta(days=30), until=until,
                      draft=draft, live=policy_set_from_snapshot(live), max_rows=50_000, chunk_rows=20_000)
    assert capped.truncated and capped.truncated_reason == "rows"
    assert capped.rows_scanned == 50_000
    assert capped.covered_from > until - timedelta(days=30)
