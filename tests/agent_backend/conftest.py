"""Fixtures for the agent backend (provider kind ``agent_runs``).

* ``hermes_exe`` — the real ``hermes`` executable from its own cached venv (installed on first
  use, see ``hermes.py``). When the package cannot be installed the Hermes tests are skipped
  with the installer's reason — unless ``CI=true``, where they fail.
* ``agent_model`` — the scripted OpenAI-compatible model the gateway talks to (loopback).
* ``hermes`` — a running gateway (module scope: one per test file; ~5 s to start) in a
  throwaway HOME, its terminal working in ``hermes.workdir``.
* ``fake_agent`` / ``provider`` — the scripted fake of the Runs API (``tests/fakes/agent_runs_server.py``)
  and a Provider row ``ops-agent`` pointing at it.
* ``agent_provider`` — a Provider row of kind ``agent_runs`` pointing at that gateway, its
  key in an environment variable as for any provider.
"""

from __future__ import annotations

import os

import pytest

from agents.models import Provider
from tests.fakes.agent_model import AgentModel
from tests.fakes.agent_runs_server import FakeAgentRuns

from .hermes import HermesGateway, HermesUnavailable, ensure_hermes


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


@pytest.fixture(scope="session")
def hermes_exe():
    try:
        return ensure_hermes()
    except (HermesUnavailable, OSError) as exc:
        if _ci():
            pytest.fail(f"CI=true requires the Hermes agent gateway: {exc}", pytrace=False)
        pytest.skip(f"hermes-agent could not be installed here: {exc}")


@pytest.fixture(scope="module")
def agent_model():
    model = AgentModel(api_key="sk-agent-model").start()
    yield model
    model.stop()


def start_gateway(hermes_exe, agent_model, tmp_path_factory) -> HermesGateway:
    gateway = HermesGateway(hermes_exe, tmp_path_factory.mktemp("hermes-home"), model_base_url=agent_model.base_url,
                            model_key="sk-agent-model")
    try:
        return gateway.start()
    except HermesUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def hermes(hermes_exe, agent_model, tmp_path_factory):
    gateway = start_gateway(hermes_exe, agent_model, tmp_path_factory)
    yield gateway
    gateway.cleanup()


@pytest.fixture
def agent_provider(db, hermes, monkeypatch):
    monkeypatch.setenv("TEST_HERMES_KEY", hermes.key)
    return Provider.objects.create(slug="hermes", name="Hermes agent", kind="agent_runs", base_url=hermes.base_url,
                                   api_key_env="TEST_HERMES_KEY", default_model="hermes-agent")


FAKE_AGENT_KEY = "agent-key-0123456789"


@pytest.fixture
def fake_agent():
    fake = FakeAgentRuns(api_key=FAKE_AGENT_KEY).start()
    yield fake
    fake.stop()


@pytest.fixture
def provider(db, fake_agent, monkeypatch, settings):
    settings.AGENT_RUNS_POLL_S = 0.1
    monkeypatch.setenv("TEST_AGENT_KEY", FAKE_AGENT_KEY)
    return Provider.objects.create(slug="ops-agent", name="Ops agent", kind="agent_runs", base_url=fake_agent.base_url,
                                   api_key_env="TEST_AGENT_KEY", default_model="hermes-agent")
