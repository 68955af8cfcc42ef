"""Admin-blind chats and break-glass (issue 57): the doors an admin might read a member's chat
through, each closed in an admin-blind workspace, and the one audited way in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import Run, ToolCall
from chat.models import BreakGlassRead, BreakGlassRequest, Membership, Message, Thread

SECRET = "zebracorn-payroll-7731"  # a word only in alice's blinded chat
pytestmark = pytest.mark.django_db


@pytest.fixture
def blind(users, workspaces, roles, django_user_model):
    """demo admin-blind, a second admin (``admin2``) in it, an admin of ``other`` (``otheradmin``),
    and alice's chat with a secret message and a tool call."""
    demo = workspaces["demo"]
    demo.admin_blind = True
    demo.save()
    admin2 = django_user_model.objects.create_user(username="admin2", password="pw")
    Membership.objects.create(user=admin2, workspace=demo, role=roles["admin"])
    otheradmin = django_user_model.objects.create_user(username="otheradmin", password="pw")
    Membership.objects.create(user=otheradmin, workspace=workspaces["other"], role=roles["admin"])
    thread = Thread.objects.create(workspace=demo, owner=users["alice"], title=f"About {SECRET}")
    Message.objects.create(thread=thread, position=0, role="user", content=f"Please read {SECRET} for me")
    run = Run.objects.create(thread=thread, user=users["alice"])
    answer = Message.objects.create(thread=thread, position=1, role="assistant", run=run, content="",
                                    tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"q": SECRET}}])
    call = ToolCall.objects.create(run=run, message=answer, call_id="c1", tool_name="lookup", arguments={"q": SECRET},
                                   status="succeeded", summary=f"found {SECRET}", risk="read")
    return {"thread": thread, "admin": users["admin"], "admin2": admin2, "otheradmin": otheradmin,
            "alice": users["alice"], "bob": users["bob"], "call": call}


