"""Every wire-format case in tests/cases/openai/ (and each of its variants) through the real
loop: run_create → embedded executor → run_turn → OpenAI SDK → the fake server over
loopback HTTP → channel layer events.

Each test asserts what the case's ``expected`` field names: tool executions (exact args,
exactly once), the persisted Message rows, the requests the fake received, and the events a
client saw.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest

from agents.models import LLMModel, Run, ToolCall
from chat.models import Message
from chat.services import message_create, title_from_message
from tests.conftest import CASES, joined_text, load_case, make_thread, types
from tests.fakes.openai_server import text_chunks
from tests.providers.wire_helpers import *  # noqa: F403  (fixtures: tool_log, no_coalescing, …)

pytestmark = pytest.mark.django_db(transaction=True)

COVERED_CASES = {"openai-01", "openai-02", "openai-03", "openai-04", "openai-05", "openai-06", "openai-07"}


# --------------------------------------------------------------------------------------- #
# Fixtures and helpers
# --------------------------------------------------------------------------------------- #
@pytest.fixture
def alice_thread(users, workspaces, openai_provider):
    def make(**fields):
        return make_thread(users["alice"], workspaces["demo"], openai_provider, **fields)

    return make


def case_iterations(case_id_prefix: str) -> list:
    return copy.deepcopy(_case(case_id_prefix)["iterations"])


def _case(prefix: str) -> dict:
    path = next((CASES / "openai").glob(f"{prefix}-*.json"))
    return load_case(f"openai/{path.name}")


def chunk(delta: dict, finish_reason=None) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def tool_fragments(iteration: list) -> list[dict]:
    return [f for c in iteration for ch in (c.get("choices") or []) for f in (ch["delta"].get("tool_calls") or [])]


def assistant_messages(thread) -> list[Message]:
    return list(Message.objects.filter(thread=thread, role="assistant").order_by("position"))


def tool_messages(thread) -> list[Message]:
    return list(Message.objects.filter(thread=thread, role="tool").order_by("position"))


def assert_clean_events(events, run):
    """Sequence numbers 1..N without gaps, exactly one terminal event (run.completed),
    exactly one message.completed per assistant message, and the final text equals the
    concatenation of the deltas."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types(events)[0] == "run.started"
    assert types(events).count("run.completed") == 1
    assert "run.failed" not in types(events)
    assert types(events)[-1] == "run.completed"
    assert run.status == Run.Status.COMPLETED
    completed = [e for e in events if e["type"] == "message.completed"]
    ids = [e["message_id"] for e in completed]
    assert len(ids) == len(set(ids)), "a message was completed twice"
    msgs = Message.objects.filter(run=run, role="assistant")
    assert sorted(ids) == sorted(str(m.pk) for m in msgs)
    final = msgs.order_by("-position").first()
    assert ids[-1] == str(final.pk)
    assert final.content == joined_text(events)
    return final


def tool_turn(messages: list[dict]) -> int:
    """Index of the (only) assistant message with tool_calls in a request's messages."""
    found = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(found) == 1, messages
    return found[0]


