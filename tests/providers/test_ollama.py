"""Ollama's native API through the real loop: run_create → run_turn → OllamaAdapter
(httpx, NDJSON) → the fake Ollama server over loopback HTTP → events.

The fake rejects what Ollama rejects (arguments as a string, bad option types, unknown
models) and, like the other fakes, a tool message that does not answer the assistant
message before it."""

from __future__ import annotations

import json
import logging

import pytest

from agents.models import Provider, Run, ToolCall
from agents.tools import make_spec, registry
from chat.models import Message
from tests.conftest import joined_text, make_thread, types
from tests.fakes._loopback import self_signed_cert
from tests.fakes.ollama_server import (
    DieAfter,
    ErrorLine,
    Failure,
    FakeOllama,
    done,
    text_parts,
    tool_call_part,
)
from tests.providers.wire_helpers import *  # noqa: F403
from tests.providers.wire_helpers import assert_completed, error_logs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ask(users, workspaces, converse):
    def go(provider, text="Hello?", **thread_fields):
        thread = make_thread(users["alice"], workspaces["demo"], provider, **thread_fields)
        run, events = converse(thread, users["alice"], text)
        return thread, run, events

    return go


def failed(run, events) -> dict:
    assert run.status == Run.Status.FAILED and types(events)[-1] == "run.failed"
    return events[-1]


def test_text_streams_with_usage_and_the_system_prompt_first(ask, ollama_provider, fake_ollama, tool_log, caplog):
    fake_ollama.script(text_parts("Hello from Ollama.") + [done(prompt=21, completion=4)])
    thread, run, events = ask(ollama_provider)

    final = assert_completed(run, events)
    assert final.content == "Hello from Ollama." and final.status == "complete"
    # Ollama gives prompt and output counts only: the others are null, not guessed; no price → no cost.
    assert final.usage == {"input_tokens": 21, "output_tokens": 4, "cached_tokens": None, "reasoning_tokens": None,
                           "cost": None, "currency": ""}
    [body] = fake_ollama.chat_requests
    assert body["model"] == "qwen2.5:14b" and body["stream"] is True
    assert body["messages"][0]["role"] == "system" and "Demo team" in body["messages"][0]["content"]
    assert body["messages"][1:] == [{"role": "user", "content": "Hello?"}]
    for key in ("stream_options", "max_tokens", "max_completion_tokens", "system"):
        assert key not in body  # OpenAI / Anthropic fields never reach Ollama
    assert not error_logs(caplog)


def test_tool_call_round_trip_replays_arguments_as_an_object_and_results_by_name(
    ask, ollama_provider, fake_ollama, tool_log
):
    fake_ollama.script([tool_call_part(("get_weather", {"city": "Oslo"}))], text_parts("It is mild in Oslo."))
    thread, run, events = ask(ollama_provider, "Weather in Oslo?")

    assert_completed(run, events)
    assert tool_log == [("get_weather", {"city": "Oslo"})]
    first = Message.objects.filter(thread=thread, role="assistant").order_by("position").first()
    [call] = first.tool_calls
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Oslo"}
    assert call["id"].startswith("call_")  # minted: Ollama sends no id
    follow_up = fake_ollama.chat_requests[1]["messages"]
    assert follow_up[2] == {"role": "assistant", "content": "",
                            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}
    tool_msg = Message.objects.get(thread=thread, role="tool")
    assert follow_up[3] == {"role": "tool", "content": tool_msg.content, "tool_name": "get_weather"}


def test_server_sent_tool_call_ids_are_kept(ask, ollama_provider, fake_ollama, tool_log):
    part = tool_call_part(("current_time", {}))
    part["tool_calls"][0]["id"] = "call_srv_1"
    fake_ollama.script([part], text_parts("Noon."))
    thread, run, events = ask(ollama_provider, "Time?")
    assert_completed(run, events)
    assert ToolCall.objects.get(run=run).call_id == "call_srv_1"
    assert tool_log == [("current_time", {})]


def test_tool_schemas_reach_ollama_unchanged(ask, ollama_provider, fake_ollama):
    schema = {"type": "object", "additionalProperties": False, "required": ["filter"],
              "properties": {"filter": {"type": "object", "properties": {"since": {"type": "string", "format": "date"},
                                                                          "limit": {"type": "integer", "minimum": 1}}}}}
    spec = make_spec(name="find_events", description="find events", parameters=schema, risk="read",
                     func=lambda *, ctx, **a: {"summary": "ok"})
    fake_ollama.script(text_parts("ok"))
    with registry.scoped(spec):
        _, run, events = ask(ollama_provider)
    assert run.status == Run.Status.COMPLETED
    tools = {t["function"]["name"]: t for t in fake_ollama.chat_requests[0]["tools"]}
    assert tools["find_events"]["function"]["parameters"] == schema


def test_thinking_field_and_think_tags_are_kept_apart(ask, ollama_provider, fake_ollama, no_coalescing):
    fake_ollama.script([{"content": "", "thinking": "the user "}, {"content": "", "thinking": "says hi"},
                        {"content": "<thi"}, {"content": "nk>more</think>\n\nHi "}, {"content": "there!"}])
    thread, run, events = ask(ollama_provider)

    final = assert_completed(run, events)
    assert final.content == "Hi there!"
    assert final.reasoning == "the user says himore"
    for event in events:
        assert "think" not in json.dumps(event) and "says hi" not in json.dumps(event)


