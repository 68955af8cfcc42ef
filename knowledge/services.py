"""Writes for the knowledge base. Items are re-chunked whenever their text changes."""

from __future__ import annotations

import hashlib

from django.db import transaction

from .chunking import chunk_text
from .models import KnowledgeChunk, KnowledgeItem


def content_hash(title: str, content: str) -> str:
    return hashlib.sha256(f"{title}\n\x00{content}".encode()).hexdigest()


def _rechunk(item: KnowledgeItem) -> None:
    item.chunks.all().delete()
    pieces = chunk_text(item.content) or [item.title]
    KnowledgeChunk.objects.bulk_create(
        KnowledgeChunk(
            item=item,
            workspace_id=item.workspace_id,
            owner_id_copy=item.owner_id,
            is_private=item.is_private,
            ordinal=n,
            title=item.title,
            content=piece,
        )
        for n, piece in enumerate(pieces)
    )


@transaction.atomic
def knowledge_item_create(
    *,
    workspace,
    owner,
    title: str,
    content: str,
    type: str = "note",
    tags: list[str] | None = None,
    url: str = "",
    source_message=None,
    source_path: str = "",
    is_hidden: bool = False,
    is_private: bool = False,
) -> KnowledgeItem:
    """Create an item and its chunks (indexed for retrieval by the database)."""
    item = KnowledgeItem.objects.create(
        workspace=workspace,
        owner=owner,
        title=title.strip()[:300] or "Untitled",
        content=content,
        type=type or "note",
        tags=[str(t).strip()[:50] for t in (tags or []) if str(t).strip()][:20],
        url=url,
        source_message=source_message,
        source_path=source_path,
        content_hash=content_hash(title, content),
        is_hidden=is_hidden,
        is_private=is_private,
    )
    _rechunk(item)
    return item


@transaction.atomic
def knowledge_item_update(*, item: KnowledgeItem, **changes) -> KnowledgeItem:
    """Apply field changes; re-chunk when title, content or visibility changed."""
    for key, value in changes.items():
        setattr(item, key, value)
    item.content_hash = content_hash(item.title, item.content)
    item.save()
    if {"title", "content", "is_private", "owner"} & set(changes):
        _rechunk(item)
    return item
