"""Issue 17: a tool call cut off by the output limit but reported as
``finish_reason: "tool_calls"`` ends the turn as truncated after at most one retry, with
its reason shown — it never loops to the iteration cap."""

from __future__ import annotations

import pytest

from agents.loop.cutoff import arguments_cut_off
from agents.models import ToolCall
from chat.models import Message
from tests.conftest import make_thread
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.policy.tooltest import call, scoped_toolbox

CUT = '{"text": "a very long note that the model never fini'


@pytest.mark.parametrize(("raw", "cut"), [
    ('{"text": "x"}', False),
    ('{"text": "x"', True),
    ('{"text": "x', True),
    ('{"text": ', True),
    ('{"ids": [1, 2', True),
    ('{"text": "a \\" quote', True),
    ('{"text": "x"}}', False),  # malformed, not cut off
    ('{"text": ]', False),
    ("not json", False),
    ("", False),
])
def test_cut_off_arguments_are_told_from_malformed_ones(raw, cut):
    assert arguments_cut_off(raw) is cut


@pytest.mark.django_db(transaction=True)
def test_repeatedly_cut_off_call_ends_truncated_after_one_retry(
        roles, users, workspaces, openai_provider, fake_openai, converse, settings):
    settings.AGENT_MAX_ITERATIONS = 8
    box, scope = scoped_toolbox()
    with scope:
        thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
        fake_openai.script(*[tool_call_chunks([call(f"c{i}", "note_write", CUT)]) for i in range(8)])
        run, events = converse(thread, users["alice"], "write a long note")
    assert len(fake_openai.requests) == 2  # the first try and one retry, not 8
    assert box.calls == []  # a half-built call never runs
    assert run.status == "completed"
    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert final.status == "truncated"
    assert final.error["code"] == "output_limit" and "output limit" in final.error["message"]
    assert not final.tool_calls
    # The retry told the model why its first call failed.
    retry_note = Message.objects.get(thread=thread, role="tool")
    assert retry_note.is_error and "cut off" in retry_note.content
    assert ToolCall.objects.filter(run=run).count() == 1
    completed = [e for e in events if e["type"] == "message.completed"]
    assert completed[-1]["status"] == "truncated"
    # The live stream's end carries the reason too, not only the stored message.
    assert events[-1]["type"] == "run.completed"
    assert events[-1]["truncated"] == {"code": "output_limit", "message": final.error["message"]}


@pytest.mark.django_db(transaction=True)
def test_a_cut_off_call_that_succeeds_on_retry_continues_normally(
        roles, users, workspaces, openai_provider, fake_openai, converse):
    box, scope = scoped_toolbox()
    with scope:
        thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
        fake_openai.script(tool_call_chunks([call("c1", "kb_lookup", '{"query": "wh')]),
                           tool_call_chunks([call("c2", "kb_lookup", {"query": "what"})]),
                           text_chunks("Found it."))
        run, events = converse(thread, users["alice"], "look it up")
    assert box.names() == ["kb_lookup"]
    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert final.status == "complete" and final.content == "Found it."
    assert events[-1]["type"] == "run.completed" and events[-1]["truncated"] is None


@pytest.mark.django_db(transaction=True)
def test_manage_ask_says_why_a_completed_answer_was_cut_off(roles, users, workspaces, openai_provider, fake_openai):
    from io import StringIO

    from django.core.management import call_command

    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    fake_openai.script(*[tool_call_chunks([call(f"c{i}", "search_knowledge", CUT)]) for i in range(2)])
    out = StringIO()
    try:
        call_command("ask", "--user", "alice", "--thread", str(thread.pk), "--timeout", "30", "write a long note",
                     stdout=out, stderr=StringIO())
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    assert "[completed, truncated] The model's reply reached its output limit" in out.getvalue()
