"""Every wire-format case in tests/cases/anthropic/ (and each variant), plus the Anthropic
adapter's other wire rules, through the real loop: run_create → embedded executor →
run_turn → the ``anthropic`` SDK → the fake Messages API over loopback HTTP → events.

The fake rejects (HTTP 400) history the real API rejects: empty text blocks, a ``tool_use``
without its ``tool_result`` in the next user turn, non-alternating turns, ... so every
follow-up request asserted here was also accepted as valid.
"""

from __future__ import annotations

import copy
import json

import pytest

from agents.models import Run, ToolCall
from chat.models import Message
from tests.conftest import CASES, joined_text, load_case, make_thread, types
from tests.fakes.anthropic_server import message_delta, text_events, tool_use_events
from tests.providers.wire_helpers import *  # noqa: F403
from tests.providers.wire_helpers import assert_completed, error_logs

pytestmark = pytest.mark.django_db(transaction=True)

COVERED_CASES = {"anthropic-01", "anthropic-02"}


def case_events(prefix: str) -> list[dict]:
    path = next((CASES / "anthropic").glob(f"{prefix}-*.json"))
    return copy.deepcopy(load_case(f"anthropic/{path.name}")["events"])


@pytest.fixture
def alice_thread(users, workspaces, anthropic_provider):
    def make(**fields):
        return make_thread(users["alice"], workspaces["demo"], anthropic_provider, **fields)

    return make


def text_blocks(request: dict) -> list[str]:
    return [b["text"] for m in request["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "text"]


def assert_results_follow_uses(request: dict) -> None:
    """Every tool_use id has its tool_result in the immediately following user message."""
    msgs = request["messages"]
    for i, msg in enumerate(msgs):
        uses = [b["id"] for b in msg["content"] if isinstance(msg["content"], list) and b["type"] == "tool_use"]
        if uses:
            nxt = msgs[i + 1]
            assert nxt["role"] == "user"
            assert [b["tool_use_id"] for b in nxt["content"] if b["type"] == "tool_result"] == uses


def test_every_anthropic_case_has_tests():
    ids = {json.loads(p.read_text())["id"] for p in (CASES / "anthropic").glob("*.json")}
    assert ids == COVERED_CASES, f"new or removed case files: {ids ^ COVERED_CASES}"


# --------------------------------------------------------------------------------------- #
# anthropic-01: an empty text block beside a tool_use
# --------------------------------------------------------------------------------------- #
def _01_as_given(events):
    return events


def _01_text_before_tool_use(events):
    # "block 0 carries the text 'Let me check.' delivered as a text_delta"
    stop0 = next(i for i, e in enumerate(events) if e["type"] == "content_block_stop" and e["index"] == 0)
    events.insert(stop0, {"type": "content_block_delta", "index": 0,
                          "delta": {"type": "text_delta", "text": "Let me check."}})
    return events


@pytest.mark.parametrize("variant", [_01_as_given, _01_text_before_tool_use],
                         ids=["as-given-empty-text-block", "variant-text-let-me-check"])
def test_01_empty_text_block_is_never_replayed(variant, alice_thread, users, fake_anthropic, tool_log, converse,
                                               caplog):
    fake_anthropic.script(variant(case_events("01")), text_events("It is noon."))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "What time is it?")

    final = assert_completed(run, events)
    assert final.content == "It is noon."
    assert tool_log == [("current_time", {})]  # ran once, with {}
    first = Message.objects.filter(thread=thread, role="assistant").order_by("position").first()
    assert first.tool_calls == [{"id": "toolu_1", "name": "current_time", "arguments": "{}"}]
    [tool_msg] = Message.objects.filter(thread=thread, role="tool")
    assert tool_msg.tool_call_id == "toolu_1" and not tool_msg.is_error

    assert len(fake_anthropic.message_requests) == 2  # the follow-up was accepted
    follow_up = fake_anthropic.message_requests[1]
    assert all(t.strip() for t in text_blocks(follow_up)), "an empty text block was replayed"
    assert_results_follow_uses(follow_up)
    turn = next(m for m in follow_up["messages"] if m["role"] == "assistant")
    if variant is _01_as_given:
        assert turn["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "current_time", "input": {}}]
        assert joined_text(events) == "It is noon."
    else:  # replayed as [text, tool_use], in that order; the user saw the text
        assert turn["content"] == [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "current_time", "input": {}},
        ]
        assert first.content == "Let me check."
        assert joined_text(events) == "Let me check.It is noon."
    assert not error_logs(caplog)


# --------------------------------------------------------------------------------------- #
# anthropic-02: tool input as input_json_delta fragments
# --------------------------------------------------------------------------------------- #
def test_02_input_json_fragments_are_assembled(alice_thread, users, fake_anthropic, tool_log, converse):
    fake_anthropic.script(case_events("02"), text_events("Here is the VPN setup."))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "How do I set up the VPN?")

    assert_completed(run, events)
    assert tool_log == [("kb_search", {"query": "vpn setup", "top_k": 3})]  # exactly once
    ledger = ToolCall.objects.get(run=run)
    assert ledger.call_id == "toolu_2" and ledger.status == "succeeded"
    follow_up = fake_anthropic.message_requests[1]
    turn = next(m for m in follow_up["messages"] if m["role"] == "assistant")
    assert turn["content"] == [{"type": "tool_use", "id": "toolu_2", "name": "kb_search",
                                "input": {"query": "vpn setup", "top_k": 3}}]
    assert_results_follow_uses(follow_up)


