"""Writes for the knowledge base. Items are re-chunked whenever their text or visibility
changes; every committed change is announced as ``knowledge.changed`` to the workspace's
live feed (``knowledge/events.py``).

Services that act for a person (``knowledge_item_save_from_message``,
``knowledge_item_create_for_user``, ``knowledge_item_update_for_user``,
``knowledge_item_delete_for_user``) check the write policy of ``knowledge/selectors.py`` and
raise :class:`KnowledgeRejected`; the plain ones (``knowledge_item_create``, ``…_update``)
are for trusted callers that checked already (imports, admin, tools).
"""

from __future__ import annotations

import hashlib
import re

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.utils.formats import number_format
from django.utils.translation import gettext as _

from chat.models import Message, Workspace
from chatplatform.errors import ServiceError

from .chunking import chunk_text
from .embedding_jobs import embedding_enqueue_on_commit
from .events import knowledge_changed_publish
from .models import SEARCH_LANGUAGES, KnowledgeChunk, KnowledgeItem, KnowledgeSettings
from .selectors import knowledge_can_create, knowledge_item_can_edit, knowledge_search_language

MAX_CONTENT_CHARS = 1_000_000
MAX_TAGS = 20
MAX_TAG_CHARS = 50
TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
EDITABLE_FIELDS = frozenset({"title", "content", "type", "tags", "url", "is_hidden", "is_private"})
_REINDEX_FIELDS = frozenset({"title", "content", "is_private", "is_hidden", "owner", "workspace"})


class KnowledgeRejected(ServiceError):
    """A knowledge write the server refuses (``chatplatform.errors.ServiceError``)."""


def content_hash(title: str, content: str) -> str:
    """sha256 hex of title + content: the import idempotency key with the source path."""
    return hashlib.sha256(f"{title}\n\x00{content}".encode()).hexdigest()


def normalize_tags(tags) -> list[str]:
    """A list (or a comma-separated string) → ≤ 20 distinct lower-case tags of ≤ 50 chars."""
    if isinstance(tags, str):
        tags = tags.split(",")
    out: dict[str, None] = {}
    for tag in tags or []:
        text = " ".join(str(tag).split()).lower()[:MAX_TAG_CHARS]
        if text:
            out.setdefault(text, None)
    return list(out)[:MAX_TAGS]


def normalize_type(value: str | None) -> str:
    """``"How-To "`` → ``"how-to"``; empty → ``"note"``. Raises KnowledgeRejected (400)
    unless it is 1–40 chars of letters, digits, ``-`` or ``_``."""
    text = (value or "").strip().lower() or KnowledgeItem.Type.NOTE
    if not TYPE_RE.match(text):
        raise KnowledgeRejected("invalid", _("type must be 1–40 letters, digits, '-' or '_'."))
    return text


def _clean_url(url: str | None) -> str:
    url = (url or "").strip()
    if not url:
        return ""
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError as exc:
        raise KnowledgeRejected("invalid", _("url must be an http(s) URL.")) from exc
    return url[:200]


def _clean_text(title: str | None, content: str | None) -> tuple[str, str]:
    title = " ".join((title or "").split())[:300]
    content = content or ""
    if not content.strip():
        raise KnowledgeRejected("invalid", _("content is empty."))
    if len(content) > MAX_CONTENT_CHARS:
        raise KnowledgeRejected("too_large", _("content is longer than %(n)s characters.") % {
            "n": number_format(MAX_CONTENT_CHARS, force_grouping=True)}, 413)
    return title or "Untitled", content


def _rechunk(item: KnowledgeItem, language: str | None = None) -> None:
    item.chunks.all().delete()
    language = language or knowledge_search_language(workspace=item.workspace_id)
    pieces = chunk_text(item.content) or [item.title]
    KnowledgeChunk.objects.bulk_create(
        KnowledgeChunk(
            item=item,
            workspace_id=item.workspace_id,
            owner_id_copy=item.owner_id,
            is_private=item.is_private,
            is_hidden=item.is_hidden,
            ordinal=n,
            title=item.title,
            content=piece,
            language=language,
        )
        for n, piece in enumerate(pieces)
    )
    embedding_enqueue_on_commit(item.workspace_id)  # the new chunks' vectors, in the background


