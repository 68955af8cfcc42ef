"""A thread can switch provider mid-conversation, tool calls and results included, and the
next request is valid for the new provider (each fake rejects invalid history with a 400).

Also here: parity checks every provider must pass the same way (multibyte characters cut
across network reads on the OpenAI-compatible wire, ids from other servers on Anthropic).
"""

from __future__ import annotations

import json
import time

import pytest

from agents.models import LLMModel, Run, ToolCall
from chat.models import Message, Thread
from tests.conftest import joined_text, make_thread
from tests.fakes import openai_server
from tests.fakes.anthropic_server import text_events, tool_use_events
from tests.fakes.ollama_server import text_parts, tool_call_part
from tests.fakes.openai_server import text_chunks, tool_call_chunks
from tests.providers.wire_helpers import *  # noqa: F403
from tests.providers.wire_helpers import assert_completed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def switch(users, api_for):
    """``switch(thread, provider, model)`` through ``PATCH /api/v1/threads/{id}/``."""
    client = api_for(users["alice"])

    def go(thread, provider, model):
        response = client.patch(f"/api/v1/threads/{thread.pk}/", {"provider": provider.slug, "model": model},
                                format="json")
        assert response.status_code == 200, response.content
        assert response.json()["provider"] == provider.slug and response.json()["model"] == model
        return Thread.objects.get(pk=thread.pk)

    return go


def _tool_pairs(thread) -> list[tuple[str, str]]:
    """(call id, tool name) of every call in the thread, in order."""
    return [(c["id"], c["name"]) for m in Message.objects.filter(thread=thread, role="assistant").order_by("position")
            for c in m.tool_calls]