def test_02_variant_malformed_fragments_give_an_actionable_error_result(
    alice_thread, users, fake_anthropic, tool_log, converse, caplog
):
    events = [e for e in case_events("02") if e.get("delta", {}).get("type") != "input_json_delta"]
    stop = next(i for i, e in enumerate(events) if e["type"] == "content_block_stop")
    for part in reversed(['{"query": ', "vpn}"]):
        events.insert(stop, {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "input_json_delta", "partial_json": part}})
    fake_anthropic.script(events, text_events("Let me answer directly."))
    thread = alice_thread()
    run, events_out = converse(thread, users["alice"], "How do I set up the VPN?")

    final = assert_completed(run, events_out)  # the worker did not crash; the run completed
    assert final.content == "Let me answer directly."
    assert tool_log == []  # not executed
    [tool_msg] = Message.objects.filter(thread=thread, role="tool")
    assert tool_msg.is_error and "JSON" in tool_msg.content and "again" in tool_msg.content
    assert '{"query": vpn}' in tool_msg.content
    follow_up = fake_anthropic.message_requests[1]
    assert_results_follow_uses(follow_up)
    user_turn = follow_up["messages"][-1]
    assert user_turn["role"] == "user"
    [result] = [b for b in user_turn["content"] if b["type"] == "tool_result"]
    assert result == {"type": "tool_result", "tool_use_id": "toolu_2", "content": tool_msg.content, "is_error": True}
    replayed = next(m for m in follow_up["messages"] if m["role"] == "assistant")["content"][0]
    assert replayed["input"] == {}  # never-parsed arguments replay as an empty object
    completed = [e for e in events_out if e["type"] == "tool.completed"]
    assert [(e["is_error"], e["status"]) for e in completed] == [(True, "failed")]
    assert not error_logs(caplog)


# --------------------------------------------------------------------------------------- #
# Other wire rules of the issue
# --------------------------------------------------------------------------------------- #
def test_max_tokens_in_the_middle_of_a_tool_call_truncates_and_never_executes(
    alice_thread, users, fake_anthropic, tool_log, converse
):
    events = text_events("Let me look that up.", stop_reason=None)
    events += tool_use_events("toolu_cut", "kb_search", '{"query": "vp', index=1, stop_reason=None)
    events.append(message_delta("max_tokens", 4096))
    fake_anthropic.script(events)
    thread = alice_thread()
    run, out = converse(thread, users["alice"], "Search the VPN docs")

    assert run.status == Run.Status.COMPLETED and types(out)[-1] == "run.completed"
    assert tool_log == [] and not ToolCall.objects.filter(run=run).exists()
    [msg] = Message.objects.filter(run=run, role="assistant")
    assert msg.status == "truncated" and msg.tool_calls == []
    assert msg.content == "Let me look that up." == joined_text(out)
    assert [e["status"] for e in out if e["type"] == "message.completed"] == ["truncated"]
    assert len(fake_anthropic.message_requests) == 1


def test_parallel_tool_results_share_one_user_turn_in_call_order(
    alice_thread, users, fake_anthropic, tool_log, converse
):
    events = tool_use_events("toolu_a", "get_weather", '{"city": "Oslo"}', index=0, stop_reason=None)
    events += tool_use_events("toolu_b", "get_weather", '{"city": "Rome"}', index=1)
    fake_anthropic.script(events, text_events("Oslo is cold, Rome is warm."))
    thread = alice_thread()
    run, out = converse(thread, users["alice"], "Weather in Oslo and Rome?")

    assert_completed(run, out)
    assert tool_log == [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})]
    msgs = fake_anthropic.message_requests[1]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert [b["id"] for b in msgs[1]["content"]] == ["toolu_a", "toolu_b"]
    assert [(b["type"], b["tool_use_id"]) for b in msgs[2]["content"]] == [
        ("tool_result", "toolu_a"), ("tool_result", "toolu_b")]


def test_system_prompt_is_the_system_field_and_tools_carry_their_schema(
    alice_thread, users, fake_anthropic, tool_log, converse
):
    fake_anthropic.script(text_events("Hi!"))
    run, out = converse(alice_thread(), users["alice"], "Hello")

    assert_completed(run, out)
    [body] = fake_anthropic.message_requests
    assert "Demo team" in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert body["messages"][0]["content"] == [{"type": "text", "text": "Hello"}]
    tools = {t["name"]: t for t in body["tools"]}
    assert tools["kb_search"]["input_schema"] == load_case("tools.json")["kb_search"]["parameters"]
    assert body["max_tokens"] == 8192 and body["stream"] is True


def test_thinking_deltas_are_stored_apart_never_streamed(
    alice_thread, users, fake_anthropic, tool_log, converse, no_coalescing
):
    thinking = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "user greets; "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "be brief"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}},
        {"type": "content_block_stop", "index": 0},
    ]
    fake_anthropic.script(thinking + text_events("Hello!", index=1))
    run, out = converse(alice_thread(), users["alice"], "Hi")

    final = assert_completed(run, out)
    assert final.content == "Hello!" and final.reasoning == "user greets; be brief"
    assert "be brief" not in json.dumps(out)


def test_multibyte_characters_split_across_network_reads(alice_thread, users, fake_anthropic, converse):
    text = "Grüße aus Köln — ✓ 日本語 🙂"
    fake_anthropic.split_utf8 = True  # every event is cut inside its first multibyte character
    fake_anthropic.script(text_events(text, pieces=6))
    run, out = converse(alice_thread(), users["alice"], "Say hello")

    final = assert_completed(run, out)
    assert final.content == text and "\ufffd" not in joined_text(out)
