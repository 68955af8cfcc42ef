"""``/metrics``: the named Prometheus series after a real run; refused to the public."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import ToolCall
from tests.conftest import make_thread, types
from tests.fakes.openai_server import Failure, text_chunks, tool_call_chunks

pytestmark = pytest.mark.django_db(transaction=True)

SERIES = [
    "chatplatform_runs{status=\"completed\"}",
    "chatplatform_runs{status=\"failed\"}",
    "chatplatform_approvals_pending",
    "chatplatform_approval_oldest_age_seconds",
    "chatplatform_tool_calls_stored{",
    "chatplatform_time_to_first_token_seconds_bucket{",
    "chatplatform_tokens_per_second_bucket{",
    "chatplatform_tokens_total{",
    "chatplatform_provider_errors_total{code=\"auth_failed\"}",
    "chatplatform_events_filled_total",
    "chatplatform_websocket_connections",
    "django_http_requests_total_by_method_total",
]


def sample(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{prefix} not exposed")


def test_metrics_expose_the_platform_series(users, workspaces, openai_provider, fake_openai, converse):
    fake_openai.script(tool_call_chunks([("c1", "search_knowledge", '{"query": "x"}')]),
                       text_chunks("Hello there") + [{"choices": [], "usage": {
                           "prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}],
                       Failure(401, "bad key"))
    thread = make_thread(users["alice"], workspaces["demo"], openai_provider)
    run, events = converse(thread, users["alice"], "Hi")
    assert types(events)[-1] == "run.completed"
    before = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    errors_before = sample(before, 'chatplatform_provider_errors_total{code="auth_failed"}') if \
        'chatplatform_provider_errors_total{code="auth_failed"}' in before else 0.0
    run, events = converse(thread, users["alice"], "Again")
    assert types(events)[-1] == "run.failed"

    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    for name in SERIES:
        assert name in text, name
    assert sample(text, 'chatplatform_runs{status="completed"}') == 1
    assert sample(text, 'chatplatform_runs{status="failed"}') == 1
    assert sample(text, 'chatplatform_provider_errors_total{code="auth_failed"}') == errors_before + 1
    assert sample(text, 'chatplatform_tokens_total{kind="output",model="fake-model",provider="fake-openai"}') >= 3
    assert sample(text, "chatplatform_approvals_pending ") == ToolCall.objects.filter(
        status="awaiting_approval").count()
    assert sample(text, 'chatplatform_tool_calls_stored{status="succeeded",tool="search_knowledge"}') == 1


async def test_the_cursor_counts_events_it_fills_from_the_log():
    from agents.metrics import EVENTS_FILLED
    from agents.replay import RunStreamCursor

    log = [{"type": "text.delta", "run_id": "r", "seq": n, "text": str(n)} for n in (1, 2, 3)]

    async def reader(run_id, after):
        return [e for e in log if e["seq"] > after]

    gap = EVENTS_FILLED.labels("gap")
    before = gap._value.get()
    cursor = RunStreamCursor(reader=reader)
    assert [e["seq"] for e in await cursor.accept(log[0])] == [1]
    assert [e["seq"] for e in await cursor.accept(log[2])] == [2, 3]  # seq 2 was dropped by the layer
    assert gap._value.get() - before == 1  # only seq 2 came from the log


@pytest.mark.parametrize("address", ["203.0.113.7", "10.1.2.3", "2001:db8::1"])
def test_metrics_refuse_a_public_request_without_the_token(db, settings, address):
    settings.METRICS_TOKEN = "s3cret-token"
    anonymous = Client(REMOTE_ADDR=address)
    assert anonymous.get("/metrics").status_code == 403
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    allowed = anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert allowed.status_code == 200 and b"chatplatform_runs" in allowed.content


def test_a_proxied_request_from_loopback_needs_the_token(db, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    proxied = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert proxied.get("/metrics").status_code == 403
    assert proxied.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200


def test_metrics_allowlist_takes_networks(db, settings):
    settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403


def test_a_worker_serves_its_own_series_on_loopback(db):
    import socket

    import httpx

    from usage.metrics import start_worker_exporter

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = start_worker_exporter(port=port)
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", trust_env=False).text
        assert "chatplatform_time_to_first_token_seconds" in body and "chatplatform_tokens_total" in body
    finally:
        server.shutdown()
