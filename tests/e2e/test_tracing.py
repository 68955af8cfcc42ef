"""OpenTelemetry: with an OTLP endpoint configured, one trace runs from the HTTP request that
sends a message through the executor to the model request and the tool call, exported to a
collector of the tests' own (real OTLP/HTTP protobuf over loopback)."""

from __future__ import annotations

import time

import pytest

from tests.fakes.otlp_collector import FakeCollector

from . import flows
from .harness import Platform


@pytest.fixture(scope="module")
def collector():
    with FakeCollector() as fake:
        yield fake


@pytest.fixture(scope="module")
def traced_platform(collector):
    platform = Platform("embedded", extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.base_url,
                                               "OTEL_SERVICE_NAME": "chatplatform-test"})
    platform.start()
    yield platform
    platform.stop()


def descendants(spans: list[dict], root: dict) -> list[dict]:
    children = {}
    for s in spans:
        children.setdefault(s["parent_id"], []).append(s)
    out, todo = [], [root]
    while todo:
        node = todo.pop()
        for child in children.get(node["span_id"], []):
            out.append(child)
            todo.append(child)
    return out


def run_trace(platform: Platform, collector: FakeCollector) -> tuple[dict, list[dict], list[dict]]:
    """Send the demo question over REST and wait for its spans: ``(run span, the run's whole
    trace, the chain of spans from the run span up to the trace's root)``."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token)
    answer = flows.rest_turn(platform, token, thread_id)
    run_id = str(answer["run_id"])

    deadline = time.monotonic() + 20
    while True:  # the batch processor exports every 0.5 s
        spans = collector.snapshot()
        runs = [s for s in spans if s["name"] == "run" and s["attributes"].get("run.id") == run_id]
        if runs and any(s["name"] == "tool.call" for s in descendants(spans, runs[0])):
            trace = [s for s in spans if s["trace_id"] == runs[0]["trace_id"]]
            by_id = {s["span_id"]: s for s in trace}
            chain = [runs[0]]
            while chain[-1]["parent_id"] in by_id:
                chain.append(by_id[chain[-1]["parent_id"]])
            if chain[-1]["parent_id"] == "":  # every span up to the root has been exported
                break
        assert time.monotonic() < deadline, sorted({s["name"] for s in spans})
        time.sleep(0.2)
    return runs[0], trace, chain


def assert_run_spans(run: dict, trace: list[dict]) -> None:
    under_run = descendants(trace, run)
    names = [s["name"] for s in under_run]
    assert names.count("model.request") == 2  # the tool round and the answer
    assert [s["attributes"]["tool"] for s in under_run if s["name"] == "tool.call"] == ["search_knowledge"]
    assert all(s["attributes"]["provider"] == "offline" for s in under_run if s["name"] == "model.request")


def test_one_trace_from_the_request_to_the_provider_and_tool_calls(traced_platform, collector):
    run, trace, chain = run_trace(traced_platform, collector)
    # The run's trace starts at the HTTP request that created it.
    root = chain[-1]
    assert root["parent_id"] == "" and "POST" in root["name"], [s["name"] for s in chain]
    assert root["service"] == "chatplatform-test"
    assert_run_spans(run, trace)


@pytest.fixture(scope="module")
def traced_services_platform(collector):
    from .harness import require_services, services_unreachable_reason

    require_services(services_unreachable_reason())
    platform = Platform("services", extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.base_url,
                                               "OTEL_SERVICE_NAME": "chatplatform-test"})
    platform.start()
    yield platform
    platform.stop()


@pytest.mark.services
def test_production_one_trace_crosses_the_broker_into_the_celery_worker(traced_services_platform, collector):
    """Production mode: daphne enqueues the run on Redis and a Celery worker (another
    process) runs it; the trace context travels in the task message, so the worker's spans
    are children of the request's."""
    run, trace, chain = run_trace(traced_services_platform, collector)
    names = [s["name"] for s in chain]
    root = chain[-1]
    assert root["parent_id"] == "" and "POST" in root["name"], names
    # run ← the worker's task span ← the publish span, inside the request
    task = next((s for s in chain if s["name"] == "run/agents.run_turn"), None)
    publish = next((s for s in chain if s["name"] == "apply_async/agents.run_turn"), None)
    assert task is not None and publish is not None, names
    assert chain.index(run) < chain.index(task) < chain.index(publish) < chain.index(root), names
    assert_run_spans(run, trace)


def test_json_logs_carry_the_run_thread_and_user_on_every_line_of_a_run(traced_platform):
    import json

    result = traced_platform.manage("ask", "--user", "alice", "--json", flows.QUESTION,
                                    env={"LOG_FORMAT": "json", "LOG_LEVEL": "INFO"})
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    run_id = events[0]["run_id"]
    started = next(e for e in events if e["type"] == "run.started")
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    of_run = [line for line in lines if line["run_id"] == run_id]
    assert of_run, lines  # e.g. the grounding line written while the run executes
    assert all(line["thread_id"] == started["thread_id"] and line["user_id"] for line in of_run)
