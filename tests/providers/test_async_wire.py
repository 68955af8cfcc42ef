"""Reading a model's stream on the event loop (``wire.arelay``, the SDKs' async clients on
aiohttp) gives what reading it on a thread (``wire.relay``) gives: the same events in the same
order and the same :class:`ProviderError` — code, message and retryability; only a broken
stream's detail after "the provider's stream broke off" is the transport's own words — for
each adapter, against its real-HTTP fake."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import pytest

from chatplatform.loops import publisher_loop
from llm import (
    ChatMessage,
    ChatRequest,
    ProviderError,
    StreamedToolCall,
    TextDelta,
    ToolDefinition,
)
from llm.anthropic import AnthropicAdapter
from llm.ollama import OllamaAdapter
from llm.openai_compat import OpenAICompatAdapter
from llm.wire import arelay
from tests.fakes import anthropic_server as anth
from tests.fakes import ollama_server as oll
from tests.fakes import openai_server as oai

KEY = "sk-parity-secret-0123456789"
LOOKUP = ToolDefinition("lookup", "look something up", {"type": "object", "properties": {"q": {"type": "string"}}})


def _openai_ok() -> list:
    # think tags cut across chunks, a NUL, reasoning_content, a tool call in fragments, usage last
    return [*oai.text_chunks("<thi"), *oai.text_chunks("nk>hidden</th"), *oai.text_chunks("ink>Hel\x00lo"),
            *oai.reasoning_chunks("why"), *oai.tool_call_chunks([("call_1", "lookup", '{"q": "x"}')]),
            oai.usage_chunk(11, 7)]


KINDS = {
    "openai": dict(
        fake=lambda **kw: oai.FakeOpenAI(api_key=KEY, **kw),
        adapter=lambda url, **kw: OpenAICompatAdapter(base_url=url, api_key=KEY, max_retries=0, **kw),
        model="fake-model", ok=_openai_ok, status=lambda: oai.Failure(401, "bad key"),
        cut=lambda: oai.DieAfter(oai.text_chunks("Partial answer", pieces=3)), slow=oai.text_chunks("slow"),
    ),
    "anthropic": dict(
        fake=lambda **kw: anth.FakeAnthropic(api_key=KEY, **kw),
        adapter=lambda url, **kw: AnthropicAdapter(base_url=url, api_key=KEY, max_retries=0, **kw),
        model="claude-fake-1",
        ok=lambda: [*anth.text_events("Hel\x00lo", stop_reason=None),
                    *anth.tool_use_events("toolu_1", "lookup", '{"q": "x"}', index=1)],
        status=lambda: anth.Failure(429, "slow down", headers={"retry-after": "7"}),
        cut=lambda: anth.DieAfter(anth.text_events("Partial answer", stop_reason=None)),
        slow=anth.text_events("slow one two", pieces=3),
    ),
    "ollama": dict(
        fake=lambda **kw: oll.FakeOllama(**kw),
        adapter=lambda url, **kw: OllamaAdapter(base_url=url, **kw),
        model="llama3.2:3b",
        ok=lambda: [*oll.text_parts("<think>hm</think>Hel\x00lo"), oll.tool_call_part(("lookup", {"q": "x"})),
                    oll.done("stop")],
        status=lambda: oll.Failure(500, "model runner crashed"),
        cut=lambda: oll.DieAfter(oll.text_parts("Partial answer")),
        slow=[*oll.text_parts("slow one two"), oll.done()],
    ),
}


def request(model: str) -> ChatRequest:
    return ChatRequest(model=model, system="Be brief.", messages=[ChatMessage(role="user", content="hi")],
                       tools=[LOOKUP])


def read_sync(adapter, req) -> tuple[list, tuple | None]:
    events = []
    try:
        for event in adapter.stream(req):
            events.append(event)
    except ProviderError as exc:
        return events, (exc.code, exc.message, exc.retryable)
    return events, None


def read_on_loop(adapter, req) -> tuple[list, tuple | None]:
    """arelay on the process's publisher loop (where a turn reads it)."""
    events = []
    try:
        asyncio.run_coroutine_threadsafe(arelay(adapter, req, events.append), publisher_loop()).result(30)
    except ProviderError as exc:
        return events, (exc.code, exc.message, exc.retryable)
    return events, None


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return KINDS[request.param]


