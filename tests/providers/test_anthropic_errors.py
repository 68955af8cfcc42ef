"""Anthropic failures end the run cleanly and name their root cause (walked through
``__cause__`` / ``__context__``): DNS failure, connection refused, TLS verification, 401,
404 model, 429 with retry-after, 5xx, 529 overloaded, an error event mid-stream, a broken
stream. ``SSL_CERT_FILE`` is honoured. A planted key never leaks."""

from __future__ import annotations

import json
import logging
import socket

import pytest

from agents.models import Provider, Run, ToolCall
from chat.models import Message
from tests.conftest import joined_text, make_thread, types
from tests.fakes._loopback import self_signed_cert
from tests.fakes.anthropic_server import DieAfter, Failure, FakeAnthropic, text_events
from tests.providers.wire_helpers import *  # noqa: F403
from tests.providers.wire_helpers import ANTHROPIC_KEY

pytestmark = pytest.mark.django_db(transaction=True)


def failed(run, events) -> dict:
    assert run.status == Run.Status.FAILED
    assert types(events)[-1] == "run.failed" and types(events).count("run.failed") == 1
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    event = events[-1]
    assert run.error == event["error"]
    return event


def provider_at(base_url: str, slug: str = "anthro", **fields) -> Provider:
    return Provider.objects.create(slug=slug, name=slug, kind="anthropic", base_url=base_url,
                                   api_key_env="TEST_ANTHROPIC_KEY", default_model="claude-fake-1", **fields)


@pytest.fixture
def ask(users, workspaces, converse, monkeypatch):
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)

    def go(provider, text="Hello?"):
        thread = make_thread(users["alice"], workspaces["demo"], provider)
        run, events = converse(thread, users["alice"], text)
        return thread, run, events

    return go


STATUS_CASES = {
    "401": (Failure(401, "invalid x-api-key"), "auth_failed", ["invalid API key", "HTTP 401"], False),
    "404-model": (Failure(404, "model: claude-nope"), "model_not_found",
                  ["model 'claude-fake-1' not found", "HTTP 404"], False),
    "429": (Failure(429, "Number of requests has exceeded your rate limit", headers={"retry-after": "7"}),
            "rate_limited", ["HTTP 429", "retry after 7 s"], True),
    "500": (Failure(500, "Internal server error"), "upstream_error", ["HTTP 500"], True),
    "529": (Failure(529, "Overloaded"), "upstream_error", ["overloaded", "HTTP 529"], True),
    "400": (Failure(400, "messages: text content blocks must be non-empty"), "bad_request",
            ["HTTP 400", "text content blocks must be non-empty"], False),
}


@pytest.mark.parametrize("name", list(STATUS_CASES))
def test_http_errors_name_their_cause(name, ask, anthropic_provider, fake_anthropic):
    failure, code, phrases, retryable = STATUS_CASES[name]
    fake_anthropic.script(failure)
    thread, run, events = ask(anthropic_provider)

    event = failed(run, events)
    assert event["error"]["code"] == code
    for phrase in phrases:
        assert phrase in event["error"]["message"]
    assert event["retryable"] is retryable
    msg = Message.objects.filter(thread=thread, role="assistant").get()
    assert msg.status == "error" and msg.error == event["error"]


def test_every_root_cause_reads_differently(ask, anthropic_provider, fake_anthropic):
    messages = set()
    for failure, *_ in STATUS_CASES.values():
        fake_anthropic.script(failure)
        _, run, events = ask(anthropic_provider)
        messages.add(failed(run, events)["error"]["message"])
    assert len(messages) == len(STATUS_CASES)


def test_connection_refused(ask, db):
    thread, run, events = ask(provider_at("http://127.0.0.1:9"))
    event = failed(run, events)
    assert event["error"]["code"] == "unreachable"
    assert "connection refused to 127.0.0.1:9" in event["error"]["message"]
    assert event["retryable"] is True


def test_dns_failure(ask, db, monkeypatch):
    real = socket.getaddrinfo

    def fake_getaddrinfo(host, *args, **kwargs):
        if host == "anthropic.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    thread, run, events = ask(provider_at("https://anthropic.invalid"))
    event = failed(run, events)
    assert event["error"]["code"] == "unreachable"
    assert "DNS lookup failed to anthropic.invalid:443" in event["error"]["message"]


def test_tls_verification_failure_then_ssl_cert_file_is_honoured(ask, db, tmp_path, monkeypatch):
    certfile, keyfile = self_signed_cert(tmp_path)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    with FakeAnthropic([text_events("Trusted now.")], api_key=ANTHROPIC_KEY, tls=(certfile, keyfile)) as fake:
        assert fake.base_url.startswith("https://127.0.0.1:")
        provider = provider_at(fake.base_url)
        _, run, events = ask(provider)
        event = failed(run, events)
        assert event["error"]["code"] == "unreachable"
        assert "TLS certificate verification failed" in event["error"]["message"]
        assert fake.message_requests == []

        monkeypatch.setenv("SSL_CERT_FILE", certfile)  # a company CA bundle
        thread, run, events = ask(provider)
        assert run.status == Run.Status.COMPLETED, events[-1]
        assert joined_text(events) == "Trusted now."
        assert len(fake.message_requests) == 1


