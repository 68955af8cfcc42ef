"""Provider failures end the run cleanly, name their root cause, keep whatever text arrived,
and never leak the API key (DESIGN §4, §5 step 5, §7 ``run.failed``)."""

from __future__ import annotations

import json
import logging

import pytest

from agents.models import Provider, Run, ToolCall
from chat.models import Message
from llm import TextDelta
from tests.conftest import joined_text, make_thread, types
from tests.fakes.openai_server import DieAfter, Failure, RawLine, text_chunks

pytestmark = pytest.mark.django_db(transaction=True)

UNSET_KEY_VAR = "CHATPLATFORM_TEST_UNSET_KEY_VAR"


def failed_event(events) -> dict:
    assert types(events).count("run.failed") == 1
    assert types(events)[-1] == "run.failed"
    assert "run.completed" not in types(events)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    event = events[-1]
    assert event["status"] == "failed"
    assert set(event["error"]) == {"code", "message"}
    return event


def last_assistant(thread) -> Message:
    return Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()


def assert_failed_turn(run, events, thread, *, status="error") -> tuple[dict, Message]:
    event = failed_event(events)
    assert run.status == Run.Status.FAILED
    assert run.error == event["error"]
    msg = last_assistant(thread)
    assert msg.status == status
    assert msg.error == event["error"]
    completed = [e for e in events if e["type"] == "message.completed"]
    assert completed == [{**completed[0], "message_id": str(msg.pk), "status": status}]
    return event, msg


@pytest.fixture
def thread_on(users, workspaces):
    def make(provider, **fields):
        return make_thread(users["alice"], workspaces["demo"], provider, **fields)

    return make


@pytest.fixture
def unreachable_provider(db, openai_provider):
    # openai_provider sets TEST_OPENAI_KEY: the key is present, only the host is down.
    return Provider.objects.create(
        slug="down", name="Down", kind="openai_compatible", base_url="http://127.0.0.1:9/v1",
        api_key_env="TEST_OPENAI_KEY", default_model="fake-model",
    )


def test_unreachable_provider_fails_with_root_cause_then_next_turn_works(
    users, thread_on, unreachable_provider, openai_provider, fake_openai, converse
):
    thread = thread_on(unreachable_provider)
    run, events = converse(thread, users["alice"], "Hello?")

    event, msg = assert_failed_turn(run, events, thread, status="error")
    assert "connection refused to 127.0.0.1:9" in event["error"]["message"]
    assert event["error"]["code"] == "unreachable"
    assert event["retryable"] is True
    assert msg.content == "" and joined_text(events) == ""
    assert fake_openai.requests == []

    # The same thread, switched to a working provider, carries on.
    thread.provider = openai_provider
    thread.model = openai_provider.default_model
    thread.save()  # a full save of this (stale) instance must not disturb message positions
    fake_openai.script(text_chunks("Back online."))
    run2, events2 = converse(thread, users["alice"], "Hello again?")

    assert run2.status == Run.Status.COMPLETED
    assert types(events2)[-1] == "run.completed" and "run.failed" not in types(events2)
    final = last_assistant(thread)
    assert final.content == "Back online." == joined_text(events2)
    assert final.status == "complete"
    [request] = fake_openai.requests
    contents = [(m["role"], m.get("content")) for m in request["messages"] if m["role"] != "system"]
    assert contents == [("user", "Hello?"), ("user", "Hello again?")]
    # The failed message is still in the thread, as an error.
    assert Message.objects.get(pk=msg.pk).status == "error"


def test_wrong_api_key_is_reported_as_invalid_api_key(users, thread_on, openai_provider, fake_openai, converse, monkeypatch):
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-wrong")
    fake_openai.script(text_chunks("never sent"))
    thread = thread_on(openai_provider)
    run, events = converse(thread, users["alice"], "Hello?")

    event, msg = assert_failed_turn(run, events, thread)
    assert "invalid API key" in event["error"]["message"]
    assert "401" in event["error"]["message"]
    assert event["error"]["code"] == "auth_failed"
    assert event["retryable"] is False
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-wrong"
    assert fake_openai.remaining == 1  # rejected by auth, no iteration consumed
    assert "sk-wrong" not in json.dumps(events)


