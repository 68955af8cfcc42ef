"""Knowledge items, their chunks, per-workspace search settings and per-run sources.

Retrieval runs on chunks through the database's full-text index: a weighted ``tsvector``
kept by a trigger with a GIN index on PostgreSQL, an FTS5 virtual table kept by triggers on
SQLite (see ``knowledge/selectors.py`` and migrations 0002/0003).
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

# PostgreSQL text search configurations a workspace may choose (those shipped with
# PostgreSQL 15). ``simple`` lowercases without stemming or stop words.
SEARCH_LANGUAGES = (
    "simple", "arabic", "armenian", "basque", "catalan", "danish", "dutch", "english",
    "finnish", "french", "german", "greek", "hindi", "hungarian", "indonesian", "irish",
    "italian", "lithuanian", "nepali", "norwegian", "portuguese", "romanian", "russian",
    "serbian", "spanish", "swedish", "tamil", "turkish", "yiddish",
)
DEFAULT_SEARCH_LANGUAGE = "english"


class KnowledgeItem(models.Model):
    """A piece of the team's knowledge.

    Visibility: shared within the workspace; ``is_hidden`` items are left out of lists but
    usable by the AI; ``is_private`` items are seen only by their owner and are excluded from
    retrieval unless the thread opts in, and then only the sender's own (DESIGN §1, §4).
    ``source_path`` + ``content_hash`` make imports idempotent; ``tags`` is a list of
    lower-case strings (≤ 20, ≤ 50 chars each).
    """

    class Type(models.TextChoices):
        NOTE = "note"
        FACT = "fact"
        DECISION = "decision"
        HOWTO = "howto"
        REFERENCE = "reference"
        DOCUMENT = "document"
        SNIPPET = "snippet"

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
        indexes = [
            models.Index(fields=["workspace", "source_path"], name="knowledge_source"),
            models.Index(fields=["workspace", "-updated_at"], name="knowledge_ws_recent"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "source_path"], condition=~Q(source_path=""), name="knowledge_unique_source"
            )
        ]

    def __str__(self) -> str:
        return self.title


class KnowledgeChunk(models.Model):
    """A retrievable slice of an item (paragraph-aware, ~1.5 k chars with overlap).

    Visibility fields are copied from the item so retrieval filters inside the index query
    without a join; ``language`` (the workspace's search language) drives the PostgreSQL
    stemming. Chunks are rewritten whenever the item's text, owner or privacy changes.
    PostgreSQL adds two trigger-kept columns the ORM does not see: ``search_vector``
    (title + content) and ``title_vector`` (title only), each with a GIN index.
    """

    item = models.ForeignKey(KnowledgeItem, on_delete=models.CASCADE, related_name="chunks")
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="+")
    owner_id_copy = models.IntegerField(null=True, blank=True)
    is_private = models.BooleanField(default=False)
    is_hidden = models.BooleanField(default=False)
    ordinal = models.PositiveIntegerField()
    title = models.CharField(max_length=300)
    content = models.TextField()
    language = models.CharField(max_length=32, default=DEFAULT_SEARCH_LANGUAGE)

    class Meta:
        ordering = ["item", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["item", "ordinal"], name="chunk_unique_ordinal")]

    def __str__(self) -> str:
        return f"{self.title} #{self.ordinal}"


class KnowledgeSettings(models.Model):
    """Per-workspace knowledge settings. Kept in this app (not on ``Workspace``) so the
    knowledge base owns its configuration. No row → the defaults."""

    workspace = models.OneToOneField("chat.Workspace", on_delete=models.CASCADE, related_name="knowledge_settings")
    search_language = models.CharField(
        max_length=32,
        default=DEFAULT_SEARCH_LANGUAGE,
        choices=[(name, name) for name in SEARCH_LANGUAGES],
        help_text="PostgreSQL text search configuration for stemming content (SQLite always uses "
        "the porter stemmer). Changing it re-indexes the workspace's knowledge.",
    )

    class Meta:
        verbose_name_plural = "knowledge settings"

    def __str__(self) -> str:
        return f"knowledge settings of {self.workspace}"


class RunSources(models.Model):
    """The numbered knowledge sources given to the model during one run.

    ``sources`` is ``[{"n": int, "item_id": str, "chunk_id": int, "title": str,
    "via": "grounding" | "search_knowledge"}]``. Numbers are per run and never reused: the
    grounding block takes 1..K, each ``search_knowledge`` call continues after the highest
    number so far, and a chunk seen before keeps its number. The grounding part is written
    once (``grounded_at``, ``block``: the exact text put in the system prompt) so a resumed
    run sends the same block it started with.
    """

    run = models.OneToOneField("agents.Run", on_delete=models.CASCADE, primary_key=True, related_name="+")
    sources = models.JSONField(default=list, blank=True)
    block = models.TextField(blank=True)
    grounded_at = models.DateTimeField(null=True, blank=True)
    grounding_note = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "run sources"

    def __str__(self) -> str:
        return f"sources of run {self.run_id}"


class KnowledgeUpload(models.Model):
    """One file a person uploaded from the browser (or the API), imported by the executor.

    The bytes are kept in the row (``data``) until the import ran, so a Celery worker on
    another machine reads them from the database like everything else; they are cleared
    when the import ends, whatever its outcome. ``status``: ``queued`` → ``importing`` →
    ``created`` | ``updated`` | ``unchanged`` | ``failed`` (with ``error``, a sentence for
    the person). An import is one transaction: a file that fails leaves no item behind.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        IMPORTING = "importing"
        CREATED = "created"
        UPDATED = "updated"
        UNCHANGED = "unchanged"
        FAILED = "failed"

    DONE = frozenset({Status.CREATED, Status.UPDATED, Status.UNCHANGED, Status.FAILED})

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="+")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="knowledge_uploads")
    filename = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField(default=0)
    data = models.BinaryField(blank=True, editable=False)
    type = models.CharField(max_length=40, default="document")
    tags = models.JSONField(default=list, blank=True)
    is_private = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    error = models.CharField(max_length=500, blank=True)
    item = models.ForeignKey(KnowledgeItem, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="knowledge_upload_recent")]

    def __str__(self) -> str:
        return f"{self.filename} ({self.status})"


