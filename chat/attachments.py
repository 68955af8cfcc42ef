"""Files attached to a chat message: checked, stored and made ready for the model at upload,
bound to the message when it is sent.

Upload (``attachment_create``, one request per file, before the send): the name, the size,
the count and the content are checked, then the file is made ready in the same request — an
image is inspected from its header (type from the magic bytes, pixel count before any
decoding: ``chatplatform.images``) and gets a thumbnail and, when larger than a model takes,
a smaller model copy; a document (the Knowledge page's formats) is read with the knowledge
app's hardened extraction (``knowledge.importing.extract_bytes``: sizes checked before
decompression, the parser in a resource-limited subprocess). Only then is one row written:
a file that fails any check leaves nothing behind. The send (``agents.services.run_create``)
binds pending attachments to the new user message in its transaction; the model request
reads what was prepared here, so the send path does no parsing or image work.

Limits are settings (docs/configuration.md): ``CHAT_ATTACHMENT_MAX_BYTES`` per file,
``CHAT_ATTACHMENT_MAX_FILES`` per message (also the most a thread may hold unsent),
``CHAT_ATTACHMENT_MAX_PIXELS`` per image, ``CHAT_ATTACHMENT_IMAGE_EDGE_PX`` for the model
copy, ``CHAT_ATTACHMENT_TEXT_MAX_CHARS`` of a document's text given to the model.
"""

from __future__ import annotations

import logging
import unicodedata
from datetime import timedelta
from pathlib import PurePosixPath

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _lazy
from django.utils.translation import ngettext

from chatplatform.errors import ServiceError
from chatplatform.images import ImageRejected, prepare
from chatplatform.locale import file_size
from knowledge.importing import SUFFIXES as DOCUMENT_SUFFIXES
from knowledge.importing import ImportFailed, extract_bytes, text_encoding

from .models import Attachment, AttachmentBlob, Thread

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif"}
#: Types refused by name whatever their content, with the reason (never shown inline either way).
REFUSED_SUFFIXES = {".svg": _lazy("SVG images can carry scripts and are not accepted; use PNG, JPEG, WebP or GIF."),
                    ".svgz": _lazy("SVG images can carry scripts and are not accepted; use PNG, JPEG, WebP or GIF.")}
DOCUMENT_TYPES = {".pdf": "application/pdf", ".docx": "application/vnd.openxmlformats-officedocument."
                  "wordprocessingml.document", ".html": "text/html", ".htm": "text/html",
                  ".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain", ".rst": "text/x-rst"}
PENDING_TTL = timedelta(days=1)  # unsent uploads older than this are removed at the next upload
PENDING_CHATS = 5  # unsent files one person may hold across chats: this many messages' worth


def limits() -> dict:
    """The attachment limits in force: ``{"max_bytes", "max_files", "max_pixels", "image_edge_px",
    "text_max_chars"}`` (the composer shows them too)."""
    return {
        "max_bytes": int(getattr(settings, "CHAT_ATTACHMENT_MAX_BYTES", 20 * 1024 * 1024)),
        "max_files": int(getattr(settings, "CHAT_ATTACHMENT_MAX_FILES", 10)),
        "max_pixels": int(getattr(settings, "CHAT_ATTACHMENT_MAX_PIXELS", 50_000_000)),
        "image_edge_px": int(getattr(settings, "CHAT_ATTACHMENT_IMAGE_EDGE_PX", 2048)),
        "text_max_chars": int(getattr(settings, "CHAT_ATTACHMENT_TEXT_MAX_CHARS", 100_000)),
    }


def accepted_suffixes() -> list[str]:
    return sorted(IMAGE_SUFFIXES | DOCUMENT_SUFFIXES)


def _size(n: int) -> str:
    """A size for people in the active language ("20.0 MB", "20,0 MB")."""
    return file_size(n)


def filename_check(name) -> str:
    """The file name as given, or ``ServiceError`` ``bad_filename`` (400): empty, longer than
    255 characters, a path (``/`` or ``\\``), ``.``/``..``, or control characters. Refused, not
    cleaned: the person sees exactly which name was wrong."""
    if not isinstance(name, str) or not name.strip():
        raise ServiceError("bad_filename", _("The file has no name."), 400)
    if len(name) > 255:
        raise ServiceError("bad_filename", _("The file name is longer than 255 characters."), 400)
    if "/" in name or "\\" in name or name.strip() in (".", ".."):
        raise ServiceError("bad_filename", _("%(name)r: a file name cannot contain a path (/ or \\).") % {"name": name[:100]},
                           400)
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in name):
        raise ServiceError("bad_filename", _("%(name)r: the file name contains control characters.") % {"name": name[:100]},
                           400)
    return name