def test_tool_conversation_moves_openai_anthropic_ollama_and_back(
    users, workspaces, openai_provider, anthropic_provider, ollama_provider,
    fake_openai, fake_anthropic, fake_ollama, tool_log, converse, switch,
):
    alice = users["alice"]
    LLMModel.objects.create(provider=anthropic_provider, name="claude-fake-2")  # enabled in the admin
    thread = make_thread(alice, workspaces["demo"], openai_provider)

    # 1. OpenAI-compatible: a tool call (get_weather), its result, an answer.
    fake_openai.script(tool_call_chunks([("call_w1", "get_weather", '{"city": "Oslo"}')]), text_chunks("Oslo: 4 °C."))
    run, events = converse(thread, alice, "Weather in Oslo?")
    assert_completed(run, events)

    # 2. Anthropic: the OpenAI tool group is replayed as tool_use / tool_result.
    thread = switch(thread, anthropic_provider, "claude-fake-2")
    fake_anthropic.script(tool_use_events("toolu_k1", "kb_search", '{"query": "umbrella policy"}'),
                          text_events("Take an umbrella."))
    run, events = converse(thread, alice, "Do I need an umbrella?")
    assert_completed(run, events)
    first = fake_anthropic.message_requests[0]
    assert first["model"] == "claude-fake-2"
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert first["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_w1", "name": "get_weather", "input": {"city": "Oslo"}}]
    assert first["messages"][2]["content"][0]["tool_use_id"] == "call_w1"

    # 3. Ollama: both earlier groups replayed with object arguments and tool names.
    thread = switch(thread, ollama_provider, "qwen2.5:14b")
    fake_ollama.script([tool_call_part(("current_time", {}))], text_parts("It is noon."))
    run, events = converse(thread, alice, "What time is it?")
    assert_completed(run, events)
    sent = fake_ollama.chat_requests[0]["messages"]
    calls = [c["function"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert calls == [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                     {"name": "kb_search", "arguments": {"query": "umbrella policy"}}]
    assert [m["tool_name"] for m in sent if m["role"] == "tool"] == ["get_weather", "kb_search"]

    # 4. Back to OpenAI-compatible: three providers' tool groups, ids included, in one valid request.
    thread = switch(thread, openai_provider, "fake-model")
    fake_openai.script(text_chunks("Anything else?"))
    run, events = converse(thread, alice, "Thanks!")
    assert_completed(run, events)
    msgs = fake_openai.requests[-1]["messages"]
    ids = [c["id"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert ids == [cid for cid, _ in _tool_pairs(thread)]
    assert ids[:2] == ["call_w1", "toolu_k1"] and ids[2].startswith("call_")
    assert [m["tool_call_id"] for m in msgs if m["role"] == "tool"] == ids

    # 5. And Anthropic once more: the Ollama-minted id is valid there too.
    thread = switch(thread, anthropic_provider, "claude-fake-1")
    fake_anthropic.script(text_events("Bye."))
    run, events = converse(thread, alice, "Bye")
    assert_completed(run, events)
    uses = [b["id"] for m in fake_anthropic.message_requests[-1]["messages"] if m["role"] == "assistant"
            for b in m["content"] if b["type"] == "tool_use"]
    assert uses == ids

    assert tool_log == [("get_weather", {"city": "Oslo"}), ("kb_search", {"query": "umbrella policy"}),
                        ("current_time", {})]
    assert Run.objects.filter(thread=thread, status="completed").count() == 5
    assert [m.provider for m in Message.objects.filter(thread=thread, role="assistant", content__gt="")
            .order_by("position")] == ["fake-openai", "fake-anthropic", "fake-ollama", "fake-openai", "fake-anthropic"]


def test_anthropic_first_then_openai_then_ollama(
    users, workspaces, openai_provider, anthropic_provider, ollama_provider,
    fake_openai, fake_anthropic, fake_ollama, tool_log, converse, switch,
):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], anthropic_provider)
    events = text_events("Let me check.", stop_reason=None)
    events += tool_use_events("toolu_a", "get_weather", '{"city": "Rome"}', index=1, stop_reason=None)
    events += tool_use_events("toolu_b", "current_time", "", index=2)
    fake_anthropic.script(events, text_events("Rome is warm; it is noon."))
    run, out = converse(thread, alice, "Rome weather and the time?")
    assert_completed(run, out)

    thread = switch(thread, openai_provider, "fake-model")
    fake_openai.script(text_chunks("Sure."))
    run, out = converse(thread, alice, "Thanks")
    assert_completed(run, out)
    msgs = fake_openai.requests[-1]["messages"]
    turn = next(m for m in msgs if m["role"] == "assistant" and m.get("tool_calls"))
    assert turn["content"] == "Let me check."
    assert [(c["id"], c["function"]["arguments"]) for c in turn["tool_calls"]] == [
        ("toolu_a", '{"city": "Rome"}'), ("toolu_b", "{}")]

    thread = switch(thread, ollama_provider, "qwen2.5:14b")
    fake_ollama.script(text_parts("Ciao."))
    run, out = converse(thread, alice, "Bye")
    assert_completed(run, out)
    assert [m["tool_name"] for m in fake_ollama.chat_requests[-1]["messages"] if m["role"] == "tool"] == [
        "get_weather", "current_time"]


def test_foreign_ids_and_reused_ids_are_made_valid_for_anthropic(
    users, workspaces, openai_provider, anthropic_provider, fake_openai, fake_anthropic, tool_log, converse, switch,
):
    """A local server's ids ("functions.get_weather:0", or "call_0" in every turn) are not
    valid or not unique on Anthropic: they are rewritten the same way for use and result."""
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    fake_openai.script(tool_call_chunks([("functions.get_weather:0", "get_weather", '{"city": "Oslo"}')]),
                       text_chunks("Cold."),
                       tool_call_chunks([("call_0", "current_time", "{}")]), text_chunks("Noon."),
                       tool_call_chunks([("call_0", "current_time", "{}")]), text_chunks("Still noon."))
    for question in ("Oslo?", "Time?", "Time again?"):
        run, out = converse(thread, alice, question)
        assert_completed(run, out)

    thread = switch(thread, anthropic_provider, "claude-fake-1")
    fake_anthropic.script(text_events("Done."))
    run, out = converse(thread, alice, "Summary?")
    assert_completed(run, out)  # the fake checks id patterns, uniqueness and pairing
    msgs = fake_anthropic.message_requests[-1]["messages"]
    uses = [b["id"] for m in msgs for b in m["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in msgs for b in m["content"] if b["type"] == "tool_result"]
    assert uses == results and len(set(uses)) == 3
    assert uses[0].startswith("functions_get_weather_0_") and uses[1] == "call_0" and uses[2] == "call_0_2"


def test_a_failed_half_turn_does_not_poison_the_next_provider(
    users, workspaces, openai_provider, anthropic_provider, fake_openai, fake_anthropic, tool_log, converse, switch,
):
    """The OpenAI run dies after its tool call was stored but before a result: the history
    repair answers the call, so Anthropic still gets a valid request."""
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    fake_openai.script(tool_call_chunks([("call_x", "get_weather", '{"city": "Oslo"}')]),
                       openai_server.Failure(status=500, message="boom"))
    run, out = converse(thread, alice, "Oslo?")
    assert run.status == Run.Status.FAILED
    assert ToolCall.objects.filter(run=run, status="succeeded").count() == 1
    # Drop the stored result to simulate a crash between the call and its result.
    Message.objects.filter(thread=thread, role="tool").delete()

    thread = switch(thread, anthropic_provider, "claude-fake-1")
    fake_anthropic.script(text_events("Recovered."))
    run, out = converse(thread, alice, "Again?")
    assert_completed(run, out)
    msgs = fake_anthropic.message_requests[-1]["messages"]
    [result] = [b for m in msgs for b in m["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "call_x" and result["is_error"] is True


# --------------------------------------------------------------------------------------- #
# Parity: multibyte characters cut across network reads, on the OpenAI-compatible wire
# --------------------------------------------------------------------------------------- #
SPLIT_EVENTS: list[bytes] = []


def _split_send_event(self, payload: str) -> None:
    if payload != "[DONE]":  # raw UTF-8 on the wire (the fake escapes to ASCII by default)
        payload = json.dumps(json.loads(payload), ensure_ascii=False)
    data = f"data: {payload}\n\n".encode()
    cut = next((i + 1 for i, b in enumerate(data) if b >= 0xC0), None)
    if cut is None:
        self.write(b"%X\r\n%s\r\n" % (len(data), data))
        return
    SPLIT_EVENTS.append(data)
    for piece in (data[:cut], data[cut:]):  # two HTTP chunks, cut inside one character
        self.write(b"%X\r\n%s\r\n" % (len(piece), piece))
        time.sleep(0.02)


def test_openai_multibyte_characters_split_across_network_reads(
    users, workspaces, openai_provider, fake_openai, converse, monkeypatch
):
    monkeypatch.setattr(openai_server._Handler, "_send_event", _split_send_event)
    text = "Grüße aus Köln — ✓ 日本語 🙂"
    fake_openai.script(text_chunks(text, pieces=6))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = converse(thread, users["alice"], "Say hello")
    final = assert_completed(run, events)
    assert final.content == text == joined_text(events)
    assert "\ufffd" not in json.dumps(events, ensure_ascii=False)
    assert len(SPLIT_EVENTS) >= 5  # the characters really were cut across reads


# --------------------------------------------------------------------------------------- #
# Parity: a tool call cut off by the output limit is never executed, on every provider
# --------------------------------------------------------------------------------------- #
def _length_scripts(fake_openai, fake_anthropic, fake_ollama):
    from tests.fakes.anthropic_server import message_delta
    from tests.fakes.ollama_server import done

    def openai_():
        fake_openai.script([
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Looking "}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_cut", "type": "function",
                                                                "function": {"name": "kb_search",
                                                                             "arguments": '{"query": "vp'}}]},
                          "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        ])

    def anthropic_():
        events = text_events("Looking ", stop_reason=None)
        events += tool_use_events("toolu_cut", "kb_search", '{"query": "vp', index=1, stop_reason=None)
        fake_anthropic.script(events + [message_delta("max_tokens")])

    def ollama_():
        fake_ollama.script([{"content": "Looking "}, tool_call_part(("kb_search", {"query": "vp"})), done("length")])

    return {"openai": openai_, "anthropic": anthropic_, "ollama": ollama_}


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "ollama"])
def test_length_in_the_middle_of_a_tool_call_truncates_on_every_provider(
    fmt, users, workspaces, openai_provider, anthropic_provider, ollama_provider,
    fake_openai, fake_anthropic, fake_ollama, tool_log, converse,
):
    provider = {"openai": openai_provider, "anthropic": anthropic_provider, "ollama": ollama_provider}[fmt]
    _length_scripts(fake_openai, fake_anthropic, fake_ollama)[fmt]()
    thread = make_thread(users["alice"], workspaces["demo"], provider)
    run, events = converse(thread, users["alice"], "Search the VPN docs")

    assert run.status == Run.Status.COMPLETED
    assert tool_log == [] and not ToolCall.objects.filter(run=run).exists()
    [msg] = Message.objects.filter(run=run, role="assistant")
    assert (msg.status, msg.tool_calls, msg.content) == ("truncated", [], "Looking ")
    assert [e["status"] for e in events if e["type"] == "message.completed"] == ["truncated"]


# --------------------------------------------------------------------------------------- #
# The reasoning echo flag: per provider, overridden per model (shared/cases/openai/07)
# --------------------------------------------------------------------------------------- #
@pytest.mark.parametrize(("provider_flag", "model_flag", "echoed"), [
    (False, True, True), (True, False, False), (True, None, True), (False, None, False),
])
def test_reasoning_echo_per_model_overrides_the_provider(
    provider_flag, model_flag, echoed, users, workspaces, openai_provider, fake_openai, tool_log, converse,
):
    from agents.models import LLMModel
    from tests.conftest import load_case

    openai_provider.echo_reasoning = provider_flag
    openai_provider.save()
    LLMModel.objects.create(provider=openai_provider, name="deepseek-reasoner", echo_reasoning=model_flag)
    if echoed:
        fake_openai.require_reasoning_content = "Need the SLA doc."  # strict upstream: 400 without it
    fake_openai.script(*load_case("openai/07-reasoning-content-must-be-replayed.json")["iterations"])
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider, model="deepseek-reasoner")
    run, events = converse(thread, users["alice"], "What is our SLA?")

    assert_completed(run, events)
    replayed = [m for m in fake_openai.requests[1]["messages"] if m.get("tool_calls")][0]
    assert replayed.get("reasoning_content") == ("Need the SLA doc." if echoed else None)
    assert "SLA doc" not in joined_text(events)


@pytest.mark.parametrize("echo", [True, False])
def test_ollama_echoes_thinking_on_tool_turns_only_when_asked(
    echo, users, workspaces, ollama_provider, fake_ollama, tool_log, converse,
):
    ollama_provider.echo_reasoning = echo
    ollama_provider.save()
    fake_ollama.script([{"content": "", "thinking": "Need the time."}, tool_call_part(("current_time", {}))],
                       text_parts("Noon."))
    thread = make_thread(users["alice"], workspaces["demo"], ollama_provider)
    run, events = converse(thread, users["alice"], "Time?")
    assert_completed(run, events)
    turn = [m for m in fake_ollama.chat_requests[1]["messages"] if m.get("tool_calls")][0]
    assert turn.get("thinking") == ("Need the time." if echo else None)
