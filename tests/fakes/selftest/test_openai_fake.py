"""Self-test of tests/fakes/openai_server.py against the real ``openai`` SDK over HTTP.

No Django needed: these are plain functions talking to a localhost server.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.fakes.openai_server import (
    NO_MORE_SCRIPTED_RESPONSES,
    DieAfter,
    Failure,
    FakeOpenAI,
    reasoning_chunks,
    text_chunks,
    tool_call_chunks,
    usage_chunk,
)

USER = [{"role": "user", "content": "hi"}]


def _client(fake: FakeOpenAI, api_key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key=api_key, max_retries=0, timeout=10)


def _stream(client: openai.OpenAI, messages=None, **kw):
    return client.chat.completions.create(
        model="fake-model", messages=USER if messages is None else messages, stream=True, **kw
    )


def _tool_turn(call_id: str = "call_1", **extra) -> list[dict]:
    return [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                }
            ],
            **extra,
        },
    ]


# --------------------------------------------------------------------------- helpers


def test_text_chunks_shape_and_roundtrip():
    chunks = text_chunks("Hello brave  new world")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    parts = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert parts == ["Hello ", "brave  ", "new ", "world"]
    three = [c["choices"][0]["delta"]["content"] for c in text_chunks("abcdefgh", pieces=3)[1:-1]]
    assert three == ["abc", "def", "gh"]
    assert len(text_chunks("")) == 2


def test_tool_call_chunks_and_usage_shape():
    chunks = tool_call_chunks([("c1", "f", '{"a": 1}'), ("c2", "g", "{}")])
    # per call: head + 2 argument fragments; plus the finish chunk
    assert len(chunks) == 2 * 3 + 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[3]["choices"][0]["delta"]["tool_calls"][0]["id"] == "c2"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert usage_chunk(3, 4) == {
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }


# --------------------------------------------------------------------------- streaming


def test_stream_text_joins_deltas_and_records_request():
    with FakeOpenAI([text_chunks("Hello from the fake", pieces=4) + [usage_chunk(5, 4)]]) as fake:
        client = _client(fake)
        chunks = list(_stream(client, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Hello from the fake"
        assert all(c.id == "chatcmpl-fake-1" for c in chunks)
        assert all(c.model == "fake-model" and c.object == "chat.completion.chunk" for c in chunks)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage.total_tokens == 9
        assert fake.requests[0]["messages"] == USER
        assert fake.requests[0]["stream"] is True
        assert fake.headers[0]["authorization"] == "Bearer sk-test"
        assert fake.remaining == 0
        assert fake.server_errors == []


def test_stream_tool_call_fragments():
    calls = [("call_a", "search", '{"query": "cats"}'), ("call_b", "clock", "{}")]
    with FakeOpenAI([tool_call_chunks(calls)]) as fake:
        merged: dict[int, dict] = {}
        finish = None
        for chunk in _stream(_client(fake)):
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            for frag in choice.delta.tool_calls or []:
                slot = merged.setdefault(frag.index, {"id": None, "name": "", "args": []})
                slot["id"] = frag.id or slot["id"]
                slot["name"] += (frag.function.name or "") if frag.function else ""
                slot["args"].append(frag.function.arguments if frag.function else None)
        assert finish == "tool_calls"
        assert merged[0]["id"] == "call_a" and merged[0]["name"] == "search"
        assert merged[1]["id"] == "call_b" and merged[1]["name"] == "clock"
        # head fragment carries "" then the arguments come in two fragments
        assert len(merged[0]["args"]) == 3
        assert json.loads("".join(merged[0]["args"])) == {"query": "cats"}


def test_consecutive_requests_consume_iterations_then_fallback():
    with FakeOpenAI([text_chunks("one")]) as fake:
        client = _client(fake)
        fake.script(text_chunks("two"))
        got = []
        for _ in range(3):
            got.append("".join(c.choices[0].delta.content or "" for c in _stream(client)))
        assert got == ["one", "two", NO_MORE_SCRIPTED_RESPONSES]
        assert len(fake.requests) == 3


def test_send_done_false_ends_cleanly():
    with FakeOpenAI([text_chunks("no done marker")], send_done=False) as fake:
        text = "".join(c.choices[0].delta.content or "" for c in _stream(_client(fake)))
        assert text == "no done marker"


def test_delay_between_chunks():
    with FakeOpenAI([text_chunks("a b c d", pieces=4)], delay_s=0.05) as fake:
        t0 = time.monotonic()
        list(_stream(_client(fake)))
        # 6 chunks -> 5 gaps, plus one before [DONE]
        assert time.monotonic() - t0 >= 0.25


def test_die_after_raises_midstream():
    with FakeOpenAI([DieAfter(text_chunks("partial answer here")[:3])]) as fake:
        received = []
        with pytest.raises(Exception) as excinfo:  # noqa: B017 - any transport error is fine
            for chunk in _stream(_client(fake)):
                received.append(chunk.choices[0].delta.content)
        assert received == ["", "partial ", "answer "]
        assert isinstance(excinfo.value, (httpx.HTTPError, openai.APIConnectionError))
        assert fake.server_errors == []


def test_raw_iterations_sent_verbatim():
    raw = {
        "id": "custom-id",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "other",
        "choices": [{"index": 0, "delta": {"content": "raw"}, "finish_reason": "stop"}],
    }
    with FakeOpenAI(raw_iterations=[[raw]]) as fake:
        (chunk,) = list(_stream(_client(fake)))
        assert chunk.id == "custom-id" and chunk.model == "other"


def test_non_streaming_completion_is_assembled():
    with FakeOpenAI(
        [
            text_chunks("Hello world") + [usage_chunk(2, 2)],
            reasoning_chunks("think") + tool_call_chunks([("c1", "f", '{"x": 1}')]),
        ]
    ) as fake:
        client = _client(fake)
        r1 = client.chat.completions.create(model="m1", messages=USER)
        assert r1.object == "chat.completion" and r1.model == "m1"
        assert r1.choices[0].message.content == "Hello world"
        assert r1.choices[0].finish_reason == "stop" and r1.usage.total_tokens == 4
        r2 = client.chat.completions.create(model="m1", messages=USER)
        msg = r2.choices[0].message
        assert r2.choices[0].finish_reason == "tool_calls"
        assert msg.tool_calls[0].id == "c1" and msg.tool_calls[0].function.arguments == '{"x": 1}'
        assert msg.model_extra["reasoning_content"] == "think"


# --------------------------------------------------------------------------- errors


def test_wrong_api_key_is_401_and_does_not_consume():
    with FakeOpenAI([text_chunks("kept")]) as fake:
        with pytest.raises(openai.AuthenticationError) as excinfo:
            _stream(_client(fake, api_key="sk-wrong"))
        assert excinfo.value.status_code == 401
        assert excinfo.value.body["code"] == "invalid_api_key"
        assert len(fake.requests) == 1 and fake.remaining == 1
        text = "".join(c.choices[0].delta.content or "" for c in _stream(_client(fake)))
        assert text == "kept"


def test_failure_429_with_retry_after():
    failure = Failure(429, "slow down", headers={"retry-after": "7"}, code="rate_limit_exceeded")
    with FakeOpenAI([failure, text_chunks("after")]) as fake:
        client = _client(fake)
        with pytest.raises(openai.RateLimitError) as excinfo:
            _stream(client)
        err = excinfo.value
        assert err.status_code == 429
        assert err.response.headers["retry-after"] == "7"
        assert err.body["message"] == "slow down" and err.body["code"] == "rate_limit_exceeded"
        assert "".join(c.choices[0].delta.content or "" for c in _stream(client)) == "after"


def test_failure_500():
    with FakeOpenAI([Failure()]) as fake:
        with pytest.raises(openai.InternalServerError) as excinfo:
            _stream(_client(fake))
        assert excinfo.value.body["type"] == "server_error"


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        ([], "non-empty"),
        ([*USER, {"role": "tool", "tool_call_id": "call_1", "content": "x"}], "preceding"),
        (_tool_turn(), "call_1"),  # unanswered at end of list
        (
            [*_tool_turn(), {"role": "user", "content": "next"}],
            "did not have response messages",
        ),
        (
            [*_tool_turn(), {"role": "tool", "tool_call_id": "call_zzz", "content": "x"}],
            "call_zzz",
        ),
    ],
)
def test_invalid_history_is_400(messages, needle):
    with FakeOpenAI([text_chunks("unused")]) as fake:
        with pytest.raises(openai.BadRequestError) as excinfo:
            _stream(_client(fake), messages=messages)
        assert excinfo.value.body["type"] == "invalid_request_error"
        assert needle in excinfo.value.body["message"]
        assert fake.requests[0]["messages"] == messages  # recorded before validation
        assert fake.remaining == 1


def test_non_string_arguments_rejected_via_raw_http():
    # The SDK would happily send a dict; go through httpx to be explicit.
    msgs = _tool_turn()
    msgs[1]["tool_calls"][0]["function"]["arguments"] = {"q": "x"}
    msgs.append({"role": "tool", "tool_call_id": "call_1", "content": "ok"})
    with FakeOpenAI() as fake:
        r = httpx.post(
            f"{fake.base_url}/chat/completions",
            json={"model": "fake-model", "messages": msgs, "stream": True},
            headers={"Authorization": "Bearer sk-test"},
        )
        assert r.status_code == 400
        assert "arguments" in r.json()["error"]["message"]


def test_valid_tool_history_accepted():
    messages = [*_tool_turn(), {"role": "tool", "tool_call_id": "call_1", "content": "result"}]
    with FakeOpenAI([text_chunks("done")]) as fake:
        assert "".join(c.choices[0].delta.content or "" for c in _stream(_client(fake), messages))


def test_require_reasoning_content():
    answered = {"role": "tool", "tool_call_id": "call_1", "content": "r"}
    with FakeOpenAI(require_reasoning_content="why") as fake:
        client = _client(fake)
        with pytest.raises(openai.BadRequestError) as excinfo:
            _stream(client, [*_tool_turn(), answered])
        assert "reasoning_content" in excinfo.value.body["message"]
        with pytest.raises(openai.BadRequestError):
            _stream(client, [*_tool_turn(reasoning_content="other"), answered])
        list(_stream(client, [*_tool_turn(reasoning_content="why"), answered]))


def test_validation_can_be_disabled():
    with FakeOpenAI([text_chunks("ok")], validate_history=False) as fake:
        assert list(_stream(_client(fake), _tool_turn()))


# --------------------------------------------------------------------------- misc


def test_list_models():
    with FakeOpenAI(models=("m-a", "m-b")) as fake:
        client = _client(fake)
        assert [m.id for m in client.models.list()] == ["m-a", "m-b"]
        assert client.models.retrieve("m-b").owned_by == "fake"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("nope")
        with pytest.raises(openai.AuthenticationError):
            _client(fake, api_key="bad").models.list()


def test_no_auth_when_api_key_none():
    with FakeOpenAI([text_chunks("open")], api_key=None) as fake:
        assert list(_stream(_client(fake, api_key="anything")))


def test_stop_closes_socket_and_is_idempotent():
    fake = FakeOpenAI().start()
    url = fake.base_url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    fake.stop()
    fake.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", headers={"Authorization": "Bearer sk-test"}, timeout=2)
    with pytest.raises(RuntimeError):
        _ = fake.base_url


def test_client_disconnect_midstream_is_harmless():
    with FakeOpenAI([text_chunks("x " * 50)], delay_s=0.01) as fake:
        client = _client(fake)
        stream = _stream(client)
        next(iter(stream))
        stream.close()
        time.sleep(0.3)
        # the server still answers the next request, and swallowed the broken pipe
        assert list(_stream(client))
        assert fake.server_errors == []


async def test_async_client_streams_and_sees_die_after():
    with FakeOpenAI([text_chunks("async hello"), DieAfter(text_chunks("cut off")[:2])]) as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)
        stream = await client.chat.completions.create(
            model="fake-model", messages=USER, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        assert text == "async hello"
        stream = await client.chat.completions.create(
            model="fake-model", messages=USER, stream=True
        )
        seen = []
        with pytest.raises(Exception):  # noqa: B017 - any transport error is fine
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content)
        assert seen == ["", "cut "]
        await client.close()