def both(kind, script, **adapter_kw) -> tuple[tuple, tuple]:
    """The same scripted response read both ways: ((events, error), (events, error))."""
    with kind["fake"]() as fake:
        fake.script(script(), script())
        adapter = kind["adapter"](fake.base_url, **adapter_kw)
        req = request(kind["model"])
        return read_sync(adapter, req), read_on_loop(adapter, req)


def without_made_up_ids(events: list) -> list:
    """Ollama sends no tool-call ids: the adapter makes a random one per call."""
    return [replace(e, id="") if isinstance(e, StreamedToolCall) and e.id.startswith("call_") and len(e.id) == 29
            else e for e in events]


def test_a_whole_response_gives_the_same_events(kind):
    (sync_events, sync_error), (loop_events, loop_error) = both(kind, kind["ok"])
    assert sync_error is None and loop_error is None
    assert without_made_up_ids(loop_events) == without_made_up_ids(sync_events)
    text = "".join(e.text for e in loop_events if isinstance(e, TextDelta))
    assert text == "Hel\ufffdlo"  # the NUL rule, and no think tag or reasoning in the answer
    assert [type(e).__name__ for e in loop_events][-2:] == ["StreamedToolCall", "Finish"]
    assert loop_events[-1].reason == "tool_calls"


def test_an_error_status_gives_the_same_error(kind):
    (sync_events, sync_error), (loop_events, loop_error) = both(kind, kind["status"])
    assert sync_error is not None and loop_error == sync_error
    assert sync_events == loop_events == []
    assert KEY not in loop_error[1]


def test_a_stream_cut_midway_gives_the_same_text_and_error(kind):
    (sync_events, sync_error), (loop_events, loop_error) = both(kind, kind["cut"])
    assert (loop_error[0], loop_error[2]) == (sync_error[0], sync_error[2]) == ("stream_interrupted", True)
    assert loop_error[1].startswith("the provider's stream broke off") and KEY not in loop_error[1]
    if kind is not KINDS["anthropic"]:  # its SDK wraps the break: "the provider's stream broke off" alone
        assert loop_error[1] == "the provider's stream broke off: the connection closed before the response ended"
    assert loop_events == sync_events
    assert "".join(e.text for e in loop_events) == "Partial answer"


def test_an_unreachable_provider_gives_the_same_root_cause(kind):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = kind["adapter"](f"http://127.0.0.1:{port}/v1")
    req = request(kind["model"])
    sync, on_loop = read_sync(adapter, req), read_on_loop(adapter, req)
    assert on_loop == sync
    assert on_loop[1] == ("unreachable", f"provider unreachable: connection refused to 127.0.0.1:{port}", True)


def test_a_model_slower_than_the_read_timeout_gives_the_same_error(kind):
    with kind["fake"](delay_s=1.0) as fake:
        fake.script(kind["slow"], kind["slow"])
        adapter = kind["adapter"](fake.base_url, read_timeout_s=0.3)
        req = request(kind["model"])
        sync, on_loop = read_sync(adapter, req), read_on_loop(adapter, req)
    assert on_loop == sync
    assert on_loop[1] == ("timeout", f"provider timed out ({adapter.base_url})", True)


def test_an_exception_from_deliver_ends_the_read_unchanged(kind):
    """An exception from ``deliver`` (a cancelled run, a lost lease) ends the read at once and
    passes through as it is: never translated into a provider error."""

    class Stop(Exception):
        pass

    with kind["fake"](delay_s=0.05) as fake:
        fake.script(kind["slow"])
        adapter = kind["adapter"](fake.base_url)
        events = []

        def deliver(event):
            events.append(event)
            raise Stop

        with pytest.raises(Stop):
            asyncio.run_coroutine_threadsafe(arelay(adapter, request(kind["model"]), deliver),
                                             publisher_loop()).result(30)
        assert len(events) == 1
