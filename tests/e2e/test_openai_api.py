"""The OpenAI-compatible API with the real ``openai`` Python SDK as the client.

The platform runs as a subprocess (embedded mode, real HTTP); its ``openai`` provider points
at the scripted fake upstream (``tests/fakes/openai_server.py``), so every answer the SDK
sees went through a platform run: the loop, tool governance, the event stream. Threads and
messages are checked through the platform's own REST API.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.fakes.openai_server import (
    Failure,
    text_chunks,
    tool_call_chunks,
    usage_chunk,
)

from .harness import Platform, started

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def platform(upstream):
    p = Platform("embedded", extra_env={
        "OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
        "COMPAT_API_WAIT_S": "60", "SSE_KEEPALIVE_S": "1",
    })
    yield from started(p)


@pytest.fixture(scope="module")
def token(platform):
    response = httpx.post(f"{platform.base_url}/api/v1/auth/token/", data={"username": "alice", "password": platform.password})
    return response.json()["token"]


@pytest.fixture
def client(platform, token):
    return openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=token, max_retries=0, timeout=60)


class Recording(httpx.BaseTransport):
    """An httpx transport that keeps a copy of every response body the client reads."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.bodies: list[bytes] = []

    def handle_request(self, request):
        response = self.inner.handle_request(request)
        body = bytearray()
        self.bodies.append(body)
        inner = response.stream

        class Tee(httpx.SyncByteStream):
            def __iter__(self):
                for part in inner:
                    body.extend(part)
                    yield part

            def close(self):
                inner.close()

        return httpx.Response(response.status_code, headers=response.headers, stream=Tee(),
                              extensions=response.extensions)


def rest(platform, token, path: str):
    response = httpx.get(f"{platform.base_url}/api/v1/{path}", headers={"Authorization": f"Token {token}"})
    response.raise_for_status()
    return response.json()


def listed(body):
    """A list endpoint's rows (paginated or not)."""
    return body["results"] if isinstance(body, dict) else body


def thread_messages(platform, token, thread_id) -> list[dict]:
    return listed(rest(platform, token, f"threads/{thread_id}/messages/"))


def test_models_lists_the_platform_providers(client):
    ids = [m.id for m in client.models.list()]
    assert "openai" in ids and "offline" in ids


def test_a_completion_runs_as_a_platform_run_in_an_api_thread(client, upstream, platform, token):
    upstream.script(text_chunks("Hello from the platform.") + [usage_chunk(11, 4)])
    raw = client.chat.completions.with_raw_response.create(
        model="openai/fake-model", messages=[{"role": "user", "content": "Say hello"}])
    completion = raw.parse()
    thread_id = raw.headers["x-thread-id"]
    assert completion.choices[0].message.content == "Hello from the platform."
    assert completion.choices[0].finish_reason == "stop" and completion.model == "openai/fake-model"
    assert completion.usage.prompt_tokens == 11 and completion.usage.completion_tokens == 4
    assert completion.model_extra["chatplatform"]["thread_id"] == thread_id
    assert completion.model_extra["chatplatform"]["status"] == "completed"
    stored = thread_messages(platform, token, thread_id)
    assert [(m["role"], m["content"]) for m in stored] == [("user", "Say hello"), ("assistant", "Hello from the platform.")]
    assert rest(platform, token, f"threads/{thread_id}/")["title"] == "Say hello"
    # The upstream got the platform's prompt (its system prompt, the platform's tools), not a proxy copy.
    sent = upstream.requests[-1]
    assert sent["messages"][0]["role"] == "system" and "chatplatform" in sent["messages"][0]["content"]
    assert "search_knowledge" in {t["function"]["name"] for t in sent.get("tools", [])}