def no_error_logs(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# --------------------------------------------------------------------------------------- #
# Meta: every case file is covered here
# --------------------------------------------------------------------------------------- #
def test_every_openai_case_has_tests():
    ids = {json.loads(p.read_text())["id"] for p in (CASES / "openai").glob("*.json")}
    assert ids == COVERED_CASES, f"new or removed case files: {ids ^ COVERED_CASES}"


# --------------------------------------------------------------------------------------- #
# openai-01: tool-call fragments without index
# --------------------------------------------------------------------------------------- #
def _01_as_given(its):
    return its


def _01_every_fragment_index_0(its):
    for frag in tool_fragments(its[0]):
        frag["index"] = 0
    return its


def _01_whole_call_one_chunk_no_index(its):
    frags = tool_fragments(its[0])
    args = "".join(f["function"].get("arguments") or "" for f in frags)
    whole = {"id": frags[0]["id"], "type": "function", "function": {"name": frags[0]["function"]["name"], "arguments": args}}
    assert "index" not in whole
    its[0] = [chunk({"role": "assistant", "tool_calls": [whole]}), chunk({}, "tool_calls")]
    return its


@pytest.mark.parametrize(
    "variant",
    [_01_as_given, _01_every_fragment_index_0, _01_whole_call_one_chunk_no_index],
    ids=["as-given-no-index", "variant-every-fragment-index-0", "variant-whole-call-one-chunk-no-index"],
)
def test_01_tool_call_fragments_without_index(variant, alice_thread, users, fake_openai, tool_log, converse, caplog):
    fake_openai.script(*variant(case_iterations("01")))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "What's the weather in Oslo?")

    final = assert_clean_events(events, run)
    assert final.content == "It is mild in Oslo." and final.status == "complete"
    # get_weather ran exactly once with the exact arguments.
    assert tool_log == [("get_weather", {"city": "Oslo"})]
    # One tool call persisted, on the tool-call assistant message, with its id and raw args.
    ledger = ToolCall.objects.get(run=run)
    assert (ledger.call_id, ledger.tool_name, ledger.status) == ("call_a", "get_weather", "succeeded")
    first = assistant_messages(thread)[0]
    assert first.tool_calls == [{"id": "call_a", "name": "get_weather", "arguments": '{"city": "Oslo"}'}]
    assert first.status == "complete"
    [tool_msg] = tool_messages(thread)
    assert tool_msg.tool_call_id == "call_a" and tool_msg.is_error is False
    assert json.loads(tool_msg.content)["args"] == {"city": "Oslo"}
    # The second request: assistant tool_calls message, then the tool result for call_a.
    assert len(fake_openai.requests) == 2
    msgs = fake_openai.requests[1]["messages"]
    i = tool_turn(msgs)
    assert msgs[i]["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    ]
    assert msgs[i + 1] == {"role": "tool", "tool_call_id": "call_a", "content": tool_msg.content}
    assert i + 2 == len(msgs)
    started = [e for e in events if e["type"] == "tool.started"]
    done = [e for e in events if e["type"] == "tool.completed"]
    assert len(started) == len(done) == 1 and done[0]["is_error"] is False
    assert not no_error_logs(caplog)


# --------------------------------------------------------------------------------------- #
# openai-02: parallel calls sharing index 0
# --------------------------------------------------------------------------------------- #
def test_02_parallel_calls_same_index_become_two_calls(alice_thread, users, fake_openai, tool_log, converse):
    fake_openai.script(*case_iterations("02"))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "Weather in Oslo and Rome?")

    final = assert_clean_events(events, run)
    assert final.content == "Oslo is cold, Rome is warm."
    assert tool_log == [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})]
    first = assistant_messages(thread)[0]
    assert first.tool_calls == [
        {"id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"id": "call_2", "name": "get_weather", "arguments": '{"city":"Rome"}'},
    ]
    tools = tool_messages(thread)
    assert [(m.tool_call_id, m.is_error) for m in tools] == [("call_1", False), ("call_2", False)]
    assert [json.loads(m.content)["args"]["city"] for m in tools] == ["Oslo", "Rome"]
    assert list(ToolCall.objects.filter(run=run).order_by("created_at").values_list("call_id", flat=True)) == [
        "call_1", "call_2",
    ]
    msgs = fake_openai.requests[1]["messages"]
    i = tool_turn(msgs)
    assert [c["function"]["arguments"] for c in msgs[i]["tool_calls"]] == ['{"city":"Oslo"}', '{"city":"Rome"}']
    assert [(m["role"], m["tool_call_id"]) for m in msgs[i + 1:]] == [("tool", "call_1"), ("tool", "call_2")]
    assert [e["is_error"] for e in events if e["type"] == "tool.completed"] == [False, False]


def test_02_part2_stored_glued_arguments_still_build_next_request(
    alice_thread, users, fake_openai, tool_log, converse
):
    """A thread whose stored tool call has '{..}{..}' arguments (written by an older,
    index-keyed accumulator) must still build its next request."""
    thread = alice_thread()
    glued = '{"city":"Oslo"}{"city":"Rome"}'
    message_create(thread_id=thread.pk, role="user", content="Weather in Oslo and Rome?")
    message_create(
        thread_id=thread.pk, role="assistant", content="",
        tool_calls=[{"id": "call_1", "name": "get_weather", "arguments": glued}],
    )
    message_create(
        thread_id=thread.pk, role="tool", tool_call_id="call_1", is_error=True,
        content="The arguments were not valid JSON. Call the tool again with a single JSON object.",
    )
    message_create(thread_id=thread.pk, role="assistant", content="Sorry, something went wrong.")
    assert fake_openai.validate_history
    fake_openai.script(text_chunks("Oslo is cold, Rome is warm."))

    run, events = converse(thread, users["alice"], "Try again please")

    final = assert_clean_events(events, run)
    assert final.content == "Oslo is cold, Rome is warm."
    assert tool_log == []
    [request] = fake_openai.requests  # accepted by the fake's history validation (no 400)
    msgs = request["messages"]
    i = tool_turn(msgs)
    args = msgs[i]["tool_calls"][0]["function"]["arguments"]
    assert isinstance(args, str)
    json.loads(args)  # replayed as valid JSON text
    assert msgs[i + 1]["role"] == "tool" and msgs[i + 1]["tool_call_id"] == "call_1"
    assert msgs[-1] == {"role": "user", "content": "Try again please"}
    # The stored row is left as it was (history is repaired on the way out only).
    stored = Message.objects.get(thread=thread, role="assistant", position=2)
    assert stored.tool_calls[0]["arguments"] == glued


# --------------------------------------------------------------------------------------- #
# openai-03: a no-parameter tool whose arguments never stream
# --------------------------------------------------------------------------------------- #
def _03_empty_string(its):
    assert tool_fragments(its[0])[0]["function"]["arguments"] == ""
    return its


def _03_no_arguments_key(its):
    del tool_fragments(its[0])[0]["function"]["arguments"]
    return its


def _03_arguments_null(its):
    tool_fragments(its[0])[0]["function"]["arguments"] = None
    return its


@pytest.mark.parametrize(
    "variant",
    [_03_empty_string, _03_no_arguments_key, _03_arguments_null],
    ids=["as-given-empty-string", "variant-no-arguments-key", "variant-arguments-null"],
)
def test_03_no_parameter_tool_without_arguments(variant, alice_thread, users, fake_openai, tool_log, converse):
    fake_openai.script(*variant(case_iterations("03")))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "What time is it?")

    final = assert_clean_events(events, run)
    assert final.content == "It is noon."  # the turn does not end empty
    assert tool_log == [("current_time", {})]
    first = assistant_messages(thread)[0]
    assert first.tool_calls == [{"id": "call_t", "name": "current_time", "arguments": "{}"}]
    [tool_msg] = tool_messages(thread)
    assert tool_msg.tool_call_id == "call_t" and tool_msg.is_error is False  # not invalid JSON
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == "succeeded" and ledger.is_error is False
    msgs = fake_openai.requests[1]["messages"]
    i = tool_turn(msgs)
    assert msgs[i]["tool_calls"][0]["function"] == {"name": "current_time", "arguments": "{}"}
    assert msgs[i + 1]["tool_call_id"] == "call_t"
    assert [e["is_error"] for e in events if e["type"] == "tool.completed"] == [False]


