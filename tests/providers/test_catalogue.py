"""The model catalogue and provider health: listings cached as LLMModel rows (OpenAI
``/v1/models``, Anthropic ``/v1/models``, Ollama ``/api/tags`` + ``/api/show``), health
statuses, the API (fast list, models endpoint re-probing on a TTL), the admin action, the
management command, the thread header selectors, and keys that never show."""

from __future__ import annotations

import json
import logging
import socket
import threading

import pytest
from django.core.management import call_command
from django.test import Client

from agents.catalogue import health_is_stale, models_refresh, provider_health
from agents.models import LLMModel, Provider
from agents.provider_keys import encrypt_key
from tests.conftest import make_thread
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI
from tests.providers.wire_helpers import *  # noqa: F403
from tests.providers.wire_helpers import ANTHROPIC_KEY

pytestmark = pytest.mark.django_db(transaction=True)


# --------------------------------------------------------------------------------------- #
# Listings → rows
# --------------------------------------------------------------------------------------- #
def test_openai_listing_is_cached_without_non_chat_models(db, monkeypatch):
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test")
    with FakeOpenAI(models=("gpt-fake", "fake-model", "text-embedding-3-small", "whisper-1", "tts-1")) as fake:
        provider = Provider.objects.create(slug="oa", name="OA", kind="openai_compatible", base_url=fake.base_url,
                                           api_key_env="TEST_OPENAI_KEY")
        result = models_refresh(provider=provider)
    assert result.ok and sorted(result.listed) == ["fake-model", "gpt-fake"]
    assert sorted(provider.models.values_list("name", flat=True)) == ["fake-model", "gpt-fake"]
    provider.refresh_from_db()
    assert provider.health_status == "ok" and provider.health_checked_at and provider.models_refreshed_at
    assert all(m.listed_at for m in provider.models.all())


def test_anthropic_listing_follows_pages(db, monkeypatch):
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    names = [f"claude-fake-{i:03d}" for i in range(130)]
    with FakeAnthropic(models=names, api_key=ANTHROPIC_KEY) as fake:
        provider = Provider.objects.create(slug="an", name="An", kind="anthropic", base_url=fake.base_url,
                                           api_key_env="TEST_ANTHROPIC_KEY")
        result = models_refresh(provider=provider)
        assert fake.paths.count("/v1/models") == 2  # two pages
    assert result.ok and len(result.listed) == 130
    row = provider.models.get(name="claude-fake-007")
    assert row.label == "Claude Fake 007" and row.supports_tools


def test_ollama_listing_has_sizes_context_and_tool_support(ollama_provider, fake_ollama):
    result = models_refresh(provider=ollama_provider)
    assert result.ok
    rows = {m.name: m for m in ollama_provider.models.all()}
    assert set(rows) == {"llama3.2:3b", "qwen2.5:14b"}  # the embedding-only model cannot chat
    assert (rows["llama3.2:3b"].parameter_size, rows["llama3.2:3b"].context_window) == ("3.2B", 131072)
    assert rows["qwen2.5:14b"].parameter_size == "14.8B" and rows["qwen2.5:14b"].supports_tools
    assert fake_ollama.paths.count("/api/tags") == 1 and fake_ollama.paths.count("/api/show") == 3


def test_refresh_keeps_admin_choices_and_rows_gone_from_the_listing(ollama_provider, fake_ollama):
    LLMModel.objects.create(provider=ollama_provider, name="llama3.2:3b", label="Mine", enabled=False,
                            prompt_tier="full", echo_reasoning=True)
    LLMModel.objects.create(provider=ollama_provider, name="typed-by-hand")
    models_refresh(provider=ollama_provider)
    row = LLMModel.objects.get(provider=ollama_provider, name="llama3.2:3b")
    assert (row.label, row.enabled, row.prompt_tier, row.echo_reasoning) == ("Mine", False, "full", True)
    assert row.parameter_size == "3.2B" and row.listed_at is not None

    del fake_ollama.models["llama3.2:3b"]
    models_refresh(provider=ollama_provider)
    row.refresh_from_db()
    assert row.listed_at is None  # kept (threads may name it), no longer listed
    assert LLMModel.objects.filter(provider=ollama_provider, name="typed-by-hand").exists()