def upload_check(*, filename: str, size: int) -> str:
    """What a file can be from its name and size, before its bytes are read: ``image`` or
    ``document``. ``ServiceError``: ``bad_filename`` (400), ``unsupported_type`` (415),
    ``too_large`` (413), ``empty`` (422)."""
    filename_check(filename)
    suffix = PurePosixPath(filename).suffix.lower()
    if suffix in REFUSED_SUFFIXES:
        raise ServiceError("unsupported_type", f"{filename}: {REFUSED_SUFFIXES[suffix]}", 415)
    if suffix not in IMAGE_SUFFIXES and suffix not in DOCUMENT_SUFFIXES:
        raise ServiceError("unsupported_type", _("%(file)s: files of type %(suffix)s cannot be attached (use %(accepted)s).")
                           % {"file": filename, "suffix": suffix or _("(none)"), "accepted": ", ".join(accepted_suffixes())},
                           415)
    limit = limits()["max_bytes"]
    if size > limit:
        raise ServiceError("too_large", _("%(file)s: larger than the %(limit)s limit (%(size)s).") % {
            "file": filename, "limit": _size(limit), "size": _size(size)}, 413)
    if size == 0:
        raise ServiceError("empty", _("%(file)s: the file is empty.") % {"file": filename}, 422)
    return Attachment.Kind.IMAGE if suffix in IMAGE_SUFFIXES else Attachment.Kind.DOCUMENT


def _document_magic_check(filename: str, suffix: str, raw: bytes) -> None:
    """Refuse a document whose bytes are not its type (a PDF must start like one, a .docx is a
    zip, text has no NUL bytes unless a byte-order mark says UTF-16/32), before any parser sees it."""
    if suffix == ".pdf" and b"%PDF-" not in raw[:1024]:
        raise ServiceError("content_mismatch", _("%(file)s: the content is not a PDF (no PDF header).") % {"file": filename},
                           415)
    if suffix == ".docx" and not raw.startswith(b"PK\x03\x04"):
        raise ServiceError("content_mismatch", _("%(file)s: the content is not a Word .docx document.") % {"file": filename},
                           415)
    if suffix not in (".pdf", ".docx") and b"\x00" in raw and not text_encoding(raw):
        raise ServiceError("content_mismatch", _("%(file)s: the content is binary, not %(suffix)s text.") % {
            "file": filename, "suffix": suffix}, 415)


def attachment_create(*, user, thread: Thread, filename: str, data: bytes, keep_in_knowledge: bool = False) -> Attachment:
    """Check, prepare and store one file as a pending attachment of ``thread`` (from
    ``thread_get_for_user(..., write=True)``). Returns the row (bytes loaded).

    Raises ``ServiceError``: those of :func:`upload_check`; ``too_many_files`` (400: the thread
    already holds ``max_files`` unsent attachments; 429: the person holds ``max_files`` ×
    ``PENDING_CHATS`` unsent across chats); ``content_mismatch`` (415: the bytes are
    not the type the name says); ``not_an_image`` / ``unsupported_image`` (415) and
    ``image_too_large`` (413: over ``max_pixels``, a decompression bomb); ``unreadable``
    (422: the document cannot be read — a PDF that does not parse, a password, no text, a
    parse over the knowledge app's limits); ``images_not_supported`` (400: the thread's model
    does not read images); and those of :func:`keep_in_knowledge` when asked. Nothing is
    stored when it raises."""
    from chat.selectors import attachments_pending

    kind = upload_check(filename=filename, size=len(data))
    lim = limits()
    if kind == Attachment.Kind.IMAGE and not thread_takes_images(thread):
        raise ServiceError("images_not_supported", images_refusal(thread), 400)
    _drop_stale_pending(user=user)
    if attachments_pending(user=user, thread_id=thread.pk).count() >= lim["max_files"]:
        raise ServiceError("too_many_files", ngettext(
            "%(file)s: at most %(n)d file can be attached to one message.",
            "%(file)s: at most %(n)d files can be attached to one message.", lim["max_files"]) % {
            "file": filename, "n": lim["max_files"]}, 400)
    unsent = Attachment.objects.filter(owner=user, message__isnull=True).count()
    if unsent >= lim["max_files"] * PENDING_CHATS:
        raise ServiceError("too_many_files", ngettext(
            "%(file)s: you have %(n)d file attached and not sent in your chats; send or remove some first.",
            "%(file)s: you have %(n)d files attached and not sent in your chats; send or remove some first.",
            unsent) % {"file": filename, "n": unsent}, 429, retry_after=60)
    suffix = PurePosixPath(filename).suffix.lower()
    fields: dict = {}
    blob: dict = {"data": data}
    if kind == Attachment.Kind.IMAGE:
        try:
            image = prepare(data, max_pixels=lim["max_pixels"], model_edge_px=lim["image_edge_px"])
        except ImageRejected as exc:
            status = 413 if exc.code == "image_too_large" else 415
            raise ServiceError(exc.code if exc.code != "not_an_image" else "content_mismatch",
                               f"{filename}: {exc.message}", status) from exc
        fields = {"content_type": image.info.media_type, "width": image.info.width, "height": image.info.height,
                  "model_content_type": image.model_media_type}
        blob.update(thumbnail=image.thumbnail, model_data=image.model_data)
    else:
        _document_magic_check(filename, suffix, data)
        try:
            _title, text = extract_bytes(filename, data)
        except ImportFailed as exc:
            raise ServiceError("unreadable", f"{filename}: {exc}", 422) from exc
        fields = {"content_type": DOCUMENT_TYPES.get(suffix, "application/octet-stream"), "text": text}
    with transaction.atomic():
        attachment = Attachment.objects.create(thread=thread, owner=user, kind=kind, filename=filename,
                                               size=len(data), **fields)
        AttachmentBlob.objects.create(attachment=attachment, **blob)
        if keep_in_knowledge and kind == Attachment.Kind.DOCUMENT:
            keep_in_knowledge_base(user=user, attachment=attachment, data=data)
    return attachment


