"""Knowledge items and their chunks.

Retrieval runs on chunks through the database's full-text index: a weighted ``tsvector``
with a GIN index on PostgreSQL, an FTS5 virtual table on SQLite (see ``knowledge/search.py``
and migration 0002).
"""

import uuid

from django.conf import settings
from django.db import models


class KnowledgeItem(models.Model):
    """A piece of the team's knowledge.

    Visibility: shared within the workspace; ``is_hidden`` items are left out of lists but
    usable by the AI; ``is_private`` items are seen only by their owner and are excluded from
    retrieval unless the thread opts in, and then only the sender's own.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="knowledge_items")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="knowledge_items"
    )
    type = models.CharField(max_length=40, default="note")
    title = models.CharField(max_length=300)
    content = models.TextField()
    tags = models.JSONField(default=list, blank=True)
    url = models.URLField(blank=True)
    source_message = models.ForeignKey(
        "chat.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_path = models.CharField(max_length=500, blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    is_hidden = models.BooleanField(default=False)
    is_private = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["workspace", "source_path"], name="knowledge_source")]

    def __str__(self) -> str:
        return self.title


class KnowledgeChunk(models.Model):
    """A retrievable slice of an item (paragraph-aware, ~1.5 k chars with overlap).

    Visibility fields are copied from the item so retrieval filters inside the index query.
    """

    item = models.ForeignKey(KnowledgeItem, on_delete=models.CASCADE, related_name="chunks")
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="+")
    owner_id_copy = models.IntegerField(null=True, blank=True)
    is_private = models.BooleanField(default=False)
    ordinal = models.PositiveIntegerField()
    title = models.CharField(max_length=300)
    content = models.TextField()

    class Meta:
        ordering = ["item", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["item", "ordinal"], name="chunk_unique_ordinal")]

    def __str__(self) -> str:
        return f"{self.title} #{self.ordinal}"