# --------------------------------------------------------------------------------------- #
# Health
# --------------------------------------------------------------------------------------- #
def test_health_statuses(db, monkeypatch, fake_openai):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-wrong")
    rows = {
        "missing-key": Provider.objects.create(slug="a1", name="A1", kind="anthropic", api_key_env="ANTHROPIC_API_KEY"),
        "refused": Provider.objects.create(slug="o1", name="O1", kind="ollama", base_url="http://127.0.0.1:9"),
        "wrong-key": Provider.objects.create(slug="o2", name="O2", kind="openai_compatible",
                                             base_url=fake_openai.base_url, api_key_env="TEST_OPENAI_KEY"),
        "offline": Provider.objects.create(slug="off", name="Off", kind="offline"),
    }
    assert provider_health(rows["missing-key"]) == "not configured: set ANTHROPIC_API_KEY"
    assert provider_health(rows["refused"]) == "ok"  # never probed yet: no network call here
    statuses = {name: models_refresh(provider=row).status for name, row in rows.items()}
    assert statuses["missing-key"] == "not configured: set ANTHROPIC_API_KEY"
    assert statuses["refused"] == "unreachable: connection refused to 127.0.0.1:9"
    assert statuses["wrong-key"].startswith("error: invalid API key (HTTP 401)")
    assert statuses["offline"] == "ok"
    for name, row in rows.items():
        assert provider_health(Provider.objects.get(pk=row.pk)) == statuses[name]


def test_probe_of_a_silent_server_gives_up_quickly(db, settings):
    """A server that accepts the connection and never answers: the probe is bounded by the
    short probe timeout (pages and the API never hang on it)."""
    settings.PROVIDER_PROBE_TIMEOUT_S = 0.5
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        provider = Provider.objects.create(slug="slow", name="Slow", kind="ollama",
                                           base_url=f"http://127.0.0.1:{listener.getsockname()[1]}")
        result = models_refresh(provider=provider)
        assert result.status.startswith("unreachable:") and "timed out" in result.status
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        listener.close()


# --------------------------------------------------------------------------------------- #
# API
# --------------------------------------------------------------------------------------- #
def test_provider_list_is_fast_cached_and_keyless(users, ollama_provider, fake_ollama, anthropic_provider,
                                                  fake_anthropic, api_for):
    response = api_for(users["alice"]).get("/api/v1/providers/")
    assert response.status_code == 200
    assert fake_ollama.requests == [] and fake_anthropic.requests == []  # no network call
    by_slug = {p["slug"]: p for p in response.json()}
    assert set(by_slug["fake-ollama"]) == {"slug", "name", "kind", "default_model", "status", "configured",
                                          "setup_hint", "lists_models", "status_checked_at", "models_refreshed_at"}
    assert not any("key" in field for p in response.json() for field in p)
    assert by_slug["fake-ollama"]["status"] == "ok" and by_slug["fake-ollama"]["status_checked_at"] is None

    fake_ollama.stop()  # the server goes away; an admin refresh notices
    models_refresh(provider=ollama_provider)
    by_slug = {p["slug"]: p for p in api_for(users["admin"]).get("/api/v1/providers/").json()}
    assert by_slug["fake-ollama"]["status"].startswith("unreachable: connection refused to 127.0.0.1:")
    assert by_slug["fake-ollama"]["status_checked_at"] is not None
    # A member sees what happened and what to do, not the address (agents.presentation).
    by_slug = {p["slug"]: p for p in api_for(users["alice"]).get("/api/v1/providers/").json()}
    assert by_slug["fake-ollama"]["status"] == "unreachable: the provider could not be reached; ask an administrator"