def test_done_reason_length_truncates_and_never_executes_calls(ask, ollama_provider, fake_ollama, tool_log):
    fake_ollama.script([{"content": "Checking "}, tool_call_part(("kb_search", {"query": "vpn"})), done("length")])
    thread, run, events = ask(ollama_provider)

    assert run.status == Run.Status.COMPLETED
    assert tool_log == []
    [msg] = Message.objects.filter(run=run, role="assistant")
    assert msg.status == "truncated" and msg.tool_calls == [] and msg.content == "Checking "


def test_multibyte_characters_split_across_network_reads(ask, ollama_provider, fake_ollama):
    text = "Grüße aus Köln — ✓ 日本語 🙂"
    fake_ollama.split_utf8 = True
    fake_ollama.script(text_parts(text, pieces=5))
    _, run, events = ask(ollama_provider)
    assert assert_completed(run, events).content == text


# --------------------------------------------------------------------------------------- #
# Errors
# --------------------------------------------------------------------------------------- #
def test_unknown_model_is_model_not_found(ask, ollama_provider, fake_ollama):
    from agents.models import LLMModel

    LLMModel.objects.create(provider=ollama_provider, name="mistral:7b")  # enabled here, gone upstream
    thread, run, events = ask(ollama_provider, model="mistral:7b")
    event = failed(run, events)
    assert event["error"]["code"] == "model_not_found"
    assert "model 'mistral:7b' not found (HTTP 404)" in event["error"]["message"]


def test_http_500_is_an_upstream_error(ask, ollama_provider, fake_ollama):
    fake_ollama.script(Failure(500, "llama runner process has terminated: signal: killed"))
    _, run, events = ask(ollama_provider)
    event = failed(run, events)
    assert event["error"]["code"] == "upstream_error"
    assert "HTTP 500" in event["error"]["message"] and "llama runner" in event["error"]["message"]


def test_connection_refused(ask, db):
    provider = Provider.objects.create(slug="down", name="Down", kind="ollama", base_url="http://127.0.0.1:9",
                                       default_model="qwen2.5:14b")
    _, run, events = ask(provider)
    event = failed(run, events)
    assert event["error"]["code"] == "unreachable"
    assert "connection refused to 127.0.0.1:9" in event["error"]["message"]


def test_error_line_mid_stream_keeps_partial_text(ask, ollama_provider, fake_ollama):
    fake_ollama.script(ErrorLine(text_parts("Half an ans", pieces=2), "model runner has unexpectedly stopped"))
    thread, run, events = ask(ollama_provider)
    event = failed(run, events)
    assert "model runner has unexpectedly stopped" in event["error"]["message"]
    msg = Message.objects.get(thread=thread, role="assistant")
    assert msg.status == "truncated" and msg.content == "Half an ans" == joined_text(events)


def test_stream_dying_midway_is_stream_interrupted(ask, ollama_provider, fake_ollama):
    fake_ollama.script(DieAfter(text_parts("Partial", pieces=2)))
    thread, run, events = ask(ollama_provider)
    event = failed(run, events)
    assert event["error"]["code"] == "stream_interrupted"
    assert Message.objects.get(thread=thread, role="assistant").status == "truncated"


def test_tls_verification_failure_then_ssl_cert_file_is_honoured(ask, db, tmp_path, monkeypatch):
    certfile, keyfile = self_signed_cert(tmp_path)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    with FakeOllama([text_parts("Trusted.")], tls=(certfile, keyfile)) as fake:
        provider = Provider.objects.create(slug="tls", name="TLS", kind="ollama", base_url=fake.base_url,
                                           default_model="qwen2.5:14b")
        _, run, events = ask(provider)
        event = failed(run, events)
        assert "TLS certificate verification failed" in event["error"]["message"]
        monkeypatch.setenv("SSL_CERT_FILE", certfile)
        _, run, events = ask(provider)
        assert run.status == Run.Status.COMPLETED, events[-1]["error"]
        assert joined_text(events) == "Trusted."


def test_a_key_for_a_remote_ollama_is_sent_and_never_leaks(ask, db, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    planted = "ollama-planted-key-93e1c2"
    monkeypatch.setenv("TEST_OLLAMA_KEY", planted)
    with FakeOllama([Failure(401, f"unauthorized key {planted}")], api_key=planted) as fake:
        provider = Provider.objects.create(slug="remote", name="Remote", kind="ollama", base_url=fake.base_url,
                                           api_key_env="TEST_OLLAMA_KEY", default_model="qwen2.5:14b")
        thread, run, events = ask(provider)
        assert fake.headers[-1]["authorization"] == f"Bearer {planted}"
    event = failed(run, events)
    assert event["error"]["code"] == "auth_failed"
    blob = json.dumps(events) + json.dumps(list(Message.objects.values()), default=str) + caplog.text
    blob += json.dumps(list(Run.objects.values()), default=str)
    assert planted not in blob
