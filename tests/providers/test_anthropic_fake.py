"""The fake Anthropic server rejects what the Messages API rejects — otherwise "the fake
accepted the follow-up request" would prove nothing in the wire tests."""

from __future__ import annotations

import anthropic
import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Invalid, text_events, validate_request

USE = {"type": "tool_use", "id": "toolu_1", "name": "kb_search", "input": {"query": "x"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}


def body(*messages, **extra) -> dict:
    return {"model": "claude-fake-1", "max_tokens": 100, "messages": list(messages), **extra}


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks):
    return {"role": "assistant", "content": list(blocks)}


def text(t):
    return {"type": "text", "text": t}


VALID = body(user(text("hi")), assistant(text("Let me check."), USE), user(RESULT, text("thanks")),
             assistant(text("done")), user(text("bye")), system="be nice")

INVALID = {
    "empty text block": body(user(text("hi")), assistant(text(""), USE), user(RESULT)),
    "whitespace text block": body(user(text("hi")), assistant(text("  \n"), USE), user(RESULT)),
    "empty string content": body(user(text("hi")), {"role": "assistant", "content": ""}, user(text("x"))),
    "tool_use without result": body(user(text("hi")), assistant(USE), user(text("and?"))),
    "tool_use last": body(user(text("hi")), assistant(USE)),
    "result not right after": body(user(text("hi")), assistant(USE), assistant(text("hm")), user(RESULT)),
    "text before result": body(user(text("hi")), assistant(USE), user(text("here"), RESULT)),
    "orphan result": body(user(text("hi")), assistant(text("ok")), user(RESULT)),
    "first message assistant": body(assistant(text("hello")), user(text("hi"))),
    "roles not alternating": body(user(text("a")), user(text("b"))),
    "bad tool id": body(user(text("hi")), assistant({**USE, "id": "functions.kb_search:0"}),
                        user({**RESULT, "tool_use_id": "functions.kb_search:0"})),
    "duplicate tool ids": body(user(text("a")), assistant(USE), user(RESULT), assistant(USE), user(RESULT)),
    "input not an object": body(user(text("hi")), assistant({**USE, "input": "{}"}), user(RESULT)),
    "bad tool name": body(user(text("hi")), assistant({**USE, "name": "kb search"}), user(RESULT)),
    "missing max_tokens": {"model": "m", "messages": [user(text("hi"))]},
    "system as a message": body({"role": "system", "content": "s"}, user(text("hi"))),
    "result in assistant turn": body(user(text("hi")), assistant(RESULT)),
    "is_error not bool": body(user(text("hi")), assistant(USE), user({**RESULT, "is_error": "yes"})),
    "tool schema not object": body(user(text("hi")), tools=[{"name": "t", "input_schema": {"type": "string"}}]),
}


def test_valid_history_passes():
    validate_request(VALID)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_history_is_rejected(name):
    with pytest.raises(Invalid):
        validate_request(INVALID[name])


def test_the_sdk_sees_a_400_with_the_reason():
    with FakeAnthropic([text_events("never")], api_key="k") as fake:
        client = anthropic.Anthropic(base_url=fake.base_url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(**INVALID["empty text block"])
        assert "non-whitespace text" in str(info.value)
        assert fake.remaining == 1  # a rejected request consumes no iteration
        reply = client.messages.create(**VALID)
        assert reply.content[0].text == "never" and reply.stop_reason == "end_turn"