def test_requests_ca_bundle_is_honoured_too(ask, db, tmp_path, monkeypatch):
    certfile, keyfile = self_signed_cert(tmp_path)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certfile)
    with FakeAnthropic([text_events("Via REQUESTS_CA_BUNDLE.")], api_key=ANTHROPIC_KEY, tls=(certfile, keyfile)) as fake:
        _, run, events = ask(provider_at(fake.base_url))
        assert run.status == Run.Status.COMPLETED, events[-1]


def test_error_event_mid_stream_keeps_the_partial_text(ask, anthropic_provider, fake_anthropic):
    events = text_events("The answer is", stop_reason=None)
    events.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    fake_anthropic.script(events)
    thread, run, out = ask(anthropic_provider)

    event = failed(run, out)
    assert event["error"]["code"] == "upstream_error"
    assert "overloaded mid-stream" in event["error"]["message"]
    msg = Message.objects.filter(thread=thread, role="assistant").get()
    assert msg.status == "truncated" and msg.content == "The answer is" == joined_text(out)


def test_stream_dying_midway_is_stream_interrupted(ask, anthropic_provider, fake_anthropic):
    fake_anthropic.script(DieAfter(text_events("Partial answer", stop_reason=None)))
    thread, run, out = ask(anthropic_provider)

    event = failed(run, out)
    assert event["error"]["code"] == "stream_interrupted" and event["retryable"] is True
    msg = Message.objects.filter(thread=thread, role="assistant").get()
    assert msg.status == "truncated" and msg.content == "Partial answer"


def test_missing_key_names_the_variable(users, workspaces, converse, fake_anthropic, monkeypatch):
    monkeypatch.delenv("CHATPLATFORM_UNSET_ANTHROPIC", raising=False)
    provider = Provider.objects.create(slug="nokey", name="No key", kind="anthropic", base_url=fake_anthropic.base_url,
                                       api_key_env="CHATPLATFORM_UNSET_ANTHROPIC", default_model="claude-fake-1")
    run, events = converse(make_thread(users["alice"], workspaces["demo"], provider), users["alice"], "Hi")
    event = failed(run, events)
    assert event["error"]["code"] == "not_configured"
    assert "not configured: set CHATPLATFORM_UNSET_ANTHROPIC" in event["error"]["message"]
    assert fake_anthropic.requests == []


def test_a_worker_says_at_start_which_enabled_provider_it_has_no_key_for(db, monkeypatch, caplog):
    """A trial's worker was started without the provider's key variable: it failed each run it
    took with not_configured, and nothing said so at start (``worker_ready``)."""
    from agents.provider_keys import warn_unconfigured_providers

    monkeypatch.delenv("CHATPLATFORM_UNSET_ANTHROPIC", raising=False)
    monkeypatch.setenv("CHATPLATFORM_SET_ANTHROPIC", "sk-ant-set")
    Provider.objects.create(slug="nokey", name="No key", kind="anthropic", api_key_env="CHATPLATFORM_UNSET_ANTHROPIC")
    Provider.objects.create(slug="withkey", name="Key", kind="anthropic", api_key_env="CHATPLATFORM_SET_ANTHROPIC")
    Provider.objects.create(slug="off", name="Off", kind="anthropic", api_key_env="CHATPLATFORM_UNSET_ANTHROPIC",
                            enabled=False)
    caplog.set_level(logging.WARNING, logger="agents.provider_keys")
    warnings = [w for w in warn_unconfigured_providers() if "CHATPLATFORM_" in w]
    assert warnings == ["provider 'nokey' is enabled but not configured in this process: set "
                        "CHATPLATFORM_UNSET_ANTHROPIC; its runs here will fail not_configured"]
    assert [r.getMessage() for r in caplog.records if "CHATPLATFORM_" in r.getMessage()] == warnings


# --------------------------------------------------------------------------------------- #
# A planted key never reaches events, messages, runs, the ledger or logs
# --------------------------------------------------------------------------------------- #
PLANTED = "sk-ant-planted-4c1e9b7d2a6f8e3b"
FRAGMENT = "planted-4c1e9b7d"


def _leak_scripts():
    echo = f"invalid x-api-key: {PLANTED} (key {PLANTED} was revoked)"
    return {
        "401-echoes-key": [Failure(401, echo)],
        "429-echoes-key": [Failure(429, echo, headers={"retry-after": "2"})],
        "500-echoes-key": [Failure(500, echo)],
        "error-event-echoes-key": [text_events("Partial ", stop_reason=None)
                                   + [{"type": "error", "error": {"type": "api_error", "message": echo}}]],
        "tool-turn-then-401": [
            [{"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": "toolu_k", "name": "search_knowledge", "input": {}}},
             {"type": "content_block_delta", "index": 0,
              "delta": {"type": "input_json_delta", "partial_json": json.dumps({"query": "key"})}},
             {"type": "content_block_stop", "index": 0},
             {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
              "usage": {"output_tokens": 5}}],
            Failure(401, echo),
        ],
    }


@pytest.mark.parametrize("mode", list(_leak_scripts()))
def test_planted_key_never_leaks(mode, users, workspaces, converse, fake_anthropic, anthropic_provider,
                                 monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", PLANTED)
    fake_anthropic.api_key = PLANTED
    fake_anthropic.script(*_leak_scripts()[mode])
    thread = make_thread(users["alice"], workspaces["demo"], anthropic_provider)
    run, events = converse(thread, users["alice"], "Hello?")

    assert run.status == Run.Status.FAILED
    sent = fake_anthropic.headers[0]
    assert PLANTED in (sent.get("x-api-key", ""), sent.get("authorization", "").removeprefix("Bearer "))
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