@transaction.atomic
def knowledge_item_create(
    *,
    workspace: Workspace,
    owner,
    title: str,
    content: str,
    type: str = "note",
    tags: list[str] | str | None = None,
    url: str = "",
    source_message: Message | None = None,
    source_path: str = "",
    is_hidden: bool = False,
    is_private: bool = False,
) -> KnowledgeItem:
    """Create an item and its chunks (indexed by the database's triggers).

    Trusted callers only (no permission check). Raises KnowledgeRejected (400/413) for an
    empty or over-long content, a bad type or URL.
    """
    title, content = _clean_text(title, content)
    item = KnowledgeItem.objects.create(
        workspace=workspace,
        owner=owner,
        title=title,
        content=content,
        type=normalize_type(type),
        tags=normalize_tags(tags),
        url=_clean_url(url),
        source_message=source_message,
        source_path=source_path[:500],
        content_hash=content_hash(title, content),
        is_hidden=bool(is_hidden),
        is_private=bool(is_private),
    )
    _rechunk(item)
    knowledge_changed_publish(workspace_id=item.workspace_id, item_ids=[item.pk])
    return item


@transaction.atomic
def knowledge_item_update(*, item: KnowledgeItem, **changes) -> KnowledgeItem:
    """Apply field changes (any of title, content, type, tags, url, is_hidden, is_private,
    owner); re-chunk when the text, the owner or the visibility changed (chunks carry copies
    of them for filtering inside the index query). Trusted callers."""
    if "title" in changes or "content" in changes:
        changes["title"], changes["content"] = _clean_text(
            changes.get("title", item.title), changes.get("content", item.content)
        )
    if "type" in changes:
        changes["type"] = normalize_type(changes["type"])
    if "tags" in changes:
        changes["tags"] = normalize_tags(changes["tags"])
    if "url" in changes:
        changes["url"] = _clean_url(changes["url"])
    for key, value in changes.items():
        setattr(item, key, value)
    item.content_hash = content_hash(item.title, item.content)
    item.save()
    if _REINDEX_FIELDS & set(changes):
        _rechunk(item)
    knowledge_changed_publish(workspace_id=item.workspace_id, item_ids=[item.pk])
    return item


# --- acting for a person ------------------------------------------------------------------
def _require_create(user, workspace) -> None:
    if not knowledge_can_create(user=user, workspace=workspace):
        raise KnowledgeRejected("forbidden", _("Your role in this workspace can read the knowledge base but not change it."),
                                403)


def knowledge_item_create_for_user(*, user, workspace: Workspace, **fields) -> KnowledgeItem:
    """``knowledge_item_create`` owned by ``user`` after the write policy: viewers → 403.
    ``workspace`` must come from ``workspace_get_for_user``."""
    _require_create(user, workspace)
    unknown = set(fields) - EDITABLE_FIELDS
    if unknown:
        raise KnowledgeRejected("invalid", _("unknown fields: %(fields)s") % {"fields": ", ".join(sorted(unknown))})
    return knowledge_item_create(workspace=workspace, owner=user, **fields)


def knowledge_item_update_for_user(*, user, item: KnowledgeItem, **changes) -> KnowledgeItem:
    """Edit ``item`` (from ``knowledge_item_get_for_user``): its owner (member or above) or a
    workspace admin; others → 403. Only the owner may make an item private or public
    (an admin turning someone's item private would hide it from themselves)."""
    if not knowledge_item_can_edit(user=user, item=item):
        raise KnowledgeRejected("forbidden", _("Only the item's owner or a workspace admin can change it."), 403)
    unknown = set(changes) - EDITABLE_FIELDS
    if unknown:
        raise KnowledgeRejected("invalid", _("unknown fields: %(fields)s") % {"fields": ", ".join(sorted(unknown))})
    if "is_private" in changes and bool(changes["is_private"]) != item.is_private and item.owner_id != user.pk:
        raise KnowledgeRejected("forbidden", _("Only the item's owner can change whether it is private."), 403)
    return knowledge_item_update(item=item, **changes)


