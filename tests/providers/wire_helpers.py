"""Fixtures and helpers shared by the Anthropic, Ollama, tier, switch and catalogue tests.

Import the fixtures into a test module (``from tests.providers.wire_helpers import *``):

* ``tool_log`` — registers the tools of tests/cases/tools.json; yields ``[(name, args)]``
  of every execution, in order;
* ``fake_anthropic`` / ``anthropic_provider`` — the fake Anthropic server and its row
  (key in ``TEST_ANTHROPIC_KEY``);
* ``fake_ollama`` / ``ollama_provider`` — the fake Ollama server and its row;
* ``no_coalescing`` — every provider delta becomes its own ``text.delta`` event.
"""

from __future__ import annotations

import logging

import pytest

from agents.models import Provider, Run
from agents.tools import make_spec, registry
from chat.models import Message
from tests.conftest import joined_text, load_case, types
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.ollama_server import FakeOllama

ANTHROPIC_KEY = "sk-ant-test"

__all__ = [
    "ANTHROPIC_KEY",
    "anthropic_provider",
    "assert_completed",
    "error_logs",
    "fake_anthropic",
    "fake_ollama",
    "no_coalescing",
    "ollama_provider",
    "tool_log",
]


@pytest.fixture
def tool_log():
    """Registers the test tools of tests/cases/tools.json; yields the (name, args) of every
    execution, in order."""
    calls: list[tuple[str, dict]] = []

    def make_func(name):
        def func(*, ctx, **args):
            calls.append((name, args))
            return {"tool": name, "args": args, "summary": f"{name} ok"}

        return func

    specs = []
    for name, decl in load_case("tools.json").items():
        flags = {"default_approval": "never"} if decl["risk"] != "read" else {}
        specs.append(make_spec(name=name, description=f"test tool {name}", parameters=decl["parameters"],
                               risk=decl["risk"], func=make_func(name), **flags))
    with registry.scoped(*specs):
        yield calls


@pytest.fixture
def fake_anthropic():
    fake = FakeAnthropic(api_key=ANTHROPIC_KEY).start()
    yield fake
    fake.stop()


@pytest.fixture
def anthropic_provider(db, fake_anthropic, monkeypatch):
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    return Provider.objects.create(
        slug="fake-anthropic", name="Fake Anthropic", kind="anthropic", base_url=fake_anthropic.base_url,
        api_key_env="TEST_ANTHROPIC_KEY", default_model="claude-fake-1",
    )


@pytest.fixture
def fake_ollama():
    fake = FakeOllama().start()
    yield fake
    fake.stop()


@pytest.fixture
def ollama_provider(db, fake_ollama):
    return Provider.objects.create(
        slug="fake-ollama", name="Fake Ollama", kind="ollama", base_url=fake_ollama.base_url,
        default_model="qwen2.5:14b",
    )


@pytest.fixture
def no_coalescing(settings):
    """Every provider delta becomes its own text.delta event (so "not even briefly" is
    checked per delta, not on merged text)."""
    settings.EVENTS_COALESCE_WINDOW_S = 0.0


def assert_completed(run, events) -> Message:
    """Gap-free seqs, one run.completed, one message.completed per assistant message, and
    the run's assistant texts equal to the concatenated deltas. Returns the last one."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types(events)[0] == "run.started"
    assert types(events)[-1] == "run.completed", events[-1]
    assert types(events).count("run.completed") == 1 and "run.failed" not in types(events)
    assert run.status == Run.Status.COMPLETED
    completed = [e["message_id"] for e in events if e["type"] == "message.completed"]
    assert len(completed) == len(set(completed))
    msgs = list(Message.objects.filter(run=run, role="assistant").order_by("position"))
    assert sorted(completed) == sorted(str(m.pk) for m in msgs)
    assert "".join(m.content for m in msgs) == joined_text(events)
    return msgs[-1]


def error_logs(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