def test_rate_limited_mentions_429_and_retry_after(users, thread_on, openai_provider, fake_openai, converse):
    fake_openai.script(Failure(status=429, message="Rate limit reached", headers={"retry-after": "7"}))
    thread = thread_on(openai_provider)
    run, events = converse(thread, users["alice"], "Hello?")

    event, msg = assert_failed_turn(run, events, thread)
    message = event["error"]["message"]
    assert "429" in message and "retry after 7" in message
    assert event["error"]["code"] == "rate_limited"
    assert event["retryable"] is True
    assert len(fake_openai.requests) == 1  # no silent retries in tests (PROVIDER_MAX_RETRIES=0)


def test_missing_key_says_not_configured_and_names_the_variable(
    db, users, thread_on, fake_openai, converse, monkeypatch
):
    monkeypatch.delenv(UNSET_KEY_VAR, raising=False)
    provider = Provider.objects.create(
        slug="nokey", name="No key", kind="openai_compatible", base_url=fake_openai.base_url,
        api_key_env=UNSET_KEY_VAR, default_model="fake-model",
    )
    thread = thread_on(provider)
    run, events = converse(thread, users["alice"], "Hello?")

    event, msg = assert_failed_turn(run, events, thread)
    assert "not configured" in event["error"]["message"]
    assert UNSET_KEY_VAR in event["error"]["message"]
    assert event["error"]["code"] == "not_configured"
    assert event["retryable"] is False
    assert fake_openai.requests == []  # nothing was sent without a key


def test_stream_dying_midway_keeps_partial_text_as_truncated(
    users, thread_on, openai_provider, fake_openai, converse
):
    chunks = text_chunks("The answer starts here and then", pieces=4)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    fake_openai.script(DieAfter(chunks[:-1]))  # no finish chunk, no [DONE], connection dropped
    thread = thread_on(openai_provider)
    run, events = converse(thread, users["alice"], "Tell me")

    event, msg = assert_failed_turn(run, events, thread, status="truncated")
    assert event["error"]["code"] == "stream_interrupted"
    assert event["retryable"] is True
    assert run.status == Run.Status.FAILED
    assert joined_text(events) == "The answer starts here and then"
    assert msg.content == joined_text(events)
    # The partial text went out before the failure.
    idx = types(events)
    assert idx.index("text.delta") < idx.index("message.completed") < idx.index("run.failed")


def test_a_chunk_that_is_not_a_json_object_fails_the_turn_and_keeps_the_text(
    users, thread_on, openai_provider, fake_openai, converse
):
    # Chunks reach the adapter as the JSON the provider sent (not SDK objects): a valid JSON
    # value that is not an object is a precise upstream error, not an AttributeError.
    fake_openai.script_raw([  # sent exactly as given
        {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Partial "}, "finish_reason": None}]},
        ["not", "a", "chunk"],
    ])
    thread = thread_on(openai_provider)
    run, events = converse(thread, users["alice"], "Hello?")

    event, msg = assert_failed_turn(run, events, thread, status="truncated")  # the partial text is kept
    assert event["error"]["code"] == "upstream_error"
    assert "not a JSON object" in event["error"]["message"]
    assert msg.content == "Partial " == joined_text(events)
    assert fake_openai.headers[0]["authorization"].startswith("Bearer ")


@pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "on-thread"])
def test_a_chunk_that_is_not_valid_json_fails_the_turn_and_keeps_the_text(
    on_loop, users, thread_on, openai_provider, fake_openai, converse, settings
):
    # The SDK's SSE decoding raises JSONDecodeError: a precise upstream error, the text so far
    # kept, the message closed — not an internal error with the message left streaming.
    settings.PROVIDER_STREAM_ON_LOOP = on_loop
    fake_openai.script_raw([
        {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "alpha beta "}, "finish_reason": None}]},
        RawLine("{broken json"),
    ])
    thread = thread_on(openai_provider)
    run, events = converse(thread, users["alice"], "Hello?")

    event, msg = assert_failed_turn(run, events, thread, status="truncated")
    assert event["error"] == {"code": "upstream_error",
                              "message": "the provider sent a chunk that is not valid JSON: '{broken json'"}
    assert msg.content == "alpha beta " == joined_text(events)
    run, events = converse(thread, users["alice"], "Again?")  # the thread goes on
    assert run.status == Run.Status.COMPLETED


