"""Knowledge uploads (``POST /api/v1/knowledge/uploads/``): checks in the request, the import
in the executor, per-file reasons, all-or-nothing files, re-uploads, scoping."""

from __future__ import annotations

import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from chat.models import Membership
from knowledge.models import KnowledgeItem, KnowledgeUpload
from knowledge.selectors import knowledge_search
from knowledge.uploads import knowledge_upload_create, knowledge_upload_process
from tests.fakes.documents import encrypt_pdf, make_docx, make_pdf

pytestmark = pytest.mark.db_backends

HTML = b"<html><head><title>Backup policy</title><script>var leak=1</script></head><body><p>Nightly snapshots.</p></body></html>"
URL = "/api/v1/knowledge/uploads/"


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def upload(client, name: str, data: bytes, **fields):
    return client.post(URL, {"file": SimpleUploadedFile(name, data), **fields}, format="multipart")


def wait_done(client, upload_id, timeout: float = 30.0) -> dict:
    """Poll the upload as the page does, until the executor finished it."""
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"{URL}{upload_id}/").json()
        if body["done"] or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_every_format_is_imported_by_the_executor(workspaces, users):
    alice = client_for(users["alice"])
    files = {
        "runbook.md": b"# Incident runbook\n\nPage the **on-call** engineer first.\n",
        "guide.rst": b"Release guide\n=============\n\nTag the release, then publish wheels.\n",
        "notes.txt": b"Plain notes about the quarterly review.\n",
        "policy.html": HTML,
        "handbook.pdf": make_pdf([["Vacation requests go through the portal."], ["Page two: sick leave."]]),
        "onboarding.docx": make_docx(heading="Onboarding", paragraphs=["Laptops ship on day one."],
                                     table=[["Team", "Owner"], ["Ops", "Kim"]]),
    }
    accepted = {}
    for name, data in files.items():
        response = upload(alice, name, data, workspace="demo", tags="handbook, Imported")
        assert response.status_code == 202, response.json()
        body = response.json()
        assert (body["filename"], body["size"], body["workspace"]) == (name, len(data), "demo")
        assert body["status"] in ("queued", "importing", "created")  # the executor may already be at it
        accepted[name] = body["id"]
    done = {name: wait_done(alice, upload_id) for name, upload_id in accepted.items()}
    assert {name: d["status"] for name, d in done.items()} == dict.fromkeys(files, "created"), done
    titles = {name: KnowledgeItem.objects.get(pk=d["item_id"]).title for name, d in done.items()}
    assert titles == {"runbook.md": "Incident runbook", "guide.rst": "Release guide", "notes.txt": "notes",
                      "policy.html": "Backup policy", "handbook.pdf": "handbook", "onboarding.docx": "Onboarding"}
    item = KnowledgeItem.objects.get(pk=done["handbook.pdf"]["item_id"])
    assert "sick leave" in item.content and item.owner == users["alice"] and item.type == "document"
    assert item.tags == ["handbook", "imported"]
    assert [h.title for h in knowledge_search(workspace=workspaces["demo"], query="laptops")] == ["Onboarding"]
    assert "leak" not in KnowledgeItem.objects.get(pk=done["policy.html"]["item_id"]).content
    assert set(KnowledgeUpload.objects.values_list("data", flat=True)) == {b""}  # bytes dropped once imported
    listed = alice.get(URL).json()["results"]
    assert {u["id"] for u in listed} == set(accepted.values())


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "data", "reason"), [
    ("secret.pdf", encrypt_pdf(make_pdf("Salaries 2026"), user_password="hunter2"), "secret.pdf: the PDF is password-protected"),
    ("broken.pdf", b"%PDF-1.4 this is not really a pdf", "broken.pdf: unreadable PDF"),
    ("broken.docx", b"PK\x03\x04 not a zip at all", "broken.docx: unreadable Word document"),
    ("binary.txt", b"\x00\x01\x02\xff\xfe" * 20, "binary.txt: not a text file"),
    ("blank.md", b"   \n\n  ", "blank.md: no text found"),
    ("scan.pdf", make_pdf([[]]), "scan.pdf: no text found"),
])
def test_a_file_that_cannot_be_read_fails_with_its_reason_and_leaves_nothing(workspaces, users, name, data, reason):
    pending = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename=name, data=data)
    assert knowledge_upload_process(upload_id=pending.pk) == "failed"
    pending.refresh_from_db()
    assert pending.status == "failed" and pending.error.startswith(reason), pending.error
    assert pending.item_id is None and bytes(pending.data) == b"" and pending.finished_at is not None
    assert KnowledgeItem.objects.count() == 0


