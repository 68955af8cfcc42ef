"""A seeded tool-call history for the demo workspace (``manage.py seed_policy_history``) and
the tests: 14 days of calls by alice, bob (members), carol (viewer) and admin, each recorded
with the decision the *live path's* functions make for it (``tool_guard``,
``risk_classify``, ``rule_for`` — the database-reading wrappers, not the simulation's pure
ones), plus calls outside the window and in another workspace that a simulation must not count.

Per day ``d`` of 0..13 (days ago): alice 2× search_knowledge, 1× update_knowledge_item (no
environment), 1× save_to_knowledge (staging); carol 1× search_knowledge; bob
update_knowledge_item in prod on even days and delete_knowledge_item on days 0 and 7; carol
update_knowledge_item on days 0 and 7 (refused: viewer); admin update_knowledge_item in
staging on odd days. 88 calls; plus alice 40 days ago and dave (other workspace) 5×.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone

from agents.approvals.policy import rule_for
from agents.models import Run, ToolCall
from agents.pipeline import policy_views, tool_guard
from agents.risk import risk_classify
from chat.models import Membership, Message, Thread


def _plan(days: int = 14) -> list[tuple[str, str, str, int]]:
    """(username, tool, environment name, days ago)."""
    rows = []
    for d in range(days):
        rows += [("alice", "search_knowledge", "", d)] * 2
        rows += [("alice", "update_knowledge_item", "", d), ("alice", "save_to_knowledge", "staging", d),
                 ("carol", "search_knowledge", "", d)]
        if d % 2 == 0:
            rows.append(("bob", "update_knowledge_item", "prod", d))
        else:
            rows.append(("admin", "update_knowledge_item", "staging", d))
        if d % 7 == 0:
            rows += [("bob", "delete_knowledge_item", "", d), ("carol", "update_knowledge_item", "", d)]
    rows.append(("alice", "update_knowledge_item", "", 40))
    rows += [("dave", "update_knowledge_item", "", 1)] * 5
    return rows


def record_call(*, user, workspace_id: int, tool: str, env_name: str, when, provider=None) -> ToolCall:
    """One ledger row as the live path would have recorded it for ``user``'s call now."""
    membership = Membership.objects.select_related("role").get(user=user, workspace_id=workspace_id)
    role = membership.role.name
    thread = Thread.objects.filter(owner=user, workspace_id=workspace_id, title="Policy history").first() or \
        Thread.objects.create(owner=user, workspace_id=workspace_id, title="Policy history", provider=provider)
    run = Run.objects.create(thread=thread, user=user, provider=provider, status=Run.Status.COMPLETED, env_id=env_name)
    position = thread.messages.count() + 1
    message = Message.objects.create(thread=thread, position=position, role="assistant", content="", run=run)
    policies = policy_views()
    guard = tool_guard(name=tool, role_name=role, policies=policies, offered=[])
    fields: dict = {"run": run, "message": message, "call_id": f"call_{uuid.uuid4().hex[:12]}", "tool_name": tool,
                    "arguments": {"item_id": "00000000-0000-0000-0000-000000000000"} if "item" in tool else {}}
    if guard.kind == "permission_denied":
        fields.update(status=ToolCall.Status.PERMISSION_DENIED, is_error=True, summary=guard.message)
    else:
        policy = policies[tool]
        assessment = risk_classify(risk=policy.risk, approval_mode=policy.approval_mode, env_name=env_name,
                                   permission_granted=True)
        fields.update(risk=assessment.risk, risk_level=assessment.risk_level,
                      env_context=assessment.env_context or "", status=ToolCall.Status.SUCCEEDED)
        if assessment.needs_approval:
            rule = rule_for(tool_name=tool, risk=assessment.risk, tier=assessment.env_context)
            fields.update(approval=rule.as_dict(), approvals_needed=rule.approvals_needed,
                          approvals_so_far=rule.approvals_needed, requested_at=when, decision="approve")
    call = ToolCall.objects.create(**fields)
    ToolCall.objects.filter(pk=call.pk).update(created_at=when)  # auto_now_add: backdate after
    return call


def seed_history(*, users: dict, workspace_ids: dict[str, int], now=None) -> int:
    """Record :func:`_plan`'s calls; ``users``: username → user; ``workspace_ids``: user →
    their workspace id. Returns how many rows were written."""
    now = now or timezone.now()
    plan = _plan()
    for i, (username, tool, env, days_ago) in enumerate(plan):
        when = now - timedelta(days=days_ago, hours=1, seconds=i)
        record_call(user=users[username], workspace_id=workspace_ids[username], tool=tool, env_name=env, when=when)
    return len(plan)
