"""Chat attachments over REST: upload, send, read back, export, access and every refusal
(nothing half-stored). The model request's wire format is in tests/providers/test_attachment_wire.py."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from agents.models import LLMModel, Run
from chat.models import Attachment, Message
from tests.conftest import make_thread
from tests.fakes.documents import make_pdf
from tests.fakes.images import make_image, png_bomb

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def vision(db, openai_provider):
    """The fake provider's default model, declared as reading images."""
    LLMModel.objects.create(provider=openai_provider, name="fake-model", supports_images=True)
    return openai_provider


def upload(client, thread, name, data, **extra):
    if "/" in name:  # the test client would send only the last part of the name: frame it by hand
        boundary = "attach-boundary"
        body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        return client.generic("POST", f"/api/v1/threads/{thread.pk}/attachments/", body,
                              content_type=f"multipart/form-data; boundary={boundary}")
    return client.post(f"/api/v1/threads/{thread.pk}/attachments/",
                       {"file": SimpleUploadedFile(name, data), **extra}, format="multipart")


@pytest.mark.db_backends  # also on PostgreSQL: bytes columns, the send's row locks
def test_upload_send_and_read_back(users, workspaces, vision):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    client = api(alice)
    png = make_image("PNG", (640, 480))
    image = upload(client, thread, "chart.png", png)
    assert image.status_code == 201, image.json()
    body = image.json()
    assert body["kind"] == "image" and body["content_type"] == "image/png" and body["message_id"] is None
    assert (body["width"], body["height"], body["size"]) == (640, 480, len(png))
    notes = upload(client, thread, "notes.txt", b"The launch code word is PERIWINKLE.\n")
    assert notes.status_code == 201 and notes.json()["kind"] == "document"
    assert notes.json()["text_chars"] == len("The launch code word is PERIWINKLE.")
    pending = client.get(f"/api/v1/threads/{thread.pk}/attachments/").json()
    assert [a["filename"] for a in pending] == ["chart.png", "notes.txt"]

    sent = client.post(f"/api/v1/threads/{thread.pk}/runs/",
                       {"content": "What is in these?", "attachments": [body["id"], notes.json()["id"]]}, format="json")
    assert sent.status_code == 202, sent.json()
    question = Message.objects.get(pk=sent.json()["user_message_id"])
    assert sorted(a.filename for a in question.attachments.all()) == ["chart.png", "notes.txt"]
    assert client.get(f"/api/v1/threads/{thread.pk}/attachments/").json() == []  # nothing pending any more

    # Reload: the thread's messages carry them, with a thumbnail for the image.
    messages = client.get(f"/api/v1/threads/{thread.pk}/messages/").json()
    shown = next(m for m in messages if m["role"] == "user")["attachments"]
    assert [(a["filename"], a["kind"]) for a in shown] == [("chart.png", "image"), ("notes.txt", "document")]
    thumb = client.get(shown[0]["thumbnail_url"])
    assert thumb.status_code == 200 and thumb["Content-Type"] == "image/webp"
    from PIL import Image

    assert max(Image.open(io.BytesIO(thumb.content)).size) == 320
    assert shown[1]["thumbnail_url"] is None

    download = client.get(shown[0]["url"])
    assert download.status_code == 200 and download.content == png
    assert download["Content-Disposition"] == 'attachment; filename="chart.png"'
    assert download["X-Content-Type-Options"] == "nosniff"

    markdown = client.get(f"/api/v1/threads/{thread.pk}/export/?as=markdown").content.decode()
    assert f"- [chart.png](/api/v1/attachments/{body['id']}/content/) (image, 640×480" in markdown
    assert "- [notes.txt](" in markdown and "text/plain" in markdown
    exported = client.get(f"/api/v1/threads/{thread.pk}/export/?as=json").json()
    assert [a["filename"] for m in exported["messages"] for a in m["attachments"]] == ["chart.png", "notes.txt"]


def test_a_message_of_only_files_is_sent_and_titled(users, workspaces, vision):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    client = api(alice)
    doc = upload(client, thread, "plan.pdf", make_pdf([["Quarterly plan", "Ship attachments."]])).json()
    sent = client.post(f"/api/v1/threads/{thread.pk}/runs/", {"content": " ", "attachments": [doc["id"]]},
                       format="json")
    assert sent.status_code == 202
    thread.refresh_from_db()
    assert thread.title == "plan.pdf"
    assert Attachment.objects.get(pk=doc["id"]).text.startswith("Quarterly plan")