# --------------------------------------------------------------------------------------- #
# openai-04: invalid JSON arguments
# --------------------------------------------------------------------------------------- #
def _04_with_arguments(raw: str):
    def variant(its):
        frags = tool_fragments(its[0])
        frags[0]["function"]["arguments"] = raw
        # Drop the continuation fragment(s): the whole raw text is in the first one.
        its[0] = [c for c in its[0] if not any(f is not frags[0] for f in tool_fragments([c]))]
        assert "".join(f["function"]["arguments"] for f in tool_fragments(its[0])) == raw
        return its

    return variant


@pytest.mark.parametrize(
    ("variant", "raw"),
    [
        (lambda its: its, '{"query" "refund policy"}'),
        (_04_with_arguments("[1,2]"), "[1,2]"),
        (_04_with_arguments("null"), "null"),
    ],
    ids=["as-given-invalid-json", "variant-array-not-object", "variant-null"],
)
def test_04_invalid_json_arguments(variant, raw, alice_thread, users, fake_openai, tool_log, converse):
    fake_openai.script(*variant(case_iterations("04")))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "What is the refund policy?")

    final = assert_clean_events(events, run)  # the run completes
    assert final.content == "Sorry, let me answer directly."
    assert tool_log == []  # not executed
    first = assistant_messages(thread)[0]
    assert first.tool_calls == [{"id": "call_j", "name": "kb_search", "arguments": raw}]
    [tool_msg] = tool_messages(thread)
    assert tool_msg.tool_call_id == "call_j" and tool_msg.is_error is True
    # Short, actionable, quoting the raw arguments.
    assert len(tool_msg.content) <= 500
    assert "JSON" in tool_msg.content and "again" in tool_msg.content
    assert raw in tool_msg.content
    ledger = ToolCall.objects.get(run=run)
    assert ledger.status == "failed" and ledger.is_error is True and ledger.raw_arguments == raw
    # The error result is what iteration 2 sees, right after the replayed call.
    assert len(fake_openai.requests) == 2
    msgs = fake_openai.requests[1]["messages"]
    i = tool_turn(msgs)
    replayed = msgs[i]["tool_calls"][0]["function"]["arguments"]
    assert isinstance(replayed, str)
    json.loads(replayed)
    assert msgs[i + 1] == {"role": "tool", "tool_call_id": "call_j", "content": tool_msg.content}
    completed = [e for e in events if e["type"] == "tool.completed"]
    assert len(completed) == 1
    assert completed[0]["is_error"] is True and completed[0]["status"] == "failed"
    assert completed[0]["name"] == "kb_search"