def test_streaming_and_resending_the_history_continues_the_same_thread(client, upstream, platform, token):
    upstream.script(text_chunks("Paris is the capital of France.", pieces=4))
    first = client.chat.completions.with_raw_response.create(
        model="openai", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Capital of France?"}])
    thread_id = first.headers["x-thread-id"]
    chunks = list(first.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Paris is the capital of France."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].choices == []

    upstream.script(text_chunks("About 2.1 million people."))
    second = client.chat.completions.with_raw_response.create(model="openai", messages=[
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "How many live there?"},
    ])
    assert second.headers["x-thread-id"] == thread_id
    assert second.parse().choices[0].message.content == "About 2.1 million people."
    history = [(m["role"], m.get("content")) for m in upstream.requests[-1]["messages"][1:]]
    assert history == [("user", "Capital of France?"), ("assistant", "Paris is the capital of France."),
                       ("user", "How many live there?")]
    assert len(thread_messages(platform, token, thread_id)) == 4


def test_client_tools_are_returned_to_the_client_and_never_executed(client, upstream, platform, token):
    upstream.script(tool_call_chunks([("call_w1", "get_weather", '{"city": "Oslo"}')]))
    question = [{"role": "user", "content": "Weather in Oslo?"}]
    raw = client.chat.completions.with_raw_response.create(model="openai", messages=question, tools=[WEATHER_TOOL])
    completion = raw.parse()
    thread_id = raw.headers["x-thread-id"]
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls] == \
        [("call_w1", "get_weather", '{"city": "Oslo"}')]
    offered = {t["function"]["name"] for t in upstream.requests[-1]["tools"]}
    assert {"get_weather", "search_knowledge"} <= offered
    ledger = [c["tool_name"] for c in listed(rest(platform, token, "tool-calls/"))]
    assert "get_weather" not in ledger  # no ledger row: the platform ran nothing

    # The client runs the tool and sends the result back (SDK-style: the whole history).
    upstream.script(text_chunks("It is 3 °C and sunny in Oslo."))
    follow = client.chat.completions.with_raw_response.create(model="openai", tools=[WEATHER_TOOL], messages=[
        *question,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_w1", "content": '{"temp_c": 3, "sky": "sunny"}'},
    ])
    assert follow.headers["x-thread-id"] == thread_id
    assert follow.parse().choices[0].message.content == "It is 3 °C and sunny in Oslo."
    sent = upstream.requests[-1]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_w1", "content": '{"temp_c": 3, "sky": "sunny"}'}
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_client_tool_calls_stream_in_the_standard_format(client, upstream):
    upstream.script(tool_call_chunks([("call_s1", "get_weather", '{"city": "Rome"}')]))
    chunks = list(client.chat.completions.create(model="openai", stream=True, tools=[WEATHER_TOOL],
                                                 messages=[{"role": "user", "content": "Rome weather?"}]))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.id, tc.function.name, tc.function.arguments) for tc in calls] == \
        [(0, "call_s1", "get_weather", '{"city": "Rome"}')]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_platform_tools_run_server_side_and_only_text_reaches_the_client(client, upstream, platform, token):
    upstream.script(tool_call_chunks([("call_k1", "search_knowledge", '{"query": "with statement"}')]),
                    text_chunks("The with statement manages a context."))
    raw = client.chat.completions.with_raw_response.create(
        model="openai", messages=[{"role": "user", "content": "Explain the with statement"}])
    message = raw.parse().choices[0].message
    assert message.content == "The with statement manages a context." and not message.tool_calls
    roles = [(m["role"], m.get("tool_call_id")) for m in thread_messages(platform, token, raw.headers["x-thread-id"])]
    assert ("tool", "call_k1") in roles  # executed by the platform, recorded in the thread