def test_another_users_attachment_is_a_404_everywhere(users, workspaces, vision):
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    thread = make_thread(alice, workspaces["demo"], vision)
    mine = upload(api(alice), thread, "a.png", make_image()).json()
    for path in ("", "content/", "thumbnail/"):
        assert api(bob).get(f"/api/v1/attachments/{mine['id']}/{path}").status_code == 404
        # pending: not even a workspace admin sees it (it is not part of the chat yet)
        assert api(admin).get(f"/api/v1/attachments/{mine['id']}/{path}").status_code == 404
    assert api(bob).delete(f"/api/v1/attachments/{mine['id']}/").status_code == 404
    assert api(alice).get("/api/v1/attachments/not-a-uuid/").status_code == 404
    # Bob names Alice's attachment in a send of his own: refused, nothing stored.
    bobs = make_thread(bob, workspaces["demo"], vision)
    refused = api(bob).post(f"/api/v1/threads/{bobs.pk}/runs/", {"content": "look", "attachments": [mine["id"]]},
                            format="json")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert not Message.objects.filter(thread=bobs).exists() and not Run.objects.filter(thread=bobs).exists()
    assert Attachment.objects.get(pk=mine["id"]).message_id is None
    # Nor may Bob upload into Alice's thread.
    assert upload(api(bob), thread, "b.png", make_image()).status_code == 404
    # Once sent, the chat's readers see it: the workspace admin too.
    api(alice).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "see", "attachments": [mine["id"]]},
                    format="json")
    assert api(admin).get(f"/api/v1/attachments/{mine['id']}/content/").status_code == 200
    assert api(bob).get(f"/api/v1/attachments/{mine['id']}/content/").status_code == 404
    assert api(alice).delete(f"/api/v1/attachments/{mine['id']}/").status_code == 409  # a sent file stays


@pytest.mark.parametrize(("name", "data", "status", "code"), [
    ("page.png", b"<html><script>alert(1)</script></html>", 415, "content_mismatch"),
    ("logo.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', 415, "unsupported_type"),
    ("bomb.png", png_bomb(), 413, "image_too_large"),
    ("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\ntrailer << >>\n%%EOF", 422,
     "unreadable"),
    ("fake.pdf", b"just some text pretending", 415, "content_mismatch"),
    ("tool.exe", b"MZ\x90\x00", 415, "unsupported_type"),
    ("empty.txt", b"", 422, "empty"),
    ("binary.txt", b"text\x00\x01\x02", 415, "content_mismatch"),
    ("bell\x07.txt", b"hello", 400, "bad_filename"),
    ("../../etc/passwd.txt", b"hello", 400, "bad_filename"),
    ("dir\\name.txt", b"hello", 400, "bad_filename"),
])
def test_bad_files_are_refused_with_a_reason_and_nothing_stored(users, workspaces, vision, name, data, status, code):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    response = upload(api(alice), thread, name, data)
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    assert not Attachment.objects.exists()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig", "utf-32"])
def test_text_saved_with_a_byte_order_mark_is_read_as_text(users, workspaces, vision, encoding):
    # Windows Notepad's "Unicode" is UTF-16 LE with a BOM: NUL bytes between the letters.
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    text = "Grüße: the code word is PERIWINKLE — 北京."
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    created = upload(api(alice), thread, "notes.txt", data)
    assert created.status_code == 201, created.content
    assert created.json()["text_chars"] == len(text)
    assert Attachment.objects.get(pk=created.json()["id"]).text == text


def test_a_byte_order_mark_followed_by_garbage_is_unreadable(users, workspaces, vision):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    response = upload(api(alice), thread, "notes.txt", b"\xff\xfe" + b"\x00\xd8\x41")  # a lone surrogate
    assert response.status_code == 422, response.content
    assert "UTF-16" in response.json()["error"]["message"]
    assert not Attachment.objects.exists()


def test_a_bomb_under_pillows_own_limit_is_refused_by_ours(users, workspaces, vision, settings):
    settings.CHAT_ATTACHMENT_MAX_PIXELS = 4_000_000
    thread = make_thread(users["alice"], workspaces["demo"], vision)
    response = upload(api(users["alice"]), thread, "big.png", png_bomb(3000))
    assert response.status_code == 413
    assert "3,000 × 3,000 pixels (at most 4,000,000 pixels)" in response.json()["error"]["message"]
    assert not Attachment.objects.exists()


def test_size_and_count_limits(users, workspaces, vision, settings):
    settings.CHAT_ATTACHMENT_MAX_BYTES = 1000
    settings.CHAT_ATTACHMENT_MAX_FILES = 2
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    client = api(alice)
    too_big = upload(client, thread, "big.txt", b"x" * 1001)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "too_large"
    ids = [upload(client, thread, f"n{i}.txt", b"note").json()["id"] for i in range(2)]
    third = upload(client, thread, "n3.txt", b"note")
    assert third.status_code == 400 and third.json()["error"]["code"] == "too_many_files"
    assert Attachment.objects.count() == 2
    over = client.post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "x", "attachments": [*ids, ids[0] + "0"]},
                       format="json")
    assert over.status_code == 400 and over.json()["error"]["code"] == "too_many_files"
    assert not Message.objects.filter(thread=thread).exists()
    # Across chats: five messages' worth of unsent files at most.
    for n in range(4):
        other = make_thread(alice, workspaces["demo"], vision)
        for i in range(2):
            assert upload(client, other, f"o{n}{i}.txt", b"note").status_code == 201
    refused = upload(client, make_thread(alice, workspaces["demo"], vision), "one-more.txt", b"note")
    assert refused.status_code == 429 and "10 files attached and not sent" in refused.json()["error"]["message"]