def test_not_configured_provider_says_what_to_set(users, db, monkeypatch, api_for):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    Provider.objects.create(slug="anthropic", name="Anthropic", kind="anthropic", api_key_env="ANTHROPIC_API_KEY")
    [row] = [p for p in api_for(users["alice"]).get("/api/v1/providers/").json() if p["slug"] == "anthropic"]
    assert row["status"] == "not configured: set ANTHROPIC_API_KEY"
    assert row["configured"] is False and row["setup_hint"] == "set ANTHROPIC_API_KEY"
    body = api_for(users["alice"]).get("/api/v1/providers/anthropic/models/").json()
    assert body["provider"]["status"] == "not configured: set ANTHROPIC_API_KEY" and body["models"] == []


def test_models_endpoint_reprobes_once_per_ttl(users, ollama_provider, fake_ollama, settings, api_for):
    settings.PROVIDER_HEALTH_TTL_S = 300
    client = api_for(users["alice"])
    body = client.get("/api/v1/providers/fake-ollama/models/").json()
    assert body["provider"]["status"] == "ok" and body["provider"]["lists_models"] is True
    models = {m["name"]: m for m in body["models"]}
    assert set(models) == {"llama3.2:3b", "qwen2.5:14b"}  # the embedding model cannot chat
    assert models["llama3.2:3b"]["parameter_size"] == "3.2B" and models["llama3.2:3b"]["listed"] is True
    assert models["llama3.2:3b"]["auto_tier"] == "small" and models["qwen2.5:14b"]["auto_tier"] == "full"
    assert (fake_ollama.paths.count("/api/tags"), fake_ollama.paths.count("/api/show")) == (1, 3)

    client.get("/api/v1/providers/fake-ollama/models/")
    assert fake_ollama.paths.count("/api/tags") == 1  # fresh: answered from the cache

    settings.PROVIDER_HEALTH_TTL_S = 0  # stale: one short probe, details only for unknown models
    assert health_is_stale(Provider.objects.get(pk=ollama_provider.pk))
    client.get("/api/v1/providers/fake-ollama/models/")
    assert (fake_ollama.paths.count("/api/tags"), fake_ollama.paths.count("/api/show")) == (2, 4)

    fake_ollama.stop()
    body = client.get("/api/v1/providers/fake-ollama/models/").json()
    assert body["provider"]["status"].startswith("unreachable:") and "127.0.0.1" not in body["provider"]["status"]
    assert {m["name"] for m in body["models"]} == {"llama3.2:3b", "qwen2.5:14b"}  # the cached listing stays
    admin = api_for(users["admin"]).get("/api/v1/providers/fake-ollama/models/").json()
    assert admin["provider"]["status"].startswith("unreachable: connection refused")  # the detail, for admins


def test_models_of_a_provider_without_listing_are_typed(users, offline, api_for):
    LLMModel.objects.create(provider=offline, name="rule-based")
    body = api_for(users["alice"]).get("/api/v1/providers/offline/models/").json()
    assert body["provider"]["lists_models"] is False and body["provider"]["status"] == "ok"
    assert [m["name"] for m in body["models"]] == ["rule-based"]


# --------------------------------------------------------------------------------------- #
# Admin, command, page
# --------------------------------------------------------------------------------------- #
PLANTED = "sk-ant-catalogue-planted-5d2e8f"


@pytest.fixture
def admin_client(users):
    users["admin"].is_staff = users["admin"].is_superuser = True
    users["admin"].save()
    client = Client()
    client.force_login(users["admin"])
    return client


