"""Hostile bodies at ``POST /v1/chat/completions`` (``openai_api.validation``): each is a 400
in OpenAI's error shape, never a 500, and nothing is written. Raw bodies through Django's
test client (the SDK cannot send most of them); the SDK's view of the same refusals is in
``tests/e2e/test_openai_api.py``."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from agents.models import Run
from chat.models import Message, Thread

# transaction=True: the view looks the token up on a database thread of its own
# (chatplatform.credentials.auser_for_authorization), which must see the committed key.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]

URL = "/v1/chat/completions"


@pytest.fixture
def post(users, offline, settings):
    settings.RUN_EXECUTOR = "none"
    key = Token.objects.create(user=users["alice"]).key

    def send(body: bytes | str | dict):
        raw = json.dumps(body) if isinstance(body, dict) else body
        return Client(raise_request_exception=False).post(
            URL, data=raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")

    return send


def refused(response, code: str, param=None) -> dict:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == code, error
    assert error["param"] == param, error
    assert Thread.objects.count() == 0 and Message.objects.count() == 0 and Run.objects.count() == 0
    return error


def user(content="hi", **extra):
    return {"role": "user", "content": content, **extra}


def test_a_body_nested_20000_deep_is_refused(post):
    deep = '{"model": "offline", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + \
        "[" * 20000 + "]" * 20000 + "}"
    error = refused(post(deep), "nested_too_deeply")
    assert "nested more than 32 levels" in error["message"]


def test_a_role_given_as_an_object_is_refused(post):
    error = refused(post({"model": "offline", "messages": [{"role": {"name": "user"}, "content": "hi"}]}),
                    "invalid_request_error", "messages[0].role")
    assert "role must be one of" in error["message"]


@pytest.mark.parametrize(("body", "param"), [
    ('{"model": "offline", "messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages[0].content"),
    ('{"model": "offline\\udfff", "messages": [{"role": "user", "content": "hi"}]}', "model"),
    ('{"model": "offline", "messages": [{"role": "user", "content": [{"type": "text", "text": "\\udc00"}]}]}',
     "messages[0].content[0].text"),
])
def test_a_lone_surrogate_anywhere_is_refused(post, body, param):
    error = refused(post(body), "invalid_text", param)
    assert "lone UTF-16 surrogate" in error["message"]


@pytest.mark.parametrize("body", [
    {"model": "offline", "messages": [user("a\x00b")]},
    {"model": "off\x00line", "messages": [user()]},
    {"model": "offline", "messages": [{"role": "assistant", "content": "earlier\x00"}, user()]},
])
def test_a_nul_in_content_model_or_history_is_refused(post, body):
    error = refused(post(body), "invalid_text")
    assert "NUL character" in error["message"]


def test_too_many_messages_are_refused_before_any_work(post, settings):
    settings.COMPAT_API_MAX_MESSAGES = 50
    history = [m for n in range(30) for m in (user(f"q{n}"), {"role": "assistant", "content": f"a{n}"})] + [user()]
    error = refused(post({"model": "offline", "messages": history}), "too_many_messages", "messages")
    assert "at most 50 messages" in error["message"] and "got 61" in error["message"]


@pytest.mark.parametrize(("body", "param"), [
    ({"model": {"id": "offline"}, "messages": [user()]}, "model"),
    ({"model": "offline", "messages": ["hi"]}, "messages[0]"),
    ({"model": "offline", "messages": [{"role": "assistant", "content": "", "tool_calls": "f"}, user()]},
     "messages[0].tool_calls"),
    ({"model": "offline", "messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": "f"}]},
                                       user()]}, "messages[0].tool_calls"),
])
def test_wrong_types_are_refused(post, body, param):
    refused(post(body), "invalid_request_error", param)


@pytest.mark.parametrize("raw", [b"\xff\xfe not utf-8", b"{not json", b"[]"])
def test_bodies_that_are_not_a_json_object(post, raw):
    code = "invalid_request_error" if raw == b"[]" else "invalid_json"
    refused(post(raw), code)


def test_a_body_over_the_upload_limit_is_a_413_in_the_openai_shape(post, settings):
    settings.COMPAT_API_MAX_BODY_BYTES = 1000  # /v1's own limit (image parts make large bodies)
    settings.COMPAT_API_WAIT_S = 0.2  # were it taken, the answer would not wait long
    response = post({"model": "offline", "messages": [user("x" * 2000)]})
    assert response.status_code == 413
    assert response.json()["error"] == {"message": "The request body is too large.", "type": "invalid_request_error",
                                        "param": None, "code": "too_large"}


def test_a_good_request_still_starts_a_run(post, settings):
    """(No executor here: the answer is the "still working" note after COMPAT_API_WAIT_S.)"""
    settings.COMPAT_API_WAIT_S = 0.2
    response = post({"model": "offline", "messages": [user("hello")]})
    assert response.status_code == 200, response.content[:300]
    assert response.json()["chatplatform"]["status"] in ("queued", "running")
    assert Run.objects.count() == 1
