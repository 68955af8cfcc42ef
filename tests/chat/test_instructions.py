"""Custom (personal) and workspace instructions reach the model as labelled context in the
system prompt — never as a user message — and are managed on the settings page / REST."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.services import run_create
from tests.conftest import make_thread
from tests.fakes.openai_server import text_chunks

pytestmark = pytest.mark.django_db(transaction=True)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_instructions_go_to_the_system_prompt_only(users, workspaces, openai_provider, fake_openai, sink_for):
    alice = users["alice"]
    workspaces["demo"].instructions = "Answer in British English. Our product is called Lumen."
    workspaces["demo"].save(update_fields=["instructions"])
    assert api(alice).patch("/api/v1/me/preferences/", {"custom_instructions": "  I am a data engineer; be brief.  "},
                            format="json").json() == {"custom_instructions": "I am a data engineer; be brief.",
                                                      "default_model": "", "language": ""}
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    fake_openai.script(text_chunks("Noted."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=alice, content="What do we sell?")
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.completed"
    messages = fake_openai.requests[-1]["messages"]
    system = messages[0]
    assert system["role"] == "system"
    assert "Workspace instructions from the administrators of \"Demo team\"" in system["content"]
    assert "Our product is called Lumen." in system["content"]
    assert "The user's standing preferences from their settings" in system["content"]
    assert "I am a data engineer; be brief." in system["content"]
    user_texts = [m["content"] for m in messages if m["role"] == "user"]
    assert user_texts == ["What do we sell?"]


def test_other_users_and_workspaces_get_none_of_it(users, workspaces, openai_provider, fake_openai, sink_for):
    api(users["alice"]).patch("/api/v1/me/preferences/", {"custom_instructions": "alice's secret preference"},
                              format="json")
    workspaces["demo"].instructions = "demo-only house rules"
    workspaces["demo"].save(update_fields=["instructions"])
    thread = make_thread(users["dave"], workspaces["other"], openai_provider)
    fake_openai.script(text_chunks("Hi."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["dave"], content="hello")
    sink.until_terminal(created.run.pk)
    system = fake_openai.requests[-1]["messages"][0]["content"]
    assert "alice's secret preference" not in system and "demo-only house rules" not in system
    assert "standing preferences" not in system and "Workspace instructions" not in system
    assert api(users["dave"]).get("/api/v1/me/preferences/").json() == {"custom_instructions": "", "default_model": "",
                                                                        "language": ""}


def test_too_long_instructions_are_refused_and_nothing_is_saved(users, client):
    alice = users["alice"]
    api(alice).patch("/api/v1/me/preferences/", {"custom_instructions": "keep this"}, format="json")
    response = api(alice).patch("/api/v1/me/preferences/", {"custom_instructions": "x" * 4001}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "too_long"
    assert api(alice).get("/api/v1/me/preferences/").json() == {"custom_instructions": "keep this",
                                                                 "default_model": "", "language": ""}
    # The settings page says why and keeps the typed text.
    client.force_login(alice)
    page = client.post("/chat/settings/", {"custom_instructions": "y" * 4001})
    assert page.status_code == 400
    html = page.content.decode()
    assert "limited to 4,000 characters (4,001 given)" in html and "y" * 4001 in html
    ok = client.post("/chat/settings/", {"custom_instructions": "Use metric units."})
    assert ok.status_code == 302 and ok["Location"] == "/chat/settings/?saved=1"
    assert "Use metric units." in client.get("/chat/settings/?saved=1").content.decode()


def test_lone_surrogates_are_refused_not_stored(users):
    response = api(users["alice"]).generic("PATCH", "/api/v1/me/preferences/",
                                           '{"custom_instructions": "bad \\ud800 text"}', content_type="application/json")
    assert response.status_code == 400
    assert "surrogate" in response.json()["error"]["message"]
