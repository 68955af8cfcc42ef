"""A NUL character from a peer — model text, reasoning, tool-call arguments, a tool's result —
is stored as U+FFFD and streamed as the same text (chatplatform.safe_input.storable), so the
run completes on PostgreSQL, which stores no NUL in ``text`` or ``jsonb``. Users' own input
with NUL is refused instead (tests/bad_input). Marked ``db_backends``: SQLite here,
PostgreSQL in the services pass, where the unfixed code failed the run."""

from __future__ import annotations

import pytest

from agents.models import ToolCall
from agents.tools import make_spec, registry
from chat.models import Message
from chatplatform.safe_input import storable
from tests.conftest import joined_text, make_thread
from tests.fakes.openai_server import reasoning_chunks, text_chunks, tool_call_chunks
from tests.providers.wire_helpers import *  # noqa: F403  (fixtures: assert_completed, …)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]

R = "\ufffd"


@pytest.fixture
def nul_tool():
    """``echo_nul(city)`` answers with a NUL in a key and in a nested value, as an external
    tool source might."""
    calls = []

    def func(*, ctx, city):
        calls.append(city)
        return {"summary": "echo\x00ed", "forecast\x00": [{"city": city, "sky": "gr\x00ey"}]}

    spec = make_spec(name="echo_nul", description="echo", risk="read", func=func,
                     parameters={"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]})
    with registry.scoped(spec):
        yield calls


def test_nul_from_model_and_tool_is_stored_as_replacement_character(
    users, workspaces, openai_provider, fake_openai, converse, nul_tool
):
    fake_openai.script(
        reasoning_chunks("let me th\x00ink") + tool_call_chunks([("call_1", "echo_nul", '{"city": "Os\\u0000lo"}')]),
        text_chunks("Oslo is \x00grey\x00 today.", pieces=3),
    )
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)

    run, events = converse(thread, users["alice"], "Weather in Oslo?")

    final = assert_completed(run, events)  # noqa: F405
    assert final.content == f"Oslo is {R}grey{R} today."
    assert joined_text(events) == final.content  # what streamed is what was stored
    assert nul_tool == [f"Os{R}lo"]  # the tool got the parsed argument, NUL replaced
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == ToolCall.Status.SUCCEEDED
    assert ledger.arguments["city"] == f"Os{R}lo"
    assert ledger.result == {"summary": f"echo{R}ed", f"forecast{R}": [{"city": f"Os{R}lo", "sky": f"gr{R}ey"}]}
    assert ledger.summary == f"echo{R}ed"
    tool_message = Message.objects.get(run=run, role="tool")
    assert "\x00" not in tool_message.content and f"gr{R}ey" in tool_message.content
    first = Message.objects.filter(run=run, role="assistant").order_by("position").first()
    assert "\x00" not in first.reasoning and (first.reasoning == "" or f"th{R}ink" in first.reasoning)


def test_storable_replaces_at_any_depth_and_returns_clean_values_unchanged():
    clean = {"a": ["b", ("c", 1)], "d": None}
    assert storable(clean) is clean
    assert storable("plain") == "plain"
    dirty = {"k\x00": ["v\x00", ("t\x00", 2)], "ok": {"deep": "x\x00\x00"}}
    assert storable(dirty) == {f"k{R}": [f"v{R}", (f"t{R}", 2)], "ok": {"deep": f"x{R}{R}"}}
    assert dirty["ok"]["deep"] == "x\x00\x00"  # the input is not changed in place
