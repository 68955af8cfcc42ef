"""Issue 17: an upstream that echoes the provider key — transformed: prefix dropped,
upper-cased, cut short — leaks it nowhere: not into events, the stored message error, the
run, nor the logs (provider status lines go through the same ``scrub``)."""

from __future__ import annotations

import logging

import pytest

from agents.models import Provider
from chat.models import Message
from chatplatform.redaction import redact
from tests.conftest import make_thread
from tests.fakes.openai_server import Failure, FakeOpenAI

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-proj-Q7fLm2Xz9RtB4kWc8NvH1sJd6YpA3eGu"
BODY = KEY.removeprefix("sk-proj-")
ECHOES = {
    "verbatim": f"Incorrect API key provided: {KEY}.",
    "prefix dropped, upper-cased": f"Key {BODY.upper()} is not valid for this project.",
    "cut short": f"Incorrect API key provided: sk-proj-{BODY[:14]}****{BODY[-4:]}",
    "lower-cased in JSON": f'{{"api_key": "{BODY.lower()}", "error": "bad key"}}',
}
FRAGMENTS = [KEY, BODY, BODY.upper(), BODY.lower(), BODY[:14], BODY[:14].upper(), BODY[:14].lower()]


def leaks(text: str) -> list[str]:
    low = text.lower()
    return [f for f in FRAGMENTS if f.lower() in low]


@pytest.mark.parametrize("text", list(ECHOES.values()), ids=list(ECHOES))
def test_transformed_keys_are_redacted(text):
    assert leaks(redact(text, [KEY])) == []
    assert "[redacted]" in redact(text, [KEY])


def test_unknown_key_shaped_tokens_are_redacted_and_plain_text_is_not():
    assert redact("rejected sk-live-ZZZZ9999yyyy8888xxxx") == "rejected [redacted]"
    assert redact("Authorization: Bearer abcdefghijklmnop1234") == "Authorization: Bearer [redacted]"
    plain = "model 'gpt-4o-mini' not found (HTTP 404); run 4f6c1c1e-8a8b-4a8e-9a4c-3b9a1f2f1d11"
    assert redact(plain) == plain


@pytest.fixture
def keyed_upstream(monkeypatch):
    fake = FakeOpenAI(api_key=KEY).start()
    monkeypatch.setenv("LEAKY_OPENAI_KEY", KEY)
    yield fake
    fake.stop()


@pytest.mark.parametrize("echo", list(ECHOES), ids=list(ECHOES))
def test_an_upstream_echoing_the_key_leaks_it_nowhere(users, workspaces, keyed_upstream, converse, caplog, echo):
    provider = Provider.objects.create(slug="leaky", name="Leaky", kind="openai_compatible",
                                       base_url=keyed_upstream.base_url, api_key_env="LEAKY_OPENAI_KEY",
                                       default_model="fake-model")
    keyed_upstream.script(Failure(status=400, message=ECHOES[echo]))
    thread = make_thread(users["alice"], workspaces["demo"], provider)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("agents.test").warning("upstream said: %s", ECHOES[echo])  # a careless log line
        run, events = converse(thread, users["alice"], "hello")
    failed = events[-1]
    assert failed["type"] == "run.failed"
    assert leaks(str(events)) == [], events
    message = Message.objects.filter(thread=thread, role="assistant").last()
    assert leaks(str(message.error)) == [] and leaks(message.content) == []
    assert leaks(str(run.error)) == []
    # The console handler configured by LOGGING redacts every record it writes.
    handler_filters = [f for h in logging.getLogger().handlers for f in h.filters
                       if type(f).__name__ == "RedactingFilter"]
    assert handler_filters
    for record in caplog.records:
        for f in handler_filters:
            f.filter(record)
        assert leaks(record.getMessage()) == [], record.getMessage()


def test_the_platforms_own_api_keys_are_redacted_unknown():
    """A self-service API key (``cp_`` + 43 URL-safe characters, some with ``-`` or ``_`` so
    the long-opaque-token rule alone misses them) pasted into a log line or an error."""
    key = "cp_Xk3-9fQ_zL2mB7wR1vN8cT4yH6jD0sG5aE-uP_iO3qW"
    for text in (f"client sent {key} twice", f'{{"key": "{key}"}}', f"{key[:20]}"):
        out = redact(text)
        assert key[3:15] not in out, out
        assert "[redacted]" in out
