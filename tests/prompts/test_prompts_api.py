"""The prompt library through ``/api/v1/prompts/`` and the Prompts page: personal and
workspace scopes, who may edit shared prompts, the doors (another user's or workspace's
prompt → 404), field errors (duplicate command, oversized body), and markup shown escaped."""

from __future__ import annotations

import pytest
from django.test import Client

from prompts.models import Prompt

pytestmark = pytest.mark.django_db

URL = "/api/v1/prompts/"


def session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def create(client: Client, expect: int = 201, **fields) -> dict:
    body = {"command": "summarize", "title": "Summarize", "body": "Summarize {{text}} in a {{tone|friendly}} tone.",
            **fields}
    response = client.post(URL, body, content_type="application/json")
    assert response.status_code == expect, response.content
    return response.json()


def test_personal_prompt_round_trip_with_parsed_variables(users):
    alice = session(users["alice"])
    made = create(alice, command="/Summarize ")
    assert made["command"] == "summarize"  # the slash and case are the composer's, not the name's
    assert made["scope"] == "personal" and made["workspace"] is None and made["author"] == "alice"
    assert made["variables"] == [{"name": "text", "default": None}, {"name": "tone", "default": "friendly"}]
    assert made["can_edit"] is True

    changed = alice.patch(f"{URL}{made['id']}/", {"title": "Short summary", "body": "TL;DR {{ text }}"},
                          content_type="application/json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["title"] == "Short summary"
    assert changed.json()["variables"] == [{"name": "text", "default": None}]
    assert [p["id"] for p in alice.get(URL).json()] == [made["id"]]

    assert alice.delete(f"{URL}{made['id']}/").status_code == 204
    assert not Prompt.objects.exists()


def test_another_users_personal_prompt_and_another_workspaces_prompt_are_404(users):
    alice, bob, dave = session(users["alice"]), session(users["bob"]), session(users["dave"])
    personal = create(alice, command="mine")
    shared = create(alice, command="team", workspace="demo")
    for prompt_id in (personal["id"],):
        for method in ("get", "delete"):
            assert getattr(bob, method)(f"{URL}{prompt_id}/").status_code == 404
        assert bob.patch(f"{URL}{prompt_id}/", {"title": "x"}, content_type="application/json").status_code == 404
    for method in ("get", "delete"):
        assert getattr(dave, method)(f"{URL}{shared['id']}/").status_code == 404
    assert dave.patch(f"{URL}{shared['id']}/", {"title": "x"}, content_type="application/json").status_code == 404
    assert dave.get(URL).json() == []
    assert [p["command"] for p in bob.get(URL).json()] == ["team"]  # a demo member sees the shared one only
    assert bob.get(f"{URL}not-a-uuid/").status_code == 404
    assert Prompt.objects.count() == 2  # nothing was deleted through a closed door
    # another workspace named in a body or a filter: refused without telling whether it exists
    assert dave.get(URL + "?workspace=demo").status_code == 404
    assert "workspace" in create(dave, expect=400, workspace="demo")["error"]["message"]


def test_shared_prompts_are_edited_by_author_and_admins_only(users):
    alice, bob, carol, admin = (session(users[n]) for n in ("alice", "bob", "carol", "admin"))
    shared = create(alice, command="standup", workspace="demo", body="Write my stand-up from {{notes}}")
    url = f"{URL}{shared['id']}/"
    assert bob.get(url).json()["can_edit"] is False and carol.get(url).json()["can_edit"] is False
    refused = bob.patch(url, {"title": "Hijacked"}, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_allowed"
    assert bob.delete(url).status_code == 403
    assert Prompt.objects.get().title == "Summarize"
    # an admin of the workspace edits it, but cannot make someone else's prompt personal
    assert admin.get(url).json()["can_edit"] is True
    assert admin.patch(url, {"title": "Daily stand-up"}, content_type="application/json").status_code == 200
    assert admin.patch(url, {"workspace": None}, content_type="application/json").status_code == 403
    # the author makes it personal again; then only they see it
    assert alice.patch(url, {"workspace": None}, content_type="application/json").json()["scope"] == "personal"
    assert bob.get(url).status_code == 404
    # a viewer keeps personal prompts but cannot share
    assert create(carol, command="mine")["scope"] == "personal"
    denied = create(carol, expect=403, command="ours", workspace="demo")
    assert denied["error"]["code"] == "not_allowed"
    shared_again = create(alice, command="retro", workspace="demo")
    assert admin.delete(f"{URL}{shared_again['id']}/").status_code == 204


def test_duplicate_command_in_the_same_scope_is_a_field_error(users):
    alice, bob = session(users["alice"]), session(users["bob"])
    create(alice, command="summarize")
    error = create(alice, expect=400, command="SUMMARIZE")["error"]
    assert error["code"] == "invalid" and error["message"].startswith("command: ") and "/summarize" in error["message"]
    # other scopes may reuse it: bob's personal one, and the workspace's shared one
    create(bob, command="summarize")
    shared = create(alice, command="summarize", workspace="demo")
    assert create(bob, expect=400, command="summarize", workspace="demo")["error"]["message"].startswith("command: ")
    # renaming into a taken command is refused too, and nothing changes
    other = create(alice, command="translate")
    renamed = alice.patch(f"{URL}{other['id']}/", {"command": "summarize"}, content_type="application/json")
    assert renamed.status_code == 400 and renamed.json()["error"]["message"].startswith("command: ")
    assert Prompt.objects.get(pk=other["id"]).command == "translate"
    # moving a personal prompt into a workspace where the command is taken
    moved = alice.patch(f"{URL}{other['id']}/", {"command": "summarize", "workspace": "demo"},
                        content_type="application/json")
    assert moved.status_code == 400 and Prompt.objects.get(pk=other["id"]).workspace_id is None
    assert Prompt.objects.filter(command="summarize").count() == 3 and shared["scope"] == "workspace"


@pytest.mark.parametrize(("fields", "field"), [
    ({"body": "x" * 8001}, "body"),
    ({"body": "   "}, "body"),
    ({"body": " ".join("{{v" + str(i) + "}}" for i in range(21))}, "body"),
    ({"command": ""}, "command"),
    ({"command": "two words"}, "command"),
    ({"command": "c" * 41}, "command"),
    ({"title": ""}, "title"),
    ({"title": "t" * 121}, "title"),
    ({"title": "Summary \u202efdp.exe"}, "title"),  # a bidirectional override disguises the title
    ({"title": "Sum\x1bmary"}, "title"),
])
def test_bad_fields_are_400_with_the_field_named(users, fields, field):
    error = create(session(users["alice"]), expect=400, **fields)["error"]
    assert error["code"] == "invalid" and error["message"].startswith(f"{field}: ")
    assert not Prompt.objects.exists()


def test_body_at_the_limit_is_accepted(users):
    assert len(create(session(users["alice"]), body="y" * 8000)["body"]) == 8000


def test_list_filters_by_scope_workspace_and_words(users, django_assert_max_num_queries):
    alice = session(users["alice"])
    create(alice, command="summarize", title="Summarize a text")
    create(alice, command="bugreport", title="Bug report", body="Steps: {{steps}}", workspace="demo")
    for n in range(10):
        create(session(users["admin"]), command=f"shared{n}", workspace="demo")
    with django_assert_max_num_queries(6):  # session, user, memberships, the list: not one query per prompt
        listed = alice.get(URL).json()
    assert len(listed) == 12 and [p["can_edit"] for p in listed].count(True) == 2
    Prompt.objects.filter(command__startswith="shared").delete()
    assert [p["command"] for p in alice.get(URL + "?scope=personal").json()] == ["summarize"]
    assert [p["command"] for p in alice.get(URL + "?scope=workspace").json()] == ["bugreport"]
    assert [p["command"] for p in alice.get(URL + "?workspace=demo").json()] == ["bugreport", "summarize"]
    assert [p["command"] for p in alice.get(URL + "?q=steps").json()] == ["bugreport"]
    assert [p["command"] for p in alice.get(URL + "?q=/summ").json()] == ["summarize"]
    assert alice.get(URL + "?scope=everyone").status_code == 400


def test_markup_in_prompts_is_escaped_on_the_page_and_plain_in_the_api(users):
    alice = session(users["alice"])
    body = 'Look <img src=x onerror=alert(1)> at {{<script>}} and {{ lang | <b>de</b> }}'
    made = create(alice, command="xss", title="<script>alert(2)</script>", body=body, workspace="demo")
    assert made["body"] == body  # JSON is data; the composer puts it in a textarea as text
    # {{<script>}} is not a variable; a default may hold markup, which is data like the rest
    assert made["variables"] == [{"name": "lang", "default": "<b>de</b>"}]
    page = session(users["bob"]).get("/prompts/").content.decode()
    assert "<img src=x" not in page and "<script>alert(2)" not in page and "<b>de</b>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "= &lt;b&gt;de&lt;/b&gt;" in page  # the default, as listed under "Asks for"


def test_the_page_creates_edits_and_deletes_with_field_errors_in_place(users):
    alice = session(users["alice"])
    response = alice.post("/prompts/new/", {"command": "Summarize", "title": "Summarize", "body": "Sum {{text}}",
                                            "workspace": ""})
    assert response.status_code == 302
    prompt = Prompt.objects.get()
    assert (prompt.command, prompt.workspace_id) == ("summarize", None)
    full = alice.post("/prompts/new/", {"command": "full", "title": "Full", "body": "abc\r\n" * 2000,
                                        "workspace": ""})  # 8000 characters once a line break is one
    assert full.status_code == 302 and len(Prompt.objects.get(command="full").body) == 8000
    duplicate = alice.post("/prompts/new/", {"command": "summarize", "title": "Again", "body": "x", "workspace": ""})
    assert duplicate.status_code == 200 and "already exists" in duplicate.content.decode()
    assert 'value="Again"' in duplicate.content.decode()  # what was typed is kept
    demo = users["alice"].memberships.get().workspace
    edited = alice.post(f"/prompts/{prompt.pk}/edit/", {"command": "summarize", "title": "Shared sum",
                                                         "body": "Sum {{text}}", "workspace": str(demo.pk)})
    assert edited.status_code == 302
    prompt.refresh_from_db()
    assert prompt.workspace_id == demo.pk and prompt.title == "Shared sum"
    assert session(users["bob"]).get(f"/prompts/{prompt.pk}/edit/").status_code == 403
    assert session(users["dave"]).get(f"/prompts/{prompt.pk}/delete/").status_code == 404
    assert alice.get(f"/prompts/{prompt.pk}/delete/").status_code == 200
    assert alice.post(f"/prompts/{prompt.pk}/delete/").status_code == 302
    assert list(Prompt.objects.values_list("command", flat=True)) == ["full"]


def test_the_admin_lists_and_finds_prompts(users, django_user_model):
    create(session(users["alice"]), command="standup", workspace="demo")
    root = django_user_model.objects.create_superuser("root", password="pw-root")
    page = session(root).get("/admin/prompts/prompt/?q=standup")
    assert page.status_code == 200 and "/standup" in page.content.decode()
