"""Agent providers in the configuration and on the chat page: ``seed_demo`` registers
``hermes`` from ``HERMES_API_KEY``/``HERMES_API_BASE`` (the key stays in the environment), the
providers API never shows it, and the thread header says "Admin mode — <agent name>"
whenever the thread targets an agent provider."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from agents.models import Provider
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db

SECRET = "hermes-secret-key-0123456789"


def test_seed_demo_registers_the_hermes_agent_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HERMES_API_KEY", SECRET)
    monkeypatch.setenv("HERMES_API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DEMO_PASSWORD", "pw-demo-12345")
    from chat.management.commands import seed_demo

    monkeypatch.setattr(seed_demo, "import_python_reference", lambda **kw: (0, 0))
    call_command("seed_demo", stdout=open(tmp_path / "out.txt", "w"))
    hermes = Provider.objects.get(slug="hermes")
    assert (hermes.kind, hermes.base_url, hermes.api_key_env, hermes.default_model) == (
        "agent_runs", "http://127.0.0.1:9/v1", "HERMES_API_KEY", "hermes-agent")
    assert hermes.api_key_encrypted == ""  # the key is read from the environment, never stored

    client = APIClient()
    client.login(username="admin", password="pw-demo-12345")
    body = client.get("/api/v1/providers/").content.decode()
    assert '"hermes"' in body and SECRET not in body


def test_seed_demo_without_a_key_registers_no_agent(monkeypatch, tmp_path):
    monkeypatch.delenv("HERMES_API_KEY", raising=False)
    monkeypatch.setenv("DEMO_PASSWORD", "pw-demo-12345")
    from chat.management.commands import seed_demo

    monkeypatch.setattr(seed_demo, "import_python_reference", lambda **kw: (0, 0))
    call_command("seed_demo", stdout=open(tmp_path / "out.txt", "w"))
    assert not Provider.objects.filter(kind="agent_runs").exists()


def _badge(html: str) -> str:
    match = re.search(r'<span id="agent-mode"[^>]*>.*?</span></span>', html, re.S)
    assert match, "the thread header has the agent-mode indicator"
    return match.group(0)


def test_thread_page_shows_admin_mode_for_an_agent_provider(client, users, workspaces, monkeypatch):
    monkeypatch.setenv("TEST_HERMES_KEY", SECRET)
    agent = Provider.objects.create(slug="hermes", name="Hermes <ops>", kind="agent_runs",
                                    base_url="http://127.0.0.1:9/v1", api_key_env="TEST_HERMES_KEY")
    offline = Provider.objects.create(slug="offline", name="Offline", kind="offline", default_model="rule-based")
    client.force_login(users["admin"])

    agent_thread = make_thread(users["admin"], workspaces["demo"], agent, model="hermes-agent")
    html = client.get(reverse("chat:thread", args=[agent_thread.pk])).content.decode()
    badge = _badge(html)
    assert "hidden" not in badge.split(">")[0]
    assert "Admin mode — <span id=\"agent-mode-name\">Hermes &lt;ops&gt;</span>" in badge  # escaped
    assert 'data-kind="agent_runs"' in html and SECRET not in html  # the picker can switch the badge

    plain = make_thread(users["admin"], workspaces["demo"], offline)
    assert "hidden" in _badge(client.get(reverse("chat:thread", args=[plain.pk])).content.decode()).split(">")[0]