class EmbeddingModel(models.Model):
    """An embedding model chunks were (or are being) embedded with. ``key`` names it
    completely (``"local:all-MiniLM-L6-v2"``, ``"openai:text-embedding-3-small@https://…/v1"``);
    ``dimensions`` is known once it returned a vector. Vectors of one model are never compared
    with another's."""

    key = models.CharField(max_length=500, unique=True)
    dimensions = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key


class ChunkVector(models.Model):
    """One chunk's embedding under one model. The vector column is not an ORM field: a
    ``vector`` (pgvector) on PostgreSQL, float32 bytes (sqlite-vec) on SQLite, written and read
    in ``knowledge/vectors.py`` (migration 0005). Deleting the chunk deletes its vectors."""

    chunk = models.ForeignKey(KnowledgeChunk, on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(EmbeddingModel, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "chunk"], name="chunk_vector_unique")]

    def __str__(self) -> str:
        return f"vector of chunk {self.chunk_id} ({self.model_id})"


class ChunkSentenceVectors(models.Model):
    """One chunk's sentence vectors under one model (``knowledge/sentences.py``): ``count``
    float32 vectors of the model's dimensions, row after row, in ``vectors``. They re-rank
    the vector candidates; made by the embedding job after the chunk vectors, deleted with
    their chunk."""

    chunk = models.ForeignKey(KnowledgeChunk, on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(EmbeddingModel, on_delete=models.CASCADE, related_name="+")
    count = models.PositiveIntegerField()
    vectors = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "chunk"], name="chunk_sentences_unique")]

    def __str__(self) -> str:
        return f"{self.count} sentence vectors of chunk {self.chunk_id} ({self.model_id})"


class WorkspaceEmbedding(models.Model):
    """Where a workspace's embeddings stand (knowledge/embedding_jobs.py).

    ``serving_model``: the model whose vectors searches use — complete for the workspace (new
    chunks being embedded meanwhile are found by keyword); ``target_model``: the configured
    model the background job fills in. They differ after a change of model until the new
    vectors are complete; then the target serves and the old vectors are deleted.
    ``state``: ``queued`` | ``running`` | ``idle`` | ``failed`` (``error`` says why, a
    sentence for the knowledge page); ``embedded``/``total``: chunks with a target vector /
    all chunks, for the progress bar."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        IDLE = "idle"
        FAILED = "failed"

    workspace = models.OneToOneField("chat.Workspace", on_delete=models.CASCADE, related_name="+")
    serving_model = models.ForeignKey(EmbeddingModel, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="+")
    target_model = models.ForeignKey(EmbeddingModel, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    embedded = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)
    error_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"embeddings of {self.workspace_id}: {self.state} {self.embedded}/{self.total}"