def test_admin_refresh_action_and_pages_never_show_keys(admin_client, fake_anthropic, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    fake_anthropic.api_key = PLANTED
    monkeypatch.setenv("PLANTED_ANTHROPIC_KEY", PLANTED)
    env_row = Provider.objects.create(slug="anth-env", name="Env", kind="anthropic", base_url=fake_anthropic.base_url,
                                      api_key_env="PLANTED_ANTHROPIC_KEY")
    stored = Provider.objects.create(slug="anth-stored", name="Stored", kind="anthropic",
                                     base_url=fake_anthropic.base_url, api_key_encrypted=encrypt_key(PLANTED))
    response = admin_client.post("/admin/agents/provider/", {
        "action": "refresh_models", "_selected_action": [env_row.pk, stored.pk]}, follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "Env (anth-env): ok, 2 models listed" in text and "Stored (anth-stored): ok, 2 models listed" in text
    assert LLMModel.objects.filter(provider=stored).count() == 2

    pages = [text, admin_client.get(f"/admin/agents/provider/{stored.pk}/change/").content.decode(),
             admin_client.get(f"/admin/agents/provider/{env_row.pk}/change/").content.decode(),
             admin_client.get("/admin/agents/llmmodel/").content.decode()]
    for page in pages:
        assert PLANTED not in page and "catalogue-planted" not in page
    assert PLANTED not in caplog.text
    assert "Refresh models and health" in pages[0]


def test_admin_llmmodel_action_refreshes_their_providers(admin_client, ollama_provider, fake_ollama):
    row = LLMModel.objects.create(provider=ollama_provider, name="typed-by-hand")
    response = admin_client.post("/admin/agents/llmmodel/", {
        "action": "refresh_models", "_selected_action": [row.pk]}, follow=True)
    assert "Fake Ollama (fake-ollama): ok, 2 models listed" in response.content.decode()


def test_management_command(ollama_provider, fake_ollama, db, capsys):
    down = Provider.objects.create(slug="down", name="Down", kind="ollama", base_url="http://127.0.0.1:9")
    call_command("providers_refresh", "fake-ollama")
    assert "fake-ollama: ok (2 models)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        call_command("providers_refresh", "--no-details")
    out = capsys.readouterr().out
    assert exit_info.value.code == 1
    assert "down: unreachable: connection refused to 127.0.0.1:9" in out
    assert provider_health(Provider.objects.get(pk=down.pk)).startswith("unreachable")


def test_thread_header_has_the_model_picker_and_the_tier_in_the_settings_menu(users, workspaces, ollama_provider, db,
                                                                             monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    Provider.objects.create(slug="anthropic", name="Anthropic", kind="anthropic", api_key_env="ANTHROPIC_API_KEY",
                            default_model="claude-x")
    thread = make_thread(users["alice"], workspaces["demo"], ollama_provider, model="llama3.2:3b", prompt_tier="small")
    client = Client()
    client.force_login(users["alice"])
    response = client.get(f"/chat/{thread.pk}/")
    page = response.content.decode()
    assert 'id="model-picker-button"' in page and 'data-model="llama3.2:3b"' in page
    assert '<option value="small" selected>Small</option>' in page  # in the ⚙ menu
    assert 'id="thread-env"' not in page  # no environments defined: no environment control
    choices = response.context["model_choices"]
    # A provider without its key is not offered (a pick could only fail).
    assert [g["slug"] for g in choices["providers"]] == [ollama_provider.slug]
    assert "chat/app/model-picker.js" in page

    # Read-only viewers (a workspace admin) see the settings as text.
    admin = Client()
    admin.force_login(users["admin"])
    readonly = admin.get(f"/chat/{thread.pk}/").content.decode()
    assert 'id="model-picker-button"' not in readonly and "Small tier" in readonly


def test_header_selectors_save_through_thread_patch(users, workspaces, ollama_provider, offline, api_for):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    response = api_for(users["alice"]).patch(f"/api/v1/threads/{thread.pk}/", {
        "provider": "fake-ollama", "model": "qwen2.5:14b", "prompt_tier": "small"}, format="json")
    assert response.status_code == 200
    assert (response.json()["provider"], response.json()["model"], response.json()["prompt_tier"]) == (
        "fake-ollama", "qwen2.5:14b", "small")
    assert json.loads(response.content)  # the shape the header script reads