@transaction.atomic
def knowledge_item_delete_for_user(*, user, item: KnowledgeItem) -> None:
    """Delete ``item`` (and its chunks): same rule as editing."""
    if not knowledge_item_can_edit(user=user, item=item):
        raise KnowledgeRejected("forbidden", _("Only the item's owner or a workspace admin can delete it."), 403)
    workspace_id, item_id = item.workspace_id, item.pk
    item.delete()
    knowledge_changed_publish(workspace_id=workspace_id, item_ids=[item_id])


def title_for_message(content: str) -> str:
    """A title for a saved message: its first non-empty line, Markdown marks dropped, ≤ 80
    chars (cut at a word)."""
    for line in content.splitlines():
        text = " ".join(re.sub(r"^[#>*\-\s]+|[*_`]+", "", line).split())
        if text:
            if len(text) <= 80:
                return text
            cut = text.rfind(" ", 0, 79)
            return text[: cut if cut > 30 else 79].rstrip() + "…"
    return "Saved message"


def knowledge_item_save_from_message(
    *,
    user,
    message: Message,
    type: str = "note",
    title: str = "",
    tags: list[str] | str | None = None,
    is_private: bool = False,
) -> KnowledgeItem:
    """Save ``message`` (from ``message_get_for_user``) as an item of its thread's workspace,
    owned by ``user`` and linked to it (``source_message``). Works whatever provider the
    thread uses: only the stored text is read. Title: ``title`` or the message's first line.
    Raises KnowledgeRejected: ``forbidden`` (403, viewer), ``invalid`` (400: empty message,
    bad type), ``too_large`` (413)."""
    workspace = message.thread.workspace
    _require_create(user, workspace)
    if message.role not in (Message.Role.USER, Message.Role.ASSISTANT) or not message.content.strip():
        raise KnowledgeRejected("invalid", _("Only a user or assistant message with text can be saved."))
    return knowledge_item_create(
        workspace=workspace,
        owner=user,
        title=title.strip() or title_for_message(message.content),
        content=message.content,
        type=type,
        tags=tags,
        source_message=message,
        is_private=is_private,
    )


@transaction.atomic
def knowledge_search_language_set(*, workspace: Workspace, language: str) -> int:
    """Set the workspace's search language and re-index its chunks (PostgreSQL re-stems the
    content through the chunk trigger). Returns the number of chunks re-indexed. Raises
    KnowledgeRejected (400) for a language PostgreSQL does not ship."""
    if language not in SEARCH_LANGUAGES:
        raise KnowledgeRejected("invalid", _("unknown search language %(language)r") % {"language": language})
    KnowledgeSettings.objects.update_or_create(workspace=workspace, defaults={"search_language": language})
    return KnowledgeChunk.objects.filter(workspace=workspace).update(language=language)


def knowledge_item_ask_thread(*, user, item: KnowledgeItem):
    """"Ask about this": a new thread of ``user`` in the item's workspace whose UI context
    names the item (``objectType: knowledge_item``; informational for the model, DESIGN §1).
    Provider: the one of the user's latest thread in that workspace if still usable, else
    the default model (``agents.selectors.default_model_for``), else none (the chat page says so).
    ``item`` must come from ``knowledge_item_get_for_user``."""
    from agents.selectors import default_model_for, provider_list_configured
    from agents.ui_context import ui_context_validate
    from chat.models import Thread
    from chat.services import thread_create

    usable = provider_list_configured()
    latest = (
        Thread.objects.filter(owner=user, workspace_id=item.workspace_id, provider__isnull=False)
        .order_by("-updated_at").values_list("provider_id", flat=True).first()
    )
    provider = next((p for p in usable if p.pk == latest), None)
    model = ""
    if provider is None:  # no earlier chat there: the default model (agents.selectors.default_model_for)
        provider, model, _ = default_model_for(user=user, workspace_id=item.workspace_id)
    ui_context = ui_context_validate({
        "objectType": "knowledge_item",
        "objectId": str(item.pk),
        "objectName": item.title[:256],
        "route": f"/knowledge/{item.pk}/",
        "contextVersion": 1,
    })
    return thread_create(
        workspace=item.workspace, owner=user, title=f"About: {item.title}"[:200], provider=provider, model=model,
        ui_context=ui_context,
    )