@pytest.mark.django_db
def test_checks_in_the_request_answer_clear_errors_and_store_nothing(workspaces, users, settings):
    settings.KNOWLEDGE_MAX_FILE_BYTES = 1000
    alice = client_for(users["alice"])
    cases = [
        (upload(alice, "tool.exe", b"MZ...", workspace="demo"), 415, "unsupported_type", "tool.exe: unsupported file type .exe"),
        (upload(alice, "big.md", b"x" * 1001, workspace="demo"), 413, "too_large", "big.md: larger than the 1000 bytes limit (1001 bytes)."),
        (upload(alice, "empty.md", b"", workspace="demo"), 422, "empty", "empty.md: the file is empty."),
        (upload(client_for(users["carol"]), "a.md", b"# A", workspace="demo"), 403, "forbidden", "Your role"),
        (upload(alice, "a.md", b"# A", workspace="other"), 404, "not_found", ""),
        (alice.post(URL, {"workspace": "demo"}, format="multipart"), 400, "invalid", "file"),
    ]
    for response, status, code, message in cases:
        body = response.json()
        assert response.status_code == status, body
        assert body["error"]["code"] == code and body["error"]["message"].startswith(message), body
    assert KnowledgeUpload.objects.count() == 0


@pytest.mark.django_db
def test_a_body_over_the_limit_is_refused_before_it_is_read(users, workspaces, settings):
    settings.KNOWLEDGE_MAX_FILE_BYTES = 1000
    response = upload(client_for(users["alice"]), "big.md", b"y" * 200_000, workspace="demo")
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"
    assert KnowledgeUpload.objects.count() == 0


@pytest.mark.django_db
def test_reupload_updates_the_same_item_and_an_unchanged_file_is_unchanged(workspaces, users):
    def put(text: bytes) -> KnowledgeUpload:
        u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="faq.md", data=text)
        knowledge_upload_process(upload_id=u.pk)
        u.refresh_from_db()
        return u

    first = put(b"# FAQ\n\nThe office opens at nine.")
    again = put(b"# FAQ\n\nThe office opens at nine.")
    changed = put(b"# FAQ\n\nThe office opens at ten.")
    assert [first.status, again.status, changed.status] == ["created", "unchanged", "updated"]
    assert first.item_id == again.item_id == changed.item_id
    assert KnowledgeItem.objects.get().content.endswith("opens at ten.")
    # bob's file of the same name is his own item
    bobs = knowledge_upload_create(user=users["bob"], workspace=workspaces["demo"], filename="faq.md", data=b"bob's")
    assert knowledge_upload_process(upload_id=bobs.pk) == "created"
    assert KnowledgeItem.objects.count() == 2


@pytest.mark.django_db
def test_an_import_that_breaks_midway_leaves_no_item(workspaces, users, monkeypatch):
    import knowledge.services

    def broken(item, language=None):
        raise RuntimeError("index unavailable")

    monkeypatch.setattr(knowledge.services, "_rechunk", broken)  # fails after the item row was written
    u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="a.md", data=b"# A\n\ntext")
    assert knowledge_upload_process(upload_id=u.pk) == "failed"
    u.refresh_from_db()
    assert u.error == "a.md: internal error (RuntimeError)"
    assert KnowledgeItem.objects.count() == 0


@pytest.mark.django_db
def test_permission_is_checked_again_when_the_import_runs(workspaces, users, roles):
    u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="a.md", data=b"# A\n\ntext")
    Membership.objects.filter(user=users["alice"], workspace=workspaces["demo"]).update(role=roles["viewer"])
    assert knowledge_upload_process(upload_id=u.pk) == "failed"
    u.refresh_from_db()
    assert "no longer add" in u.error and KnowledgeItem.objects.count() == 0


@pytest.mark.django_db
def test_a_finished_upload_is_not_imported_twice(workspaces, users):
    u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="a.md", data=b"# A\n\ntext")
    assert knowledge_upload_process(upload_id=u.pk) == "created"
    assert knowledge_upload_process(upload_id=u.pk) == "created"  # a redelivered task: nothing happens
    assert KnowledgeItem.objects.count() == 1


@pytest.mark.django_db
def test_the_celery_task_imports_the_upload(workspaces, users):
    from knowledge.tasks import import_upload_task

    u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="a.md", data=b"# Task\n\nvia celery")
    import_upload_task.apply(args=[str(u.pk)])
    u.refresh_from_db()
    assert u.status == "created" and KnowledgeItem.objects.get(pk=u.item_id).title == "Task"


@pytest.mark.django_db
def test_someone_elses_upload_is_a_404(workspaces, users):
    u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="a.md", data=b"# A")
    bob = client_for(users["bob"])
    assert bob.get(f"{URL}{u.pk}/").status_code == 404
    assert bob.get(f"{URL}not-a-uuid/").json()["error"]["code"] == "not_found"
    assert bob.get(URL).json()["results"] == []
    assert client_for(users["alice"]).get(f"{URL}{u.pk}/").json()["filename"] == "a.md"


@pytest.mark.django_db
def test_too_many_unfinished_uploads_are_refused(workspaces, users, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_PENDING = 2
    settings.RUN_EXECUTOR = "none"
    alice = client_for(users["alice"])
    statuses = [upload(alice, f"f{i}.md", b"# x", workspace="demo").status_code for i in range(3)]
    assert statuses == [202, 202, 429]


@pytest.mark.django_db
def test_file_names_are_reduced_to_their_last_component(workspaces, users):
    u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="../../etc/x\u0007.md", data=b"# X")
    assert u.filename == "x.md"
