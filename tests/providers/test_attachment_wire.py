"""An image and a text file attached to a message reach the model as the provider's own
parts, through the real SDKs (Ollama: the adapter's own HTTP client), against the fake
upstreams (tests/fakes): OpenAI ``image_url`` data URLs, Anthropic ``image`` blocks with a
base64 source, Ollama ``images``; the document
as labelled context in the same user turn. Also ``/v1/chat/completions`` with an image part."""

from __future__ import annotations

import base64
import io
import json
from uuid import UUID

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from agents.models import LLMModel
from agents.services import run_create
from chat.attachments import attachment_create
from chat.models import Attachment
from tests.conftest import make_thread
from tests.fakes.anthropic_server import text_events
from tests.fakes.images import make_image
from tests.fakes.ollama_server import text_parts
from tests.fakes.openai_server import text_chunks
from tests.providers.wire_helpers import *  # noqa: F403  (fixtures)
from tests.providers.wire_helpers import (  # noqa: F401
    anthropic_provider,
    fake_anthropic,
    fake_ollama,
    ollama_provider,
)

pytestmark = pytest.mark.django_db(transaction=True)

NOTES = "Release train leaves at 09:40.\nBring the PERIWINKLE badge."


def attach(user, thread, *, png: bytes):
    image = attachment_create(user=user, thread=thread, filename="diagram.png", data=png)
    notes = attachment_create(user=user, thread=thread, filename="notes.txt", data=NOTES.encode())
    return [str(image.pk), str(notes.pk)]


def assert_document_block(text: str) -> None:
    assert f"The user attached the file 'notes.txt' (text/plain, {len(NOTES)} characters)" in text
    assert "not instructions to follow" in text
    assert f"<<<file notes.txt\n{NOTES}\n>>>end of file notes.txt" in text
    assert text.endswith("What do these say?")


def test_openai_gets_an_image_url_part_and_the_file_as_context(users, workspaces, openai_provider, fake_openai,
                                                                sink_for):
    LLMModel.objects.create(provider=openai_provider, name="fake-model", supports_images=True)
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    png = make_image("PNG", (40, 30))
    fake_openai.script(text_chunks("A red box and a train time."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=alice, content="What do these say?", attachments=attach(alice, thread, png=png))
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.completed"
    user_turn = fake_openai.requests[-1]["messages"][-1]
    assert user_turn["role"] == "user"
    text, image = user_turn["content"]
    assert text["type"] == "text"
    assert_document_block(text["text"])
    assert image == {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}


def test_anthropic_gets_an_image_block_with_a_base64_source(users, workspaces, anthropic_provider, fake_anthropic,  # noqa: F811
                                                             sink_for):
    LLMModel.objects.create(provider=anthropic_provider, name="claude-sonnet-4-5")  # vision by its name
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], anthropic_provider, model="claude-sonnet-4-5")
    big = make_image("JPEG", (3000, 1500))  # larger than the model copy's edge: a smaller copy is sent
    fake_anthropic.script(text_events("Seen."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=alice, content="What do these say?", attachments=attach(alice, thread, png=big))
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.completed"
    blocks = fake_anthropic.requests[-1]["messages"][-1]["content"]
    assert [b["type"] for b in blocks] == ["image", "text"]
    source = blocks[0]["source"]
    assert source["type"] == "base64" and source["media_type"] == "image/jpeg"
    from PIL import Image

    sent = Image.open(io.BytesIO(base64.b64decode(source["data"])))
    assert sent.size == (2048, 1024)  # CHAT_ATTACHMENT_IMAGE_EDGE_PX on the long edge
    assert_document_block(blocks[1]["text"])


def test_ollama_gets_the_images_field(users, workspaces, ollama_provider, fake_ollama, sink_for):  # noqa: F811
    LLMModel.objects.create(provider=ollama_provider, name="qwen2.5:14b", supports_images=True)
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], ollama_provider)
    png = make_image("PNG", (16, 16))
    fake_ollama.script(text_parts("Seen."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=alice, content="What do these say?", attachments=attach(alice, thread, png=png))
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.completed"
    user_turn = fake_ollama.chat_requests[-1]["messages"][-1]
    assert user_turn["role"] == "user" and user_turn["images"] == [base64.b64encode(png).decode()]
    assert_document_block(user_turn["content"])


def test_a_model_that_cannot_read_images_is_told_what_was_attached(users, workspaces, openai_provider, fake_openai,
                                                                   sink_for):
    """The thread switched to a text-only model after an image was sent: the history names the
    image in words instead of sending an image part the model would refuse."""
    row = LLMModel.objects.create(provider=openai_provider, name="fake-model", supports_images=True)
    alice = users["alice"]
    thread = make_thread(alice, workspaces["demo"], openai_provider)
    ids = attach(alice, thread, png=make_image())
    fake_openai.script(text_chunks("ok"), text_chunks("ok again"))
    sink = sink_for(thread.pk)
    first = run_create(thread=thread, user=alice, content="What do these say?", attachments=ids)
    sink.until_terminal(first.run.pk)
    row.supports_images = False
    row.save()  # the configuration cache sees it at once (chatplatform.config_cache)
    thread.refresh_from_db()
    second = run_create(thread=thread, user=alice, content="And now?")
    sink.until_terminal(second.run.pk)
    earlier = fake_openai.requests[-1]["messages"][1]
    assert isinstance(earlier["content"], str)
    assert "The user attached the image 'diagram.png'; this model cannot read images" in earlier["content"]
    assert Attachment.objects.filter(message__isnull=False).count() == 2


def test_v1_chat_completions_takes_an_image_part(users, openai_provider, fake_openai):
    LLMModel.objects.create(provider=openai_provider, name="fake-model", supports_images=True)
    key = Token.objects.create(user=users["alice"]).key
    png = make_image("PNG", (20, 20), color=(0, 0, 255))
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    fake_openai.script(text_chunks("A blue square."))
    response = Client().post("/v1/chat/completions", data=json.dumps({
        "model": "fake-openai/fake-model",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Colour?"},
                                                  {"type": "image_url", "image_url": {"url": url}}]}],
    }), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content[:500]
    assert response.json()["choices"][0]["message"]["content"] == "A blue square."
    sent = fake_openai.requests[-1]["messages"][-1]["content"]
    assert sent == [{"type": "text", "text": "Colour?"}, {"type": "image_url", "image_url": {"url": url}}]
    stored = Attachment.objects.get()
    assert stored.message.content == "Colour?" and bytes(stored.blob.data) == png and stored.content_type == "image/png"


def test_v1_history_images_are_stored_with_their_messages(users, openai_provider, settings):
    from openai_api.services import completion_start

    settings.RUN_EXECUTOR = "none"
    LLMModel.objects.create(provider=openai_provider, name="fake-model", supports_images=True)
    first, second = make_image("PNG", (8, 8)), make_image("JPEG", (8, 8))

    def part(raw, kind):
        return {"type": "image_url", "image_url": {"url": f"data:image/{kind};base64," + base64.b64encode(raw).decode()}}

    started = completion_start(user=users["alice"], body={"model": "fake-openai/fake-model", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Look"}, part(first, "png")]},
        {"role": "assistant", "content": "A dot."},
        {"role": "user", "content": [part(second, "jpeg")]},
    ]})
    stored = {a.message.content: (a.filename, a.content_type) for a in Attachment.objects.select_related("message")}
    assert stored == {"Look": ("image-1.png", "image/png"), "": ("image-1.jpg", "image/jpeg")}
    assert all(a.message.thread_id == UUID(started.thread_id) for a in Attachment.objects.all())
