"""Per-tool call limits: within the limit a read tool runs without a person; the call over
the limit is not executed but waits for approval, and runs once when approved."""

from __future__ import annotations

import pytest

from agents.models import ToolCall, ToolPolicy
from agents.services import run_create
from tests.conftest import make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call, scoped_toolbox
from usage.models import ToolLimit
from usage.services import tool_limit_reason

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def box(roles):
    toolbox, scope = scoped_toolbox()
    with scope:
        ToolPolicy.objects.create(tool_name="kb_lookup", risk="read", approval_mode="never")
        yield toolbox


def lookup_turn(fake, sink_for, thread, user, n):
    fake.script(tool_call_chunks([call(f"c{n}", "kb_lookup", {"query": f"q{n}"})]), text_chunks(f"answer {n}"))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=user, content=f"look up {n}")
    return created.run, sink


def test_calls_over_the_limit_go_to_approval_and_run_once_approved(box, users, workspaces, openai_provider,
                                                                    fake_openai, sink_for, api_for):
    ToolLimit.objects.create(tool_name="kb_lookup", max_calls=2, period="day")
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    for n in (1, 2):  # within the limit: no person involved
        run, sink = lookup_turn(fake_openai, sink_for, thread, users["alice"], n)
        events = sink.until_terminal(run.pk)
        assert types(events)[-1] == "run.completed" and "approval.requested" not in types(events)
    assert [c[1]["query"] for c in box.calls] == ["q1", "q2"]

    run, sink = lookup_turn(fake_openai, sink_for, thread, users["alice"], 3)
    request = sink.until_parked(run.pk)[-1]
    assert request["tool"] == "kb_lookup" and "the limit is 2" in request["reason"]
    assert len(box.calls) == 2  # the third call did not run
    ledger = ToolCall.objects.get(pk=request["tool_call_id"])
    assert ledger.status == "awaiting_approval"

    response = api_for(users["alice"]).post(f"/api/v1/tool-calls/{ledger.pk}/decision/", {"decision": "approve"}, format="json")
    assert response.status_code == 200
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"
    assert [c[1]["query"] for c in box.calls] == ["q1", "q2", "q3"]


def test_limits_count_per_user_and_per_workspace(box, users, workspaces, openai_provider, fake_openai, sink_for):
    ToolLimit.objects.create(tool_name="kb_lookup", workspace=workspaces["demo"], max_calls=1, period="month")
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, sink = lookup_turn(fake_openai, sink_for, thread, users["alice"], 1)
    assert types(sink.until_terminal(run.pk))[-1] == "run.completed"

    args = {"tool_name": "kb_lookup"}
    assert tool_limit_reason(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk, **args)
    assert tool_limit_reason(user_id=users["bob"].pk, workspace_id=workspaces["demo"].pk, **args) is None
    assert tool_limit_reason(user_id=users["alice"].pk, workspace_id=workspaces["other"].pk, **args) is None
    assert tool_limit_reason(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk,
                             tool_name="report_view") is None
