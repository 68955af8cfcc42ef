"""The default model of a new chat (issue 54): the user's own choice, else the workspace's,
else the first configured real provider, else Offline — in the chat UI, the REST API, the
knowledge page's "Ask about this" and ``/v1``'s ``model="default"``."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agents.models import LLMModel, Provider
from agents.selectors import default_model_for, model_choice_parse, model_choices_for
from chat.models import Thread, UserPreferences
from chatplatform.errors import ServiceError

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def keyless(monkeypatch):
    """An Anthropic row first by name whose key is missing (the demo's placeholder)."""
    monkeypatch.delenv("TEST_MISSING_ANTHROPIC_KEY", raising=False)
    return Provider.objects.create(slug="anthropic", name="Anthropic", kind="anthropic", default_model="claude-x",
                                   api_key_env="TEST_MISSING_ANTHROPIC_KEY")


def test_the_first_configured_real_provider_before_offline(users, workspaces, offline, openai_provider, keyless):
    Provider.objects.filter(pk=offline.pk).update(name="A offline")  # first by name: still not the default
    alice, demo = users["alice"], workspaces["demo"]
    assert default_model_for(user=alice, workspace_id=demo.pk) == (openai_provider, "fake-model", "platform")
    # Nothing real is set up: Offline.
    Provider.objects.filter(pk=openai_provider.pk).update(enabled=False)
    assert default_model_for(user=alice, workspace_id=demo.pk) == (offline, "rule-based", "offline")
    Provider.objects.filter(pk=offline.pk).update(enabled=False)
    assert default_model_for(user=alice, workspace_id=demo.pk) == (None, "", "")


def test_user_then_workspace_then_platform_and_only_what_the_role_may_use(users, workspaces, roles, offline,
                                                                          openai_provider):
    alice, demo = users["alice"], workspaces["demo"]
    big = LLMModel.objects.create(provider=openai_provider, name="fake-large")
    demo.default_provider, demo.default_model = offline, ""
    demo.save()
    assert default_model_for(user=alice, workspace_id=demo.pk) == (offline, "rule-based", "workspace")
    UserPreferences.objects.create(user=alice, default_provider=openai_provider, default_model="fake-large")
    assert default_model_for(user=alice, workspace_id=demo.pk) == (openai_provider, "fake-large", "user")
    # The user's model is for admins only now: the workspace's default applies, not a refused model.
    big.allowed_roles.set([roles["admin"]])
    assert default_model_for(user=alice, workspace_id=demo.pk) == (offline, "rule-based", "workspace")
    UserPreferences.objects.create(user=users["admin"], default_provider=openai_provider, default_model="fake-large")
    assert default_model_for(user=users["admin"], workspace_id=demo.pk) == (openai_provider, "fake-large", "user")


def test_model_choices_group_usable_models_by_provider(users, roles, offline, openai_provider, keyless):
    LLMModel.objects.create(provider=openai_provider, name="fake-large", label="Fake Large")
    LLMModel.objects.create(provider=openai_provider, name="retired", enabled=False)
    LLMModel.objects.create(provider=openai_provider, name="admins-only").allowed_roles.set([roles["admin"]])
    groups = {g["provider"].slug: [m.name for m in g["models"]] for g in model_choices_for(user=users["alice"])}
    assert groups == {"fake-openai": ["fake-model", "fake-large"], "offline": ["rule-based"]}  # no keyless provider
    assert model_choice_parse(user=users["alice"], value="fake-openai/fake-large") == (openai_provider, "fake-large")
    assert model_choice_parse(user=users["alice"], value="fake-openai") == (openai_provider, "fake-model")
    assert model_choice_parse(user=users["alice"], value="") == (None, "")
    for refused in ("fake-openai/admins-only", "fake-openai/retired", "anthropic/claude-x", "nope/x"):
        with pytest.raises(ServiceError) as exc:
            model_choice_parse(user=users["alice"], value=refused)
        assert exc.value.code == "model_not_allowed" and exc.value.status == 400


def test_rest_thread_without_provider_gets_the_default(users, offline, openai_provider):
    body = api(users["alice"]).post("/api/v1/threads/", {"workspace": "demo"}, format="json").json()
    assert (body["provider"], body["model"]) == ("fake-openai", "fake-model")
    # Naming no provider on purpose (null) still means none.
    body = api(users["alice"]).post("/api/v1/threads/", {"workspace": "demo", "provider": None}, format="json").json()
    assert body["provider"] is None


def test_preferences_api_sets_and_refuses_the_default_model(users, roles, offline, openai_provider):
    alice = users["alice"]
    LLMModel.objects.create(provider=openai_provider, name="admins-only").allowed_roles.set([roles["admin"]])
    response = api(alice).patch("/api/v1/me/preferences/", {"default_model": "offline/rule-based"}, format="json")
    assert response.status_code == 200 and response.json()["default_model"] == "offline/rule-based"
    thread = api(alice).post("/api/v1/threads/", {"workspace": "demo"}, format="json").json()
    assert (thread["provider"], thread["model"]) == ("offline", "rule-based")
    response = api(alice).patch("/api/v1/me/preferences/", {"default_model": "fake-openai/admins-only",
                                                             "custom_instructions": "lost?"}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "model_not_allowed"
    assert api(alice).get("/api/v1/me/preferences/").json() == {"custom_instructions": "",
                                                                "default_model": "offline/rule-based", "language": ""}
    api(alice).patch("/api/v1/me/preferences/", {"default_model": ""}, format="json")
    assert UserPreferences.objects.get(user=alice).default_provider is None


def test_settings_page_and_new_chat_form(users, offline, openai_provider):
    client = Client()
    client.force_login(users["alice"])
    page = client.get("/chat/settings/").content.decode()
    assert 'value="fake-openai/fake-model"' in page and "now Fake OpenAI · fake-model" in page
    response = client.post("/chat/settings/", {"default_model": "offline/rule-based"})
    assert response.status_code == 302
    bad = client.post("/chat/settings/", {"default_model": "offline/else"})
    assert bad.status_code == 400 and "not a model you may use" in bad.content.decode()
    client.post("/chat/new/", {"workspace": "demo"})
    thread = Thread.objects.get(owner=users["alice"])
    assert (thread.provider, thread.model) == (offline, "rule-based")


def test_workspace_admin_refuses_a_model_the_provider_does_not_offer(offline, openai_provider, workspaces):
    from chat.admin import WorkspaceForm

    base = {"name": "Demo team", "slug": "demo", "instructions": ""}
    form = WorkspaceForm({**base, "default_provider": openai_provider.pk, "default_model": "nope"},
                         instance=workspaces["demo"])
    assert not form.is_valid() and "no enabled model 'nope'" in form.errors["default_model"][0]
    form = WorkspaceForm({**base, "default_provider": openai_provider.pk, "default_model": ""},
                         instance=workspaces["demo"])
    assert form.is_valid(), form.errors
    form.save()
    workspaces["demo"].refresh_from_db()
    assert (workspaces["demo"].default_provider, workspaces["demo"].default_model) == (openai_provider, "")


def test_v1_default_follows_the_chat_default(users, workspaces, offline, openai_provider, settings):
    from openai_api.services import model_resolve

    settings.COMPAT_API_DEFAULT_MODEL = ""
    alice = users["alice"]
    assert model_resolve(name="default", user=alice) == (openai_provider, "fake-model")
    workspaces["demo"].default_provider = offline
    workspaces["demo"].save()
    assert model_resolve(name="default", user=alice) == (offline, "rule-based")
    UserPreferences.objects.create(user=alice, default_provider=openai_provider)
    assert model_resolve(name="default", user=alice) == (openai_provider, "fake-model")