def api_client(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def request_access(b, reason="Suspected data leak, ticket SEC-12") -> str:
    r = api_client(b["admin"]).post("/api/v1/break-glass/", {"thread": str(b["thread"].pk), "reason": reason},
                                format="json")
    assert r.status_code == 201, r.content
    return r.json()["id"]


def test_an_admin_sees_metadata_and_the_ledger_but_no_content(blind):
    b, admin = blind, api_client(blind["admin"])
    tid = b["thread"].pk
    detail = admin.get(f"/api/v1/threads/{tid}/").json()
    assert detail["blinded"] is True and detail["title"] == "" and SECRET not in str(detail)
    for url in (f"/api/v1/threads/{tid}/messages/", f"/api/v1/threads/{tid}/export/?as=json",
                f"/api/v1/threads/{tid}/export/?as=markdown"):
        r = admin.get(url)
        assert r.status_code == 403 and r.json()["error"]["code"] == "thread_blinded", url
        assert SECRET not in r.content.decode()
    calls = admin.get("/api/v1/tool-calls/").json()["results"]
    [row] = [c for c in calls if c["id"] == str(b["call"].pk)]
    assert (row["tool_name"], row["status"], row["risk"], row["blinded"]) == ("lookup", "succeeded", "read", True)
    assert SECRET not in str(row)
    # The owner keeps everything; opening the title to admins is the owner's choice.
    assert SECRET in api_client(b["alice"]).get(f"/api/v1/threads/{tid}/messages/").content.decode()
    assert api_client(b["alice"]).patch(f"/api/v1/threads/{tid}/", {"title_visible_to_admins": True},
                                    format="json").status_code == 200
    assert admin.get(f"/api/v1/threads/{tid}/").json()["title"] == f"About {SECRET}"


def test_a_workspace_that_is_not_blind_keeps_admin_reads(blind):
    b = blind
    b["thread"].workspace.admin_blind = False
    b["thread"].workspace.save()
    assert SECRET in api_client(b["admin"]).get(f"/api/v1/threads/{b['thread'].pk}/messages/").content.decode()
    r = api_client(b["admin"]).post("/api/v1/break-glass/", {"thread": str(b["thread"].pk), "reason": "x"}, format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_blind"


@pytest.mark.db_backends  # also on PostgreSQL: row locks, the admin's search and annotations
def test_break_glass_end_to_end_is_read_only_audited_and_shown_to_the_owner(blind):
    b = blind
    tid = b["thread"].pk
    rid = request_access(b)
    # Pending: still blind.
    assert api_client(b["admin"]).get(f"/api/v1/threads/{tid}/messages/").status_code == 403
    r = api_client(b["admin2"]).post(f"/api/v1/break-glass/{rid}/approve/", {"note": "ok"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "approved"
    messages = api_client(b["admin"]).get(f"/api/v1/threads/{tid}/messages/")
    assert messages.status_code == 200 and SECRET in messages.content.decode()
    assert api_client(b["admin"]).get(f"/api/v1/threads/{tid}/export/?as=json").status_code == 200  # compliance export
    # Read-only: no writes under the grant.
    assert api_client(b["admin"]).patch(f"/api/v1/threads/{tid}/", {"title": "x"}, format="json").status_code == 404
    assert api_client(b["admin"]).post(f"/api/v1/threads/{tid}/runs/", {"content": "hi"},
                                   format="json").status_code == 404
    # The grant is the requester's alone.
    assert api_client(b["admin2"]).get(f"/api/v1/threads/{tid}/messages/").status_code == 403
    reads = list(BreakGlassRead.objects.filter(request_id=rid).values_list("user__username", "what"))
    assert reads == [("admin", "messages"), ("admin", "export:json")]
    # The owner sees who, why, who approved, and every read.
    audit = api_client(b["alice"]).get(f"/api/v1/threads/{tid}/break-glass/").json()
    assert [(a["requested_by"], a["reason"], a["decided_by"]) for a in audit] == [
        ("admin", "Suspected data leak, ticket SEC-12", "admin2")]
    assert [(x["user"], x["what"]) for x in audit[0]["reads"]] == reads
    # Nobody else reads the owner's audit list.
    assert api_client(b["admin"]).get(f"/api/v1/threads/{tid}/break-glass/").status_code == 404
    # Ending access early closes it at once.
    assert api_client(b["admin"]).post(f"/api/v1/break-glass/{rid}/revoke/").json()["state"] == "revoked"
    assert api_client(b["admin"]).get(f"/api/v1/threads/{tid}/messages/").status_code == 403


def test_break_glass_doors(blind, settings):
    b = blind
    tid = b["thread"].pk
    rid = request_access(b)
    # Approved by the requester: refused.
    r = api_client(b["admin"]).post(f"/api/v1/break-glass/{rid}/approve/", format="json")
    assert r.status_code == 403 and r.json()["error"]["code"] == "own_request"
    # By an admin of another workspace: 404, and it is not in their list.
    assert api_client(b["otheradmin"]).post(f"/api/v1/break-glass/{rid}/approve/").status_code == 404
    assert api_client(b["otheradmin"]).get("/api/v1/break-glass/").json() == []
    # An admin of another workspace cannot ask for it either.
    r = api_client(b["otheradmin"]).post("/api/v1/break-glass/", {"thread": str(tid), "reason": "x"}, format="json")
    assert r.status_code == 404
    # A non-admin member neither requests nor decides nor lists.
    r = api_client(b["bob"]).post("/api/v1/break-glass/", {"thread": str(tid), "reason": "curious"}, format="json")
    assert r.status_code == 404
    assert api_client(b["bob"]).post(f"/api/v1/break-glass/{rid}/approve/").status_code == 404
    assert api_client(b["bob"]).get("/api/v1/break-glass/").json() == []
    # No reason: a field error.
    r = api_client(b["admin2"]).post("/api/v1/break-glass/", {"thread": str(tid), "reason": "  "}, format="json")
    assert r.status_code == 400
    # After the request expired: refused.
    BreakGlassRequest.objects.filter(pk=rid).update(expires_at=timezone.now() - timedelta(seconds=1))
    r = api_client(b["admin2"]).post(f"/api/v1/break-glass/{rid}/approve/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "expired"
    assert api_client(b["admin"]).get(f"/api/v1/threads/{tid}/messages/").status_code == 403


def test_a_grant_opens_one_thread_until_it_ends(blind):
    b = blind
    other = Thread.objects.create(workspace=b["thread"].workspace, owner=b["bob"], title="bob's")
    Message.objects.create(thread=other, position=0, role="user", content=f"bob {SECRET}")
    rid = request_access(b)
    api_client(b["admin2"]).post(f"/api/v1/break-glass/{rid}/approve/")
    # Used for a different thread: refused.
    assert api_client(b["admin"]).get(f"/api/v1/threads/{other.pk}/messages/").status_code == 403
    # After the access time: refused.
    BreakGlassRequest.objects.filter(pk=rid).update(access_until=timezone.now() - timedelta(seconds=1))
    assert api_client(b["admin"]).get(f"/api/v1/threads/{b['thread'].pk}/messages/").status_code == 403
    assert BreakGlassRead.objects.filter(request_id=rid).count() == 0


@pytest.mark.db_backends  # also on PostgreSQL: row locks, the admin's search and annotations
def test_the_django_admin_does_not_leak_a_blinded_chat(blind, client):
    b = blind
    staff = b["admin"]
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    message = Message.objects.get(thread=b["thread"], position=0)
    for url in ("/admin/chat/message/", "/admin/chat/thread/", f"/admin/chat/thread/{b['thread'].pk}/change/",
                f"/admin/chat/message/{message.pk}/change/", "/admin/agents/toolcall/",
                f"/admin/agents/toolcall/{b['call'].pk}/change/", "/admin/agents/run/"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert SECRET not in page.content.decode(), url
    from agents.models import AuditEvent

    event = AuditEvent.objects.create(kind="ui_context_rejected", user=b["alice"], workspace=b["thread"].workspace,
                                      thread_id=b["thread"].pk, detail={"objectName": SECRET})
    # A blinded chat is view-only: its owner cannot be changed to the staff user.
    moved = client.post(f"/admin/chat/thread/{b['thread'].pk}/change/",
                        {"owner": staff.pk, "workspace": b["thread"].workspace_id, "prompt_tier": "auto"})
    assert moved.status_code == 403 and Thread.objects.get(pk=b["thread"].pk).owner_id == b["alice"].pk
    page = client.get(f"/admin/agents/auditevent/{event.pk}/change/")
    assert page.status_code == 200 and SECRET not in page.content.decode()
    for url in (f"/admin/chat/message/?q={SECRET}", f"/admin/chat/thread/?q={SECRET}",
                f"/admin/agents/toolcall/?q={SECRET}"):
        page = client.get(url).content.decode()
        assert "0 results" in page, url  # the term itself is only echoed in the search box
    # Search by a word only in the blinded message finds nothing.
    found = client.get(f"/admin/chat/message/?q={SECRET}").content.decode()
    assert f"/admin/chat/message/{message.pk}/change/" not in found
    assert f"/admin/chat/message/{message.pk}/change/" in client.get("/admin/chat/message/").content.decode()
    # Under an approved grant the change page shows it, and that read is audited.
    rid = request_access(b)
    assert api_client(b["admin2"]).post(f"/api/v1/break-glass/{rid}/approve/").status_code == 200
    page = client.get(f"/admin/chat/message/{message.pk}/change/")
    assert SECRET in page.content.decode()
    assert BreakGlassRead.objects.filter(request_id=rid, what=f"admin:message:{message.pk}").exists()


def test_the_pages_refuse_request_approve_read_and_tell_the_owner(blind, client):
    b = blind
    tid = b["thread"].pk
    client.force_login(b["admin"])
    page = client.get(f"/chat/{tid}/")
    assert page.status_code == 403 and SECRET not in page.content.decode()
    assert 'id="break-glass-form"' in page.content.decode()
    # No reason: the form again with the error, nothing made.
    again = client.post("/chat/break-glass/", {"action": "request", "thread": str(tid), "reason": " "})
    assert again.status_code == 400 and 'id="break-glass-error"' in again.content.decode()
    assert not BreakGlassRequest.objects.exists()
    made = client.post("/chat/break-glass/", {"action": "request", "thread": str(tid), "reason": "Legal hold L-9"})
    assert made.status_code == 302
    rid = BreakGlassRequest.objects.get().pk
    refused = client.post("/chat/break-glass/", {"action": "approve", "id": str(rid)})
    assert refused.status_code == 400 and "second admin" in refused.content.decode()
    client.force_login(b["admin2"])
    listing = client.get("/chat/break-glass/").content.decode()
    assert "Legal hold L-9" in listing and SECRET not in listing
    assert client.post("/chat/break-glass/", {"action": "approve", "id": str(rid)}).status_code == 302
    client.force_login(b["admin"])
    page = client.get(f"/chat/{tid}/").content.decode()
    assert 'id="break-glass-banner"' in page and SECRET in page
    client.force_login(b["alice"])
    page = client.get(f"/chat/{tid}/").content.decode()
    assert 'class="break-glass-notice"' in page and "Legal hold L-9" in page and "admin2" in page
    assert 'id="thread-title-visible"' in page  # the owner's own switch for the title
    assert list(BreakGlassRead.objects.values_list("what", flat=True)) == ["page"]


def test_attachments_are_content(blind):
    from chat.attachments import attachment_create

    b = blind
    attachment = attachment_create(user=b["alice"], thread=b["thread"], filename="notes.txt",
                                   data=f"minutes: {SECRET}".encode())
    message = Message.objects.get(thread=b["thread"], position=0)
    type(attachment).objects.filter(pk=attachment.pk).update(message=message)
    for path in ("", "content/"):
        r = api_client(b["admin"]).get(f"/api/v1/attachments/{attachment.pk}/{path}")
        assert r.status_code == 403 and SECRET not in r.content.decode(errors="replace"), path
    rid = request_access(b)
    api_client(b["admin2"]).post(f"/api/v1/break-glass/{rid}/approve/")
    r = api_client(b["admin"]).get(f"/api/v1/attachments/{attachment.pk}/content/")
    assert r.status_code == 200 and SECRET in b"".join(r.streaming_content if r.streaming else [r.content]).decode()
    assert BreakGlassRead.objects.filter(request_id=rid, what=f"attachment:{attachment.pk}").exists()


@pytest.fixture
def approval_rules(db, settings):
    """The seeded approval rules; no executor (a decision re-queues the run, nothing runs it)."""
    from agents.approvals.defaults import ensure_default_approval_policies
    from agents.models import ApprovalPolicy

    ensure_default_approval_policies(ApprovalPolicy)
    settings.RUN_EXECUTOR = "none"


def test_a_designated_approver_still_sees_what_a_call_will_do(blind, approval_rules):
    """Approvals keep working in an admin-blind workspace: the approver of a production write
    sees its arguments in the inbox; once decided, the ledger only."""
    from tests.runs.test_approval_routing import park

    b = blind
    people = {"alice": b["alice"]}
    ledger = park(people, {"demo": b["thread"].workspace}, requester="alice", risk="write", tier="prod")
    ledger.arguments = {"text": SECRET, "env_id": "prod"}
    ledger.save(update_fields=["arguments"])
    [item] = api_client(b["admin"]).get("/api/v1/approvals/").json()
    assert item["may_decide"] is True and item["arguments"]["text"] == SECRET and item["blinded"] is False
    decided = api_client(b["admin"]).post(f"/api/v1/tool-calls/{ledger.pk}/decision/", {"decision": "approve"},
                                          format="json")
    assert decided.status_code == 200
    calls = api_client(b["admin2"]).get("/api/v1/tool-calls/").json()["results"]
    [row] = [c for c in calls if c["id"] == str(ledger.pk)]
    assert row["blinded"] is True and SECRET not in str(row)