def test_a_turn_that_crashes_mid_stream_closes_its_message(users, thread_on, openai_provider, scripted_model,
                                                            sink_for, settings):
    """A bug (not a provider error) mid-stream: the run fails with internal_error and its
    streaming message is closed as truncated with the text the heartbeat saved — never left
    streaming."""
    from agents.services import run_create
    from tests.scripted import WaitFor

    settings.STREAM_PERSIST_INTERVAL_S = 0.05
    settings.RUN_HEARTBEAT_S = 0.05
    saved = WaitFor(lambda: Message.objects.filter(role="assistant", content="Saved text").exists())
    scripted_model.script([TextDelta("Saved text"), saved, RuntimeError("an adapter bug")])
    thread = thread_on(openai_provider)
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="Hello?")
    events = sink.until_terminal(created.run.pk)
    created.run.refresh_from_db()
    event, msg = assert_failed_turn(created.run, events, thread, status="truncated")
    assert event["error"] == {"code": "internal_error", "message": "internal error: RuntimeError"}
    assert msg.content == "Saved text" == joined_text(events)  # msg.error is the run's (assert_failed_turn)


# --------------------------------------------------------------------------------------- #
# A planted key never reaches events, messages, run errors or logs
# --------------------------------------------------------------------------------------- #
PLANTED = "sk-planted-7f3a9c2e5b1d4e6f8a0b"
FRAGMENT = "planted-7f3a9c2e"


def _failures():
    echo = f"Incorrect API key provided: {PLANTED}. Your key {PLANTED} was rejected."
    return {
        "401-echoes-key": [Failure(status=401, message=echo, code="invalid_api_key")],
        "400-echoes-key": [Failure(status=400, message=echo)],
        "403-echoes-key": [Failure(status=403, message=echo)],
        "429-echoes-key": [Failure(status=429, message=echo, headers={"retry-after": "3"})],
        "500-echoes-key": [Failure(status=500, message=echo)],
        "error-event-mid-stream": [
            [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Partial "}, "finish_reason": None}]},
             {"error": {"message": echo, "type": "server_error"}}]
        ],
        "stream-dies": [DieAfter(text_chunks("Partial text", pieces=2)[:-1])],
        "tool-turn-then-401": None,  # built in the test (needs a tool call first)
    }


@pytest.mark.parametrize("mode", list(_failures()))
def test_planted_key_never_leaks(mode, users, thread_on, openai_provider, fake_openai, converse, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("TEST_OPENAI_KEY", PLANTED)
    fake_openai.api_key = PLANTED  # the upstream accepts the key, then fails in its own way
    script = _failures()[mode]
    if script is None:
        args = json.dumps({"query": "key", "workspace_id": 1})
        script = [
            [{"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                {"index": 0, "id": "call_k", "type": "function",
                 "function": {"name": "search_knowledge", "arguments": args}}]}, "finish_reason": None}]},
             {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}],
            Failure(status=401, message=f"Incorrect API key provided: {PLANTED}"),
        ]
    fake_openai.script(*script)
    thread = thread_on(openai_provider)
    run, events = converse(thread, users["alice"], "Hello?")

    assert run.status == Run.Status.FAILED
    failed_event(events)
    assert fake_openai.headers[0]["authorization"] == f"Bearer {PLANTED}"  # it was really used
    blobs = {
        "events": json.dumps(events),
        "messages": json.dumps(list(Message.objects.filter(thread=thread).values()), default=str),
        "runs": json.dumps(list(Run.objects.values()), default=str),
        "tool_calls": json.dumps(list(ToolCall.objects.values()), default=str),
        "logs": caplog.text,
    }
    for where, blob in blobs.items():
        assert PLANTED not in blob, f"key leaked into {where}"
        assert FRAGMENT not in blob, f"part of the key leaked into {where}"
