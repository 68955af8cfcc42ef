"""The fake Ollama server rejects what Ollama rejects (and a tool message that answers
nothing), so "the fake accepted it" means something in the wire tests."""

from __future__ import annotations

import ollama
import pytest

from tests.fakes.ollama_server import DEFAULT_MODELS, FakeOllama, Invalid, text_parts, validate_chat

CALL = {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}


def chat(*messages, **extra) -> dict:
    return {"model": "llama3.2:3b", "messages": list(messages), **extra}


VALID = chat({"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "", "tool_calls": [CALL]},
             {"role": "tool", "content": "4 C", "tool_name": "get_weather"}, {"role": "user", "content": "ok"},
             options={"num_ctx": 8192, "num_predict": 4096}, think=False)

INVALID = {
    "arguments as a string": chat({"role": "assistant", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}, {"role": "tool", "tool_name": "get_weather"}),
    "tool without a call": chat({"role": "user", "content": "hi"}, {"role": "tool", "content": "x", "tool_name": "t"}),
    "unanswered call": chat({"role": "assistant", "tool_calls": [CALL]}, {"role": "user", "content": "hi"}),
    "wrong tool name": chat({"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_name": "other"}),
    "num_ctx not an int": chat({"role": "user", "content": "hi"}, options={"num_ctx": "8192"}),
    "bad think": chat({"role": "user", "content": "hi"}, think="maybe"),
    "bad role": chat({"role": "developer", "content": "hi"}),
    "content as blocks": chat({"role": "user", "content": [{"type": "text", "text": "hi"}]}),
}


def test_valid_chat_passes():
    validate_chat(VALID, models=DEFAULT_MODELS)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_chat_is_rejected(name):
    with pytest.raises(Invalid):
        validate_chat(INVALID[name], models=DEFAULT_MODELS)


def test_unknown_model_is_404_and_listing_works_through_the_ollama_package():
    with FakeOllama([text_parts("hi there")]) as fake:
        client = ollama.Client(host=fake.base_url)
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="nope:1b", messages=[{"role": "user", "content": "hi"}])
        assert info.value.status_code == 404 and "not found" in str(info.value)
        assert [m.model for m in client.list().models] == list(DEFAULT_MODELS)
        assert client.show("llama3.2:3b").details.parameter_size == "3.2B"
        parts = list(client.chat(model="llama3.2:3b", messages=[{"role": "user", "content": "hi"}], stream=True))
        assert "".join(p.message.content or "" for p in parts) == "hi there" and parts[-1].done