def test_04_long_invalid_arguments_are_quoted_truncated(alice_thread, users, fake_openai, tool_log, converse):
    raw = '{"query" "' + "x" * 5000 + '"}'
    fake_openai.script(*_04_with_arguments(raw)(case_iterations("04")))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "What is the refund policy?")

    assert_clean_events(events, run)
    assert tool_log == []
    [tool_msg] = tool_messages(thread)
    assert tool_msg.is_error is True
    assert raw[:100] in tool_msg.content
    assert raw not in tool_msg.content
    assert len(tool_msg.content) < 600
    assert fake_openai.requests[1]["messages"][-1]["content"] == tool_msg.content


# --------------------------------------------------------------------------------------- #
# openai-05: thinking markup in content / reasoning_content
# --------------------------------------------------------------------------------------- #
def _05_reasoning_content(its):
    return [[
        chunk({"role": "assistant", "reasoning_content": "user asks "}),
        chunk({"reasoning_content": "2+2"}),
        chunk({"content": "It is "}),
        chunk({"content": "4."}),
        chunk({}, "stop"),
    ]]


def _05_only_closing_tag(its):
    # The chat template pre-filled "<think>": the stream starts inside the reasoning.
    joined = "".join(c["choices"][0]["delta"].get("content") or "" for c in its[0])
    assert joined.startswith("<think>")
    body = joined[len("<think>"):]
    cut1, cut2 = body.index("</th") + len("</th"), body.index("It")
    parts = [body[:5], body[5:cut1], body[cut1:cut2], body[cut2:]]
    assert "".join(parts) == body and "<think>" not in body
    return [[chunk({"role": "assistant", "content": parts[0]})] + [chunk({"content": p}) for p in parts[1:]]
            + [chunk({}, "stop")]]


@pytest.mark.parametrize(
    ("variant", "model"),
    [
        (lambda its: its, "fake-model"),
        (_05_reasoning_content, "fake-model"),
        (_05_only_closing_tag, "deepseek-r1"),
    ],
    ids=["as-given-split-think-tags", "variant-reasoning-content", "variant-only-closing-tag"],
)
def test_05_thinking_never_reaches_clients(
    variant, model, alice_thread, users, fake_openai, tool_log, converse, no_coalescing
):
    fake_openai.script(*variant(case_iterations("05")))
    thread = alice_thread(model=model)
    LLMModel.objects.get_or_create(provider=thread.provider, name=model)  # enabled in the admin
    run, events = converse(thread, users["alice"], "What is 2+2?")

    final = assert_clean_events(events, run)
    deltas = [e["delta"] for e in events if e["type"] == "text.delta"]
    assert deltas, "the answer was streamed"
    for d in deltas:  # not even briefly
        assert "<" not in d and ">" not in d and "think" not in d and "th" not in d.lower()
        assert "user asks" not in d and "2+2" not in d
    assert "".join(deltas) == "It is 4."
    assert final.content == "It is 4." and final.status == "complete"
    # Reasoning is kept apart (or dropped), never with tag fragments.
    assert final.reasoning in ("", "user asks 2+2")
    assert "<" not in final.reasoning and ">" not in final.reasoning
    for e in events:
        assert "user asks" not in json.dumps(e)
    # The auto-title comes from the user's message, never from reasoning.
    thread.refresh_from_db()
    assert thread.title == title_from_message("What is 2+2?")
    assert fake_openai.requests[0]["model"] == model


# --------------------------------------------------------------------------------------- #
# openai-06: the usage chunk has empty choices
# --------------------------------------------------------------------------------------- #
def _06_usage_before_finish(its):
    content, finish, usage = its[0]
    its[0] = [content, usage, finish]
    return its


def _06_choices_null(its):
    its[0][-1]["choices"] = None
    return its


