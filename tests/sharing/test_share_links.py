"""Share links (issue 55): ``/api/v1/threads/{id}/shares/``, ``/api/v1/shares/{id}/`` and the
page ``/s/<token>/`` — a snapshot of the branch shown, its audience checked when it is opened,
revocable, and "Continue this chat" copying only what the page shows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Run
from chat.models import Attachment, Membership, Message, Thread
from chat.services import message_create
from knowledge.models import KnowledgeItem
from sharing.models import ShareLink, WorkspaceSharing
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db

TOOL_ARGS = '{"query": "secret-argument-value"}'
TOOL_RESULT = "RAW-TOOL-RESULT-DATA"


def session(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def chat(users, workspaces, offline):
    """alice's chat in "demo": a question, a tool round, an answer citing a shared and a private
    knowledge item (alice's own); the question's file."""
    alice = users["alice"]
    shared = KnowledgeItem.objects.create(workspace=workspaces["demo"], owner=users["bob"], title="Team handbook",
                                          content="x")
    private = KnowledgeItem.objects.create(workspace=workspaces["demo"], owner=alice, title="Alice private notes",
                                           content="y", is_private=True)
    thread = make_thread(alice, workspaces["demo"], offline, title="Deploy plan")
    q1 = message_create(thread_id=thread.pk, role="user", content="How do we *deploy*?")
    message_create(thread_id=thread.pk, role="assistant", content="Let me look.",
                   tool_calls=[{"id": "c1", "name": "search_knowledge", "arguments": TOOL_ARGS}])
    message_create(thread_id=thread.pk, role="tool", content=TOOL_RESULT, tool_call_id="c1")
    answer = message_create(
        thread_id=thread.pk, role="assistant", content="Use **blue-green** [1] and the script [2].\n\n<script>x</script>",
        citations=[{"n": 1, "item_id": str(shared.pk), "chunk_id": None, "title": shared.title},
                   {"n": 2, "item_id": str(private.pk), "chunk_id": None, "title": private.title},
                   {"n": 3, "item_id": "not-a-uuid", "chunk_id": None, "title": "Malformed"}])
    Attachment.objects.create(thread=thread, owner=alice, message=q1, kind="document", filename="plan.md",
                              content_type="text/markdown", size=10)
    thread.refresh_from_db()
    return {"thread": thread, "answer": answer, "q1": q1}


def create(client, thread, **body):
    return client.post(f"/api/v1/threads/{thread.pk}/shares/", body, content_type="application/json")


def make_share(user, thread, **body) -> dict:
    response = create(session(user), thread, **body)
    assert response.status_code == 201, response.content
    return response.json()


def path_of(share: dict) -> str:
    return share["url"].split("testserver", 1)[1]


def test_a_workspace_link_shows_the_snapshot_to_members_and_nothing_private(users, chat):
    share = make_share(users["alice"], chat["thread"])
    token = ShareLink.objects.get(pk=share["id"]).token
    assert share["visibility"] == "workspace" and share["expires_at"] is None
    assert share["leaf_id"] == str(chat["answer"].pk) and len(token) >= 32 and path_of(share) == f"/s/{token}/"
    # Later messages (and a new version) are not part of the snapshot.
    message_create(thread_id=chat["thread"].pk, role="user", content="A LATER QUESTION")
    message_create(thread_id=chat["thread"].pk, role="assistant", content="A NEWER VERSION", parent_id=chat["q1"].pk)

    page = session(users["bob"]).get(path_of(share))
    html = page.content.decode()
    assert page.status_code == 200
    assert "How do we *deploy*?" in html and "<strong>blue-green</strong>" in html  # the chat's markdown rendering
    assert "<script>x</script>" not in html and "&lt;script&gt;" in html  # escaped, never run
    assert "A LATER QUESTION" not in html and "A NEWER VERSION" not in html
    assert "search_knowledge" in html and "secret-argument-value" not in html and TOOL_RESULT not in html
    assert "Team handbook" in html and "Alice private notes" not in html  # bob may not see alice's private item
    assert "1 cited source is not shown to you." in html
    assert "plan.md" in html and "/api/v1/attachments/" not in html
    assert "Continue this chat" in html
    assert page["X-Robots-Tag"] == "noindex, nofollow" and page["Referrer-Policy"] == "same-origin"
    assert "script-src 'self'" in page["Content-Security-Policy"] and "noindex" in html
    # The owner sees her own private source.
    assert "Alice private notes" in session(users["alice"]).get(path_of(share)).content.decode()


def test_a_workspace_link_is_refused_to_outsiders_and_signed_out_visitors(users, chat):
    share = make_share(users["alice"], chat["thread"])
    other = session(users["dave"]).get(path_of(share))
    assert other.status_code == 404 and b"Deploy plan" not in other.content
    anonymous = session().get(path_of(share))
    assert anonymous.status_code == 404 and b"Deploy plan" not in anonymous.content
    assert b'id="share-sign-in"' in anonymous.content and b"/accounts/login/?next=" in anonymous.content
    assert session(users["bob"]).get("/s/not-a-real-token/").status_code == 404
    # Outsiders learn nothing from a revoked link either: still 404, not 410.
    ShareLink.objects.filter(pk=share["id"]).update(revoked_at=timezone.now())
    assert session(users["dave"]).get(path_of(share)).status_code == 404


def test_revoking_ends_the_link_and_only_the_maker_or_a_workspace_admin_may(users, chat):
    share = make_share(users["alice"], chat["thread"])
    url = f"/api/v1/shares/{share['id']}/"
    for outsider in ("bob", "dave"):
        assert session(users[outsider]).get(url).status_code == 404
        assert session(users[outsider]).delete(url).status_code == 404
    assert session(users["alice"]).get(url).json()["id"] == share["id"]
    assert session(users["admin"]).delete(url).status_code == 204  # a workspace admin revokes
    gone = session(users["bob"]).get(path_of(share))
    assert gone.status_code == 410 and b"revoked" in gone.content and b"Deploy plan" not in gone.content
    assert session(users["alice"]).get(url).status_code == 404
    assert session(users["alice"]).get(f"/api/v1/threads/{chat['thread'].pk}/shares/").json()["shares"] == []
    row = ShareLink.objects.get(pk=share["id"])
    assert row.revoked_by == users["admin"] and row.revoked_at is not None


def test_the_link_is_gone_when_its_owner_may_no_longer_see_the_thread(users, chat):
    share = make_share(users["alice"], chat["thread"])
    Membership.objects.filter(user=users["alice"]).delete()
    assert session(users["bob"]).get(path_of(share)).status_code == 410
    Thread.objects.filter(pk=chat["thread"].pk).delete()
    assert session(users["bob"]).get(path_of(share)).status_code == 404  # the link went with the thread


def test_public_links_need_the_workspace_setting_and_an_expiry(users, workspaces, chat, settings):
    alice, thread = session(users["alice"]), chat["thread"]
    soon = (timezone.now() + timedelta(days=7)).isoformat()
    refused = create(alice, thread, visibility="public", expires_at=soon)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "public_links_disabled"
    WorkspaceSharing.objects.create(workspace=workspaces["demo"], public_links=True)
    no_expiry = create(alice, thread, visibility="public")
    assert no_expiry.status_code == 400 and no_expiry.json()["error"]["code"] == "invalid_expiry"
    too_far = create(alice, thread, visibility="public",
                     expires_at=(timezone.now() + timedelta(days=settings.SHARE_PUBLIC_MAX_DAYS + 1)).isoformat())
    assert too_far.status_code == 400 and too_far.json()["error"]["code"] == "invalid_expiry"
    past = create(alice, thread, visibility="workspace", expires_at=(timezone.now() - timedelta(hours=1)).isoformat())
    assert past.status_code == 400 and past.json()["error"]["code"] == "invalid_expiry"
    bad = create(alice, thread, visibility="everyone")
    assert bad.status_code == 400 and "visibility" in bad.json()["error"]["message"]

    share = make_share(users["alice"], thread, visibility="public", expires_at=soon)
    anonymous = session().get(path_of(share))
    html = anonymous.content.decode()
    assert anonymous.status_code == 200 and "blue-green" in html
    assert "Team handbook" not in html and "Alice private notes" not in html  # signed out: no knowledge
    assert "Sign in to continue this chat" in html
    assert session(users["dave"]).get(path_of(share)).status_code == 200  # anyone with the link
    # Turning public links off ends them at once; an expired link is gone too.
    WorkspaceSharing.objects.filter(workspace=workspaces["demo"]).update(public_links=False)
    assert session().get(path_of(share)).status_code == 410
    WorkspaceSharing.objects.filter(workspace=workspaces["demo"]).update(public_links=True)
    ShareLink.objects.filter(pk=share["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    expired = session().get(path_of(share))
    assert expired.status_code == 410 and b"expired" in expired.content


def test_what_cannot_be_shared_and_who_cannot_share(users, workspaces, offline, chat):
    temporary = make_thread(users["alice"], workspaces["demo"], offline, temporary=True)
    message_create(thread_id=temporary.pk, role="user", content="hi")
    refused = create(session(users["alice"]), temporary)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "temporary_chat"
    empty = make_thread(users["alice"], workspaces["demo"], offline)
    assert create(session(users["alice"]), empty).json()["error"]["code"] == "empty_chat"
    # Another member may not share alice's chat, nor may an admin (who may only read it).
    assert create(session(users["bob"]), chat["thread"]).status_code == 404
    assert create(session(users["admin"]), chat["thread"]).status_code == 404
    listed = session(users["admin"]).get(f"/api/v1/threads/{chat['thread'].pk}/shares/").json()
    assert listed["may_create"] is False and listed["public_links_allowed"] is False
    Run.objects.create(thread=chat["thread"], user=users["alice"], provider=offline, status=Run.Status.RUNNING)
    busy = create(session(users["alice"]), chat["thread"])
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "run_in_progress"
    assert not ShareLink.objects.exists()


def test_continue_copies_only_what_the_page_shows_into_the_viewers_new_chat(users, chat):
    share = make_share(users["alice"], chat["thread"])
    bob = session(users["bob"])
    response = bob.post(path_of(share) + "continue/")
    copy = Thread.objects.get(owner=users["bob"])
    assert response.status_code == 302 and response["Location"] == f"/chat/{copy.pk}/"
    assert copy.workspace == chat["thread"].workspace and copy.title == "Deploy plan"
    rows = list(Message.objects.filter(thread=copy).order_by("position"))
    assert [(m.role, m.content) for m in rows] == [
        ("user", "How do we *deploy*?"),
        ("assistant", "Let me look.\n\nUse **blue-green** [1] and the script [2].\n\n<script>x</script>")]
    assert rows[1].tool_calls == [] and rows[1].parent_id == rows[0].pk and copy.leaf_id == rows[1].pk
    assert [c["title"] for c in rows[1].citations] == ["Team handbook"]  # not alice's private item
    assert bob.get(f"/api/v1/threads/{copy.pk}/messages/").status_code == 200
    assert Message.objects.filter(thread=chat["thread"]).count() == 4  # the original is untouched
    # Signed out: to the sign-in page and back to the link.
    signed_out = session().post(path_of(share) + "continue/")
    assert signed_out.status_code == 302 and "/accounts/login/" in signed_out["Location"]
    assert session(users["dave"]).post(path_of(share) + "continue/").status_code == 404


def test_administrators_see_links_without_their_token_revoke_them_and_allow_public_links(users, workspaces, chat,
                                                                                          django_user_model):
    share = make_share(users["alice"], chat["thread"])
    token = ShareLink.objects.get(pk=share["id"]).token
    staff = session(django_user_model.objects.create_superuser("root", password="pw-root"))
    listing = staff.get("/admin/sharing/sharelink/")
    assert listing.status_code == 200 and b"Deploy plan" in listing.content and token.encode() not in listing.content
    assert token.encode() not in staff.get(f"/admin/sharing/sharelink/{share['id']}/change/").content
    staff.post("/admin/sharing/sharelink/", {"action": "revoke", "_selected_action": [share["id"]]})
    assert ShareLink.objects.get(pk=share["id"]).revoked_by.username == "root"

    added = staff.post("/admin/sharing/workspacesharing/add/", {"workspace": workspaces["demo"].pk, "public_links": "on"})
    assert added.status_code == 302, added.content[:2000]
    soon = (timezone.now() + timedelta(days=1)).isoformat()
    assert make_share(users["alice"], chat["thread"], visibility="public", expires_at=soon)["visibility"] == "public"


def test_a_workspace_admin_turns_public_links_on_and_off_through_the_api(users, workspaces, chat):
    url = f"/api/v1/workspaces/{workspaces['demo'].pk}/sharing/"
    assert session(users["bob"]).get(url).json() == {"public_links": False, "may_change": False}
    refused = session(users["bob"]).patch(url, {"public_links": True}, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_allowed"
    assert session(users["dave"]).get(url).status_code == 404  # another workspace's member
    assert session(users["dave"]).patch(url, {"public_links": True}, content_type="application/json").status_code == 404
    admin = session(users["admin"])
    assert admin.patch(url, {"public_links": "maybe"}, content_type="application/json").status_code == 400
    assert admin.patch(url, {"public_links": True}, content_type="application/json").json() == \
        {"public_links": True, "may_change": True}
    listed = session(users["alice"]).get(f"/api/v1/threads/{chat['thread'].pk}/shares/").json()
    assert listed["public_links_allowed"] is True and listed["may_allow_public"] is False
    share = make_share(users["alice"], chat["thread"], visibility="public",
                       expires_at=(timezone.now() + timedelta(days=2)).isoformat())
    assert session().get(path_of(share)).status_code == 200
    admin.patch(url, {"public_links": False}, content_type="application/json")
    assert session().get(path_of(share)).status_code == 410


def test_continuing_a_public_link_from_another_workspace_copies_it_there_without_sources(users, workspaces, chat):
    WorkspaceSharing.objects.create(workspace=workspaces["demo"], public_links=True)
    share = make_share(users["alice"], chat["thread"], visibility="public",
                       expires_at=(timezone.now() + timedelta(days=1)).isoformat())
    response = session(users["dave"]).post(path_of(share) + "continue/")
    copy = Thread.objects.get(owner=users["dave"])
    assert response.status_code == 302 and copy.workspace == workspaces["other"]
    assert [m.citations for m in Message.objects.filter(thread=copy, role="assistant")] == [[]]


def test_the_schema_lists_the_share_endpoints(users):
    paths = session(users["alice"]).get("/api/schema/?format=json").json()["paths"]
    assert {"/api/v1/threads/{thread_id}/shares/", "/api/v1/shares/{share_id}/",
            "/api/v1/workspaces/{workspace_id}/sharing/"} <= set(paths)
    assert set(paths["/api/v1/shares/{share_id}/"]) >= {"get", "delete"}


def test_continuing_an_assistant_chat_keeps_its_assistant_when_the_viewer_may_use_it(users, workspaces, chat):
    """A chat with a workspace assistant continues under that assistant (its instructions,
    tools and knowledge scope), not as a bare model; a private or disabled one is not handed on."""
    from assistants.models import Assistant

    thread = chat["thread"]
    shared = Assistant.objects.create(workspace=workspaces["demo"], owner=users["alice"], name="Tutor",
                                      provider=thread.provider, model=thread.model, visibility="workspace")
    Thread.objects.filter(pk=thread.pk).update(assistant=shared)
    share = make_share(users["alice"], thread)
    session(users["bob"]).post(path_of(share) + "continue/")
    assert Thread.objects.get(owner=users["bob"]).assistant_id == shared.pk

    Assistant.objects.filter(pk=shared.pk).update(visibility="private")  # alice's own now: not bob's to pick
    session(users["bob"]).post(path_of(share) + "continue/")
    latest = Thread.objects.filter(owner=users["bob"]).latest("created_at")
    assert latest.assistant_id is None and latest.provider_id == thread.provider_id