def _drop_stale_pending(*, user) -> None:
    """Remove ``user``'s uploads never sent within ``PENDING_TTL`` (a closed tab's chips)."""
    Attachment.objects.filter(owner=user, message__isnull=True, created_at__lt=timezone.now() - PENDING_TTL).delete()


def keep_in_knowledge_base(*, user, attachment: Attachment, data: bytes | None = None):
    """Also import a document attachment into its thread's workspace knowledge base (the
    Knowledge page's upload pipeline: queued, imported in the background; the same file
    name again updates that item). Returns the ``KnowledgeUpload``. ``ServiceError``:
    ``not_a_document`` (400, an image), and the knowledge upload's refusals (``forbidden``
    403 for a viewer, ``too_many`` 429, …)."""
    from knowledge.services import KnowledgeRejected
    from knowledge.uploads import knowledge_upload_create

    if attachment.kind != Attachment.Kind.DOCUMENT:
        raise ServiceError("not_a_document", _("Only documents can be kept in the knowledge base."), 400)
    if data is None:
        data = attachment_bytes(attachment_id=attachment.pk)
    try:
        return knowledge_upload_create(user=user, workspace=attachment.thread.workspace, filename=attachment.filename,
                                       data=bytes(data))
    except KnowledgeRejected as exc:
        raise ServiceError(exc.code, exc.message, exc.status) from exc


def attachment_bytes(*, attachment_id, field: str = "data") -> bytes:
    """One of an attachment's byte fields (``data``, ``thumbnail``, ``model_data``); ``b""``
    when it has none. The caller checked access (``chat.selectors.attachment_get_for_user``)."""
    value = AttachmentBlob.objects.filter(pk=attachment_id).values_list(field, flat=True).first()
    return bytes(value) if value else b""


def attachment_delete(*, attachment: Attachment) -> None:
    """Remove a pending attachment (a chip taken out of the composer). ``ServiceError``
    ``already_sent`` (409) once it belongs to a message: a sent message keeps its files."""
    if attachment.message_id is not None:
        raise ServiceError("already_sent", _("This file was sent with a message and stays with it."), 409)
    attachment.delete()


def thread_takes_images(thread: Thread) -> bool:
    """Whether the thread's model reads images (``agents.selectors.model_takes_images``)."""
    from agents.selectors import model_takes_images

    return model_takes_images(provider=thread.provider, model=thread.model, memo=thread)


def images_refusal(thread: Thread) -> str:
    name = (thread.model or "").strip() or (thread.provider.default_model if thread.provider else "")
    if name:
        return _("The model %(name)r cannot read images; pick a model marked “vision” to send images, or attach a "
                 "document instead.") % {"name": name}
    return _("This chat's model cannot read images; pick a model marked “vision” to send images, or attach a "
             "document instead.")