def test_a_call_that_needs_approval_ends_the_answer_with_the_pending_state(client, upstream, platform, token):
    # An item alice may delete: a call aimed at an unknown or foreign item is refused before
    # any approval (issue 17), so only a real target waits for a person.
    created = httpx.post(f"{platform.base_url}/api/v1/knowledge/items/", headers={"Authorization": f"Token {token}"},
                         json={"workspace": "demo", "title": "To delete", "content": "An item alice owns."})
    assert created.status_code == 201, created.text
    upstream.script(tool_call_chunks([("call_d1", "delete_knowledge_item",
                                       json.dumps({"item_id": created.json()["id"]}))]))
    chunks = list(client.chat.completions.create(model="openai", stream=True, messages=[
        {"role": "user", "content": "Delete that item"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[Waiting for approval: the platform tool `delete_knowledge_item` (")
    final = [c for c in chunks if c.choices][-1]
    assert final.choices[0].finish_reason == "stop"
    assert final.model_extra["chatplatform"]["status"] == "awaiting_approval"
    pending = listed(rest(platform, token, "tool-calls/?status=awaiting_approval"))
    assert [p["tool_name"] for p in pending] == ["delete_knowledge_item"]


def test_errors_use_the_openai_shape(client, upstream, platform):
    bad = openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key="not-a-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="openai", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="not a PNG, JPEG, WebP or GIF image"):
        client.chat.completions.create(model="openai", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])
    with pytest.raises(openai.BadRequestError, match="platform tool"):
        client.chat.completions.create(model="openai", messages=[{"role": "user", "content": "hi"}], tools=[
            {"type": "function", "function": {"name": "search_knowledge", "parameters": {"type": "object"}}}])
    upstream.script(Failure(status=401, message="bad key"))
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="openai", messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status_code == 502 and "error code: auth_failed" in failed.value.message
    assert "bad key" not in failed.value.message  # a member gets no upstream text (agents.presentation)


def test_hostile_bodies_are_400s_the_sdk_raises_as_bad_requests(client, platform, token):
    """What a security review sent to /v1 (a role as an object, a lone surrogate, a NUL, tens
    of thousands of messages, a body nested 20,000 deep) answered 500; each is now a 400 in
    OpenAI's shape, which the SDK raises as ``BadRequestError`` with the code."""
    def refused(code, **kwargs):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="openai", **kwargs)
        assert caught.value.code == code, caught.value.body
        return caught.value.body

    body = refused("invalid_request_error", messages=[{"role": {"name": "user"}, "content": "hi"}])
    assert body["param"] == "messages[0].role"
    refused("invalid_text", messages=[{"role": "user", "content": "a\x00b"}])
    refused("invalid_text", messages=[{"role": "assistant", "content": "earlier\x00"}, {"role": "user", "content": "hi"}])
    many = [{"role": "user", "content": f"m{n}"} for n in range(1001)]
    assert "at most 1000 messages" in refused("too_many_messages", messages=many)["message"]
    # What the SDK cannot encode (a lone surrogate; 20,000 levels) is sent raw.
    deep = '{"model": "openai", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + "[" * 20000 + "]" * 20000 + "}"
    lone = '{"model": "openai", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    for raw_body, code in ((deep, "nested_too_deeply"), (lone, "invalid_text")):
        raw = httpx.post(f"{platform.base_url}/v1/chat/completions", content=raw_body, timeout=30,
                         headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        assert raw.status_code == 400 and raw.json()["error"]["code"] == code, raw.text[:300]
    # The platform still answers a good request afterwards.
    assert client.models.list().data


def test_a_silent_model_gets_keepalive_comments_that_the_sdk_ignores(platform, token, upstream):
    """Found in a fresh-clone trial: a ``/v1`` stream sent nothing while the model was silent,
    so a proxy's ``timeout server`` cut it. It now sends ``: keep-alive`` comments every
    ``SSE_KEEPALIVE_S`` (1 s here), which the SDK's decoder skips."""
    recording = Recording()
    sdk = openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=token, max_retries=0, timeout=60,
                        http_client=httpx.Client(transport=recording, timeout=60))
    upstream.script(text_chunks("Worth the wait.", pieces=3))
    upstream.first_token_delay_s = 3.5
    try:
        chunks = list(sdk.chat.completions.create(model="openai", stream=True,
                                                  messages=[{"role": "user", "content": "Think hard"}]))
    finally:
        upstream.first_token_delay_s = 0.0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Worth the wait."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    raw = bytes(recording.bodies[-1]).decode()
    assert raw.count(": keep-alive\n\n") >= 2, raw
    # the comments come while the model is silent: before its first word
    assert raw.index(": keep-alive\n\n") < raw.index('"content":"Worth')
    assert raw.endswith("data: [DONE]\n\n")