@pytest.mark.parametrize(
    ("variant", "send_done"),
    [
        (lambda its: its, True),
        (_06_usage_before_finish, True),
        (_06_choices_null, True),
        (lambda its: its, False),
    ],
    ids=["as-given-empty-choices", "variant-usage-before-finish", "variant-choices-null", "variant-no-done"],
)
def test_06_usage_chunk_with_empty_choices(
    variant, send_done, alice_thread, users, fake_openai, converse, caplog
):
    raw = copy.deepcopy(_case("06")["raw_iterations"])
    fake_openai.script_raw(*variant(raw))
    fake_openai.send_done = send_done
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "Say hi")

    final = assert_clean_events(events, run)
    assert final.content == "Hi" and final.status == "complete"
    assert final.usage == {"input_tokens": 12, "output_tokens": 1, "cached_tokens": None, "reasoning_tokens": None,
                           "cost": None, "currency": ""}
    # Recorded once: no other message of the thread carries usage.
    assert [m.usage for m in Message.objects.filter(thread=thread) if m.usage] == [final.usage]
    assert types(events).count("message.completed") == 1
    assert types(events).count("run.completed") == 1
    assert types(events) == ["run.started", "text.delta", "message.completed", "run.completed"]
    assert len(fake_openai.requests) == 1
    assert fake_openai.requests[0]["stream_options"] == {"include_usage": True}
    assert no_error_logs(caplog) == []


# --------------------------------------------------------------------------------------- #
# openai-07: reasoning_content must be replayed (per-provider setting)
# --------------------------------------------------------------------------------------- #
REASONING = "Need the SLA doc."


def _has_key(obj, key: str) -> bool:
    if isinstance(obj, dict):
        return key in obj or any(_has_key(v, key) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_key(v, key) for v in obj)
    return False


@pytest.mark.parametrize("echo", [True, False], ids=["echo-on-strict-upstream", "echo-off-lenient-upstream"])
def test_07_reasoning_content_replay_follows_provider_setting(
    echo, alice_thread, users, openai_provider, fake_openai, tool_log, converse
):
    openai_provider.echo_reasoning = echo
    openai_provider.save()
    if echo:  # iteration 2 answers HTTP 400 unless the reasoning is replayed (DeepSeek)
        fake_openai.require_reasoning_content = REASONING
    fake_openai.script(*case_iterations("07"))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "What is our SLA?")

    final = assert_clean_events(events, run)
    assert final.content == "The SLA is 99.9%."
    assert tool_log == [("kb_search", {"query": "SLA"})]
    first = assistant_messages(thread)[0]
    assert first.reasoning == REASONING  # kept apart
    assert first.content == ""
    assert first.tool_calls == [{"id": "call_r", "name": "kb_search", "arguments": '{"query":"SLA"}'}]
    assert len(fake_openai.requests) == 2
    msgs = fake_openai.requests[1]["messages"]
    i = tool_turn(msgs)
    if echo:
        assert msgs[i]["reasoning_content"] == REASONING
    else:
        assert not any(_has_key(r, "reasoning_content") for r in fake_openai.requests)
    # Never shown as answer text.
    assert "SLA doc" not in joined_text(events)
    for m in Message.objects.filter(thread=thread):
        assert "SLA doc" not in m.content
    for e in events:
        assert "SLA doc" not in json.dumps(e)


def test_07_echo_off_against_strict_upstream_fails_with_the_upstream_reason(
    alice_thread, users, openai_provider, fake_openai, tool_log, converse
):
    """Why the setting exists: without the echo a DeepSeek-style upstream rejects
    iteration 2; the run fails cleanly with the upstream's 400 message."""
    assert openai_provider.echo_reasoning is False
    fake_openai.require_reasoning_content = REASONING
    fake_openai.script(*case_iterations("07"))
    thread = alice_thread()
    run, events = converse(thread, users["alice"], "What is our SLA?")

    assert run.status == Run.Status.FAILED
    assert types(events)[-1] == "run.failed"
    failed = events[-1]
    assert failed["error"]["code"] == "bad_request"
    assert "HTTP 400" in failed["error"]["message"] and "reasoning_content" in failed["error"]["message"]
    assert tool_log == [("kb_search", {"query": "SLA"})]  # iteration 1 still ran its tool once
    assert not any(_has_key(r, "reasoning_content") for r in fake_openai.requests)
    last = assistant_messages(thread)[-1]
    assert last.status == "error"