def test_images_for_a_model_without_vision_are_refused_clearly(users, workspaces, openai_provider):
    LLMModel.objects.create(provider=openai_provider, name="fake-model", supports_images=False)
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    response = upload(api(alice), thread, "photo.jpg", make_image("JPEG"))
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "images_not_supported",
        "message": "The model 'fake-model' cannot read images; pick a model marked “vision” to send images, or "
                   "attach a document instead."}
    # Documents are fine for any model.
    assert upload(api(alice), thread, "notes.md", b"# Notes\nhello").status_code == 201
    models = api(alice).get(f"/api/v1/providers/{openai_provider.slug}/models/").json()["models"]
    assert [(m["name"], m["supports_images"]) for m in models] == [("fake-model", False)]


def test_html_documents_are_read_but_never_served_as_html(users, workspaces, vision):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    page = b"<html><head><title>T</title><script>alert(1)</script></head><body><p>Hello reader</p></body></html>"
    created = upload(api(alice), thread, "page.html", page).json()
    assert Attachment.objects.get(pk=created["id"]).text == "Hello reader"
    served = api(alice).get(created["url"])
    assert served["Content-Type"] == "application/octet-stream"
    assert served["Content-Disposition"].startswith("attachment;")
    assert served["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in served["Content-Security-Policy"]


def test_keep_a_document_in_the_knowledge_base(users, workspaces, vision, django_capture_on_commit_callbacks):
    from knowledge.models import KnowledgeUpload

    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    with django_capture_on_commit_callbacks(execute=False):
        created = upload(api(alice), thread, "policy.md", b"# Travel policy\nBook trains.", keep_in_knowledge="true")
    assert created.status_code == 201
    queued = KnowledgeUpload.objects.get()
    assert (queued.filename, queued.workspace_id, queued.owner_id) == ("policy.md", workspaces["demo"].pk, alice.pk)
    with django_capture_on_commit_callbacks(execute=False):
        kept = api(alice).post(f"/api/v1/attachments/{created.json()['id']}/keep/")
    assert kept.status_code == 202 and KnowledgeUpload.objects.count() == 2
    image = upload(api(alice), thread, "a.png", make_image()).json()
    refused = api(alice).post(f"/api/v1/attachments/{image['id']}/keep/")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "not_a_document"


def test_a_pending_attachment_can_be_removed(users, workspaces, vision):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    created = upload(api(alice), thread, "a.txt", b"hi").json()
    assert api(alice).delete(f"/api/v1/attachments/{created['id']}/").status_code == 204
    assert not Attachment.objects.exists()


@pytest.mark.db_backends
def test_an_edited_question_and_a_duplicated_chat_keep_the_files(users, workspaces, vision):
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], vision)
    client = api(alice)
    ids = [upload(client, thread, "a.png", make_image()).json()["id"],
           upload(client, thread, "b.txt", b"notes").json()["id"]]
    sent = client.post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "first", "attachments": ids}, format="json")
    Run.objects.filter(pk=sent.json()["run_id"]).update(status=Run.Status.COMPLETED)
    edited = client.post(f"/api/v1/messages/{sent.json()['user_message_id']}/edit/", {"content": "second"},
                         format="json")
    assert edited.status_code == 202, edited.json()
    versions = {m.content: sorted(a.filename for a in m.attachments.all())
                for m in Message.objects.filter(thread=thread, role="user")}
    assert versions == {"first": ["a.png", "b.txt"], "second": ["a.png", "b.txt"]}
    Run.objects.filter(thread=thread).update(status=Run.Status.COMPLETED)
    copy = client.post(f"/api/v1/threads/{thread.pk}/duplicate/").json()
    shown = [a["filename"] for m in client.get(f"/api/v1/threads/{copy['id']}/messages/").json()
             for a in m["attachments"]]
    assert shown == ["a.png", "b.txt"]
    copied = Attachment.objects.filter(thread_id=copy["id"]).first()
    assert client.get(f"/api/v1/attachments/{copied.pk}/content/").status_code == 200


def test_which_models_read_images():
    from agents.models import Provider
    from llm.capabilities import name_takes_images, takes_images

    assert [n for n in ("gpt-4o-mini", "gpt-4.1", "o3", "o4-mini", "claude-3-5-sonnet-20241022", "claude-sonnet-4-5",
                        "llava:7b", "llama3.2-vision", "qwen2.5vl:7b", "gemma3:4b") if not name_takes_images(n)] == []
    assert [n for n in ("gpt-3.5-turbo", "o1-mini", "o3-mini", "deepseek-chat", "llama3.1:8b", "fake-model")
            if name_takes_images(n)] == []
    for kind in ("openai_compatible", "anthropic", "ollama"):
        provider = Provider(kind=kind)
        assert takes_images(provider, "fake-model", True) and not takes_images(provider, "gpt-4o", False)
        assert takes_images(provider, "gpt-4o") and not takes_images(provider, "fake-model")
    assert not takes_images(Provider(kind="offline"), "gpt-4o", True)  # the adapter sends no images
    assert not takes_images(None, "gpt-4o", True)
