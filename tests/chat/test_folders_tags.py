"""Folders and tags of one's own chats (REST, and the rail as the page draws it)."""

from __future__ import annotations

import uuid

import pytest

from chat.models import Folder, Membership, Tag, Thread
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db


def titles(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [t["title"] for t in response.json()["results"]]


def error(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


@pytest.fixture
def alice_api(api_for, users):
    return api_for(users["alice"])


def test_a_chat_moved_into_a_folder_leaves_the_main_list_and_returns_when_the_folder_is_deleted(
        users, workspaces, offline, alice_api):
    alice = users["alice"]
    make_thread(alice, workspaces["demo"], offline, title="loose")
    filed = make_thread(alice, workspaces["demo"], offline, title="filed")
    made = alice_api.post("/api/v1/folders/", {"name": "  Project   X "}, format="json")
    assert made.status_code == 201, made.content
    folder = made.json()
    assert (folder["name"], folder["workspace"], folder["collapsed"], folder["thread_count"]) == \
        ("Project X", "demo", False, 0)
    before = Thread.objects.get(pk=filed.pk).updated_at

    moved = alice_api.patch(f"/api/v1/threads/{filed.pk}/", {"folder": folder["id"]}, format="json")
    assert moved.status_code == 200 and moved.json()["folder"] == folder["id"]
    assert Thread.objects.get(pk=filed.pk).updated_at == before  # filing a chat is not activity
    assert titles(alice_api.get(f"/api/v1/threads/?folder={folder['id']}")) == ["filed"]
    assert titles(alice_api.get("/api/v1/threads/?folder=none")) == ["loose"]
    assert set(titles(alice_api.get("/api/v1/threads/"))) == {"loose", "filed"}
    assert [(f["name"], f["thread_count"]) for f in alice_api.get("/api/v1/folders/").json()] == [("Project X", 1)]

    assert alice_api.patch(f"/api/v1/folders/{folder['id']}/", {"name": "Renamed", "collapsed": True},
                           format="json").json() | {"created_at": None} == \
        {**folder, "name": "Renamed", "collapsed": True, "thread_count": 1, "created_at": None}
    copied = alice_api.post(f"/api/v1/threads/{filed.pk}/duplicate/").json()
    assert copied["folder"] == folder["id"]  # a copy of one's own chat stays beside it
    assert alice_api.delete(f"/api/v1/threads/{copied['id']}/").status_code == 204
    assert alice_api.delete(f"/api/v1/folders/{folder['id']}/").status_code == 204
    assert not Folder.objects.exists()
    assert Thread.objects.get(pk=filed.pk).folder_id is None  # the chat is kept, back in the list
    assert set(titles(alice_api.get("/api/v1/threads/?folder=none"))) == {"loose", "filed"}
    assert alice_api.patch(f"/api/v1/threads/{filed.pk}/", {"folder": None}, format="json").json()["folder"] is None


@pytest.mark.db_backends  # the unique keys and column lengths, on PostgreSQL too
def test_folder_names_are_trimmed_limited_and_unique_per_workspace_in_any_case(
        users, workspaces, roles, alice_api):
    Membership.objects.create(user=users["alice"], workspace=workspaces["other"], role=roles["member"])
    assert alice_api.post("/api/v1/folders/", {"name": "Straße"}, format="json").status_code == 201
    for same in ("STRASSE", " straße ", "Ｓｔｒａｓｓｅ"):  # case, spaces, full-width: one name
        assert error(alice_api.post("/api/v1/folders/", {"name": same}, format="json")) == (400, "duplicate_name")
    other = alice_api.post("/api/v1/folders/", {"name": "Straße", "workspace": "other"}, format="json")
    assert other.status_code == 201 and other.json()["workspace"] == "other"
    assert [f["workspace"] for f in alice_api.get("/api/v1/folders/?workspace=other").json()] == ["other"]
    assert len(alice_api.get("/api/v1/folders/").json()) == 2
    for bad in ("   ", "x" * 101, "a\u202eb", "tab\x07", "\ufdfa" * 30):
        response = alice_api.post("/api/v1/folders/", {"name": bad}, format="json")
        assert error(response) == (400, "invalid") and "name" in response.json()["error"]["message"]
    surrogate = alice_api.post("/api/v1/folders/", '{"name": "lone \\ud800"}', content_type="application/json")
    assert error(surrogate) == (400, "invalid")  # a valid JSON escape, not storable text
    assert alice_api.post("/api/v1/folders/", {"name": "x" * 100}, format="json").status_code == 201
    assert error(alice_api.post("/api/v1/folders/", {"name": "n", "workspace": "nowhere"}, format="json")) == \
        (404, "not_found")
    renamed = alice_api.patch(f"/api/v1/folders/{other.json()['id']}/", {"name": "x" * 100}, format="json")
    assert renamed.status_code == 200  # the same name in another workspace is another folder
    first = Folder.objects.get(workspace=workspaces["demo"], name="Straße")
    assert error(alice_api.patch(f"/api/v1/folders/{first.pk}/", {"name": "X" * 100}, format="json")) == \
        (400, "duplicate_name")
    assert error(alice_api.patch(f"/api/v1/folders/{first.pk}/", {"collapsed": "yes"}, format="json")) == \
        (400, "invalid")
    assert Folder.objects.get(pk=first.pk).name == "Straße"


def test_another_users_or_workspaces_folder_answers_like_an_unknown_one(users, workspaces, roles, offline, api_for):
    alice, bob = users["alice"], users["bob"]
    mine = make_thread(alice, workspaces["demo"], offline, title="mine")
    bobs = Folder.objects.create(owner=bob, workspace=workspaces["demo"], name="Bob's", key="bob's")
    client = api_for(alice)
    unknown = uuid.uuid4()
    for folder_id in (bobs.pk, unknown, "not-a-uuid", "12"):
        for method in ("get", "patch", "delete"):
            response = getattr(client, method)(f"/api/v1/folders/{folder_id}/", {"name": "taken"}, format="json")
            assert response.json() == {"error": {"code": "not_found", "message": "No such folder."}}
        assert client.get(f"/api/v1/threads/?folder={folder_id}").json()["error"]["code"] == "not_found"
        refused = client.patch(f"/api/v1/threads/{mine.pk}/", {"folder": str(folder_id), "title": "renamed"},
                               format="json")
        assert refused.json() == {"error": {"code": "invalid", "message": "folder: No such folder."}}
    assert Folder.objects.get(pk=bobs.pk).name == "Bob's" and bobs.threads.count() == 0
    assert Thread.objects.get(pk=mine.pk).title == "mine"  # nothing of a refused PATCH is saved
    assert [f["name"] for f in api_for(bob).get("/api/v1/folders/").json()] == ["Bob's"]
    assert api_for(bob).get("/api/v1/folders/").json()[0]["thread_count"] == 0
    assert client.get("/api/v1/folders/").json() == []

    # Her own folder in another workspace: not for a chat of this one.
    Membership.objects.create(user=alice, workspace=workspaces["other"], role=roles["member"])
    elsewhere = client.post("/api/v1/folders/", {"name": "Elsewhere", "workspace": "other"}, format="json").json()
    assert error(client.patch(f"/api/v1/threads/{mine.pk}/", {"folder": elsewhere["id"]}, format="json")) == \
        (400, "folder_workspace_mismatch")
    # A folder of a workspace she left is gone for her, like its chats.
    Membership.objects.filter(user=alice, workspace=workspaces["other"]).delete()
    assert client.get(f"/api/v1/folders/{elsewhere['id']}/").status_code == 404
    assert client.get("/api/v1/folders/").json() == []
    # Someone else's chat cannot be filed, even in one's own folder.
    own = client.post("/api/v1/folders/", {"name": "Mine"}, format="json").json()
    bobs_chat = make_thread(bob, workspaces["demo"], offline)
    assert client.patch(f"/api/v1/threads/{bobs_chat.pk}/", {"folder": own["id"]}, format="json").status_code == 404


def test_tags_are_trimmed_merged_in_any_case_filterable_and_searchable(users, workspaces, offline, alice_api):
    alice = users["alice"]
    plan = make_thread(alice, workspaces["demo"], offline, title="Release plan")
    notes = make_thread(alice, workspaces["demo"], offline, title="Meeting notes")
    make_thread(alice, workspaces["demo"], offline, title="Untagged plan")
    tagged = alice_api.patch(f"/api/v1/threads/{plan.pk}/", {"tags": ["  #Work ", "work", "Q3   ideas"]},
                             format="json")
    assert tagged.status_code == 200 and tagged.json()["tags"] == ["Q3 ideas", "Work"]
    assert alice_api.patch(f"/api/v1/threads/{notes.pk}/", {"tags": ["WORK"]}, format="json").json()["tags"] == \
        ["Work"]  # the first spelling is kept
    assert Tag.objects.filter(owner=alice).count() == 2
    assert set(titles(alice_api.get("/api/v1/threads/?tag=work"))) == {"Release plan", "Meeting notes"}
    assert set(titles(alice_api.get("/api/v1/threads/?tag=%23WORK"))) == {"Release plan", "Meeting notes"}
    assert titles(alice_api.get("/api/v1/threads/?tag=work&search=plan")) == ["Release plan"]
    assert titles(alice_api.get("/api/v1/threads/?tag=nothing")) == []
    assert alice_api.get("/api/v1/tags/").json() == [{"name": "Q3 ideas", "thread_count": 1},
                                                     {"name": "Work", "thread_count": 2}]
    assert api_for_bob_sees_nothing(users, offline, workspaces)

    for bad, word in ((["x" * 51], "50"), (["a,b"], "comma"), ([f"t{n}" for n in range(21)], "20"),
                      (["ok", "  "], "empty"), ("Work", "list")):
        refused = alice_api.patch(f"/api/v1/threads/{plan.pk}/", {"tags": bad, "pinned": True}, format="json")
        assert error(refused) == (400, "invalid") and word in refused.json()["error"]["message"], refused.json()
    assert Thread.objects.get(pk=plan.pk).pinned is False  # all or nothing

    assert alice_api.patch(f"/api/v1/threads/{plan.pk}/", {"tags": []}, format="json").json()["tags"] == []
    copied = alice_api.post(f"/api/v1/threads/{notes.pk}/duplicate/").json()
    assert copied["tags"] == ["Work"]
    alice_api.delete(f"/api/v1/threads/{copied['id']}/")
    assert alice_api.patch(f"/api/v1/threads/{notes.pk}/", {"tags": []}, format="json").status_code == 200
    assert alice_api.get("/api/v1/tags/").json() == [] and not Tag.objects.exists()  # unused tags go


def api_for_bob_sees_nothing(users, offline, workspaces) -> bool:
    from rest_framework.test import APIClient

    bob = APIClient()
    bob.force_authenticate(users["bob"])
    make_thread(users["bob"], workspaces["demo"], offline, title="Bob's")
    return bob.get("/api/v1/tags/").json() == [] and titles(bob.get("/api/v1/threads/?tag=work")) == []


def test_temporary_chats_are_never_filed_tagged_or_listed(users, workspaces, offline, alice_api):
    alice = users["alice"]
    folder = alice_api.post("/api/v1/folders/", {"name": "F"}, format="json").json()
    temporary = make_thread(alice, workspaces["demo"], offline, title="temp", temporary=True)
    for change in ({"folder": folder["id"]}, {"tags": ["x"]}):
        assert error(alice_api.patch(f"/api/v1/threads/{temporary.pk}/", change, format="json")) == \
            (400, "temporary_chat")
    assert alice_api.patch(f"/api/v1/threads/{temporary.pk}/", {"title": "t2"}, format="json").status_code == 200
    # Even filed and tagged behind the API's back, it is never listed nor counted.
    Thread.objects.filter(pk=temporary.pk).update(folder_id=folder["id"])
    temporary.tags.add(Tag.objects.create(owner=alice, name="x", key="x"))
    assert titles(alice_api.get(f"/api/v1/threads/?folder={folder['id']}")) == []
    assert titles(alice_api.get("/api/v1/threads/?tag=x")) == []
    assert alice_api.get("/api/v1/folders/").json()[0]["thread_count"] == 0
    assert alice_api.get("/api/v1/tags/").json() == []


def test_a_workspace_admin_reading_a_chat_does_not_see_its_owners_folder_or_tags(
        users, workspaces, offline, alice_api, api_for):
    chat = make_thread(users["alice"], workspaces["demo"], offline, title="private organisation")
    folder = alice_api.post("/api/v1/folders/", {"name": "Job hunt"}, format="json").json()
    alice_api.patch(f"/api/v1/threads/{chat.pk}/", {"folder": folder["id"], "tags": ["leaving"]}, format="json")
    assert alice_api.get(f"/api/v1/threads/{chat.pk}/").json()["tags"] == ["leaving"]
    seen = api_for(users["admin"]).get(f"/api/v1/threads/{chat.pk}/").json()
    assert (seen["title"], seen["folder"], seen["tags"]) == ("private organisation", None, [])
    exported = api_for(users["admin"]).get(f"/api/v1/threads/{chat.pk}/export/?as=json").json()["thread"]
    assert (exported["folder"], exported["tags"]) == (None, [])
    own = alice_api.get(f"/api/v1/threads/{chat.pk}/export/?as=json").json()["thread"]
    assert (own["folder"], own["tags"]) == (folder["id"], ["leaving"])


def test_the_rail_draws_folders_with_their_chats_and_escapes_names(users, workspaces, offline, client):
    alice = users["alice"]
    filed = make_thread(alice, workspaces["demo"], offline, title="filed chat")
    make_thread(alice, workspaces["demo"], offline, title="loose chat")
    folder = Folder.objects.create(owner=alice, workspace=workspaces["demo"], name="<b>Bold</b>", key="<b>bold</b>")
    Thread.objects.filter(pk=filed.pk).update(folder=folder)
    filed.tags.add(Tag.objects.create(owner=alice, name="<i>t</i>", key="<i>t</i>"))
    Folder.objects.create(owner=users["bob"], workspace=workspaces["demo"], name="bob-secret", key="bob-secret")
    client.force_login(alice)
    page = client.get("/chat/").content.decode()
    assert "<b>Bold</b>" not in page and "&lt;b&gt;Bold&lt;/b&gt;" in page
    assert "<i>t</i>" not in page and "&lt;i&gt;t&lt;/i&gt;" in page
    assert "bob-secret" not in page
    section = page[page.index(f'data-folder-id="{folder.pk}"'):]
    assert section.index("filed chat") < section.index('id="thread-list-loose"') < section.index("loose chat")


def test_the_schema_documents_folders_tags_and_the_list_filters(users, alice_api):
    schema = alice_api.get("/api/schema/?format=json").json()
    assert {"/api/v1/folders/", "/api/v1/folders/{folder_id}/", "/api/v1/tags/"} <= set(schema["paths"])
    params = {p["name"] for p in schema["paths"]["/api/v1/threads/"]["get"]["parameters"]}
    assert {"folder", "tag"} <= params
    thread = schema["components"]["schemas"]["Thread"]["properties"]
    assert thread["tags"]["type"] == "array" and thread["folder"]["format"] == "uuid"


def test_the_chat_page_offers_its_folder_and_tags_to_its_owner_only(users, workspaces, offline, client):
    alice = users["alice"]
    chat = make_thread(alice, workspaces["demo"], offline, title="organised")
    folder = Folder.objects.create(owner=alice, workspace=workspaces["demo"], name="Reports", key="reports")
    Folder.objects.create(owner=alice, workspace=workspaces["other"], name="Other team's", key="other team's")
    Thread.objects.filter(pk=chat.pk).update(folder=folder)
    chat.tags.add(Tag.objects.create(owner=alice, name="quarterly", key="quarterly"))
    client.force_login(alice)
    page = client.get(f"/chat/{chat.pk}/").content.decode()
    assert f'<option value="{folder.pk}" selected>Reports</option>' in page
    assert "Other team&#x27;s" not in page.split('id="thread-folder"')[1].split("</select>")[0]
    assert 'data-name="quarterly"' in page and 'id="thread-tags" class="thread-tags">' in page
    client.force_login(users["admin"])  # a workspace admin reads the chat, not its owner's organisation
    page = client.get(f"/chat/{chat.pk}/").content.decode()
    assert "quarterly" not in page and 'id="thread-folder"' not in page


@pytest.mark.django_db(transaction=True)  # the foreign key is checked when the PATCH commits
@pytest.mark.db_backends
def test_a_folder_deleted_while_a_chat_is_moved_into_it_is_a_400_and_nothing_is_saved(
        users, workspaces, offline, alice_api, monkeypatch):
    """Two tabs: one deletes a folder while the other moves a chat into it. The move was
    checked against the folder before the delete committed; writing it afterwards pointed the
    chat at a deleted row (500 at commit). Now the move re-reads the folder under a lock."""
    import chat.api.views as views
    from chat.organise import folder_delete, thread_organise_check

    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], offline, title="before")
    folder = Folder.objects.create(owner=alice, workspace=workspaces["demo"], name="Doomed", key="doomed")

    def checked_then_deleted(**kwargs):
        change = thread_organise_check(**kwargs)
        folder_delete(folder=Folder.objects.get(pk=folder.pk))  # the other tab, in between
        return change

    monkeypatch.setattr(views, "thread_organise_check", checked_then_deleted)
    response = alice_api.patch(f"/api/v1/threads/{thread.pk}/", {"folder": str(folder.pk), "title": "after"},
                               format="json")
    assert error(response) == (400, "invalid") and response.json()["error"]["message"] == "folder: No such folder."
    assert Thread.objects.filter(pk=thread.pk).values_list("folder_id", "title").get() == (None, "before")


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_backends
def test_a_tag_removed_from_its_last_chat_while_another_chat_takes_it_stays_and_is_a_200(
        users, workspaces, offline, alice_api, monkeypatch):
    """Tab 1 tags chat A "x" (found: chat B's tag) while tab 2 untags chat B, which deletes "x"
    as unused. Tagging A with the deleted row failed at commit (500); now A keeps an "x"."""
    import chat.organise as organise

    alice = users["alice"]
    chat_a = make_thread(alice, workspaces["demo"], offline, title="A")
    chat_b = make_thread(alice, workspaces["demo"], offline, title="B")
    assert alice_api.patch(f"/api/v1/threads/{chat_b.pk}/", {"tags": ["x"]}, format="json").status_code == 200
    original = organise._tags_named

    def found_then_untagged_elsewhere(**kwargs):
        tags = original(**kwargs)
        if kwargs["names"] == ["x"]:
            monkeypatch.setattr(organise, "_tags_named", original)
            organise.thread_organise(thread=Thread.objects.get(pk=chat_b.pk), user=alice,
                                     change=organise.Organising(tags=[]))  # the other tab
        return tags

    monkeypatch.setattr(organise, "_tags_named", found_then_untagged_elsewhere)
    response = alice_api.patch(f"/api/v1/threads/{chat_a.pk}/", {"tags": ["x"]}, format="json")
    assert response.status_code == 200 and response.json()["tags"] == ["x"]
    assert [t.name for t in Thread.objects.get(pk=chat_a.pk).tags.all()] == ["x"]
    assert list(Thread.objects.get(pk=chat_b.pk).tags.all()) == []
