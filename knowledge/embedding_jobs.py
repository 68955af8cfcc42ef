"""Embedding a workspace's chunks in the background, and the model a search uses.

The job (``workspace_embed``) fills in the vectors of the configured model
(``embeddings.current_spec``) for every chunk of a workspace that has none, a batch at a
time, and records its progress in ``WorkspaceEmbedding`` (the knowledge page's bar). It is
started after every committed change to a workspace's chunks (``embedding_enqueue``: an item
created, imported, uploaded, edited or saved from a chat), by ``manage.py embed_knowledge``,
and by a search or a knowledge page that finds the workspace behind (a new model configured,
vectors missing, a failed job due for a retry). Where it runs: the executor of runs
(``RUN_EXECUTOR``) — the Celery task ``knowledge.embed_workspace`` in production, a
background thread of the process in embedded mode (one job per workspace at a time).

Re-embedding without downtime: when the configured model changes, the workspace's
``target_model`` becomes the new one and the job embeds every chunk again; meanwhile searches
keep using ``serving_model``, the old vectors. When the target is complete it becomes the
serving model and the old vectors are deleted. A job whose target is no longer the
workspace's (the model changed again mid-job) stops at its next batch without switching
anything. An item deleted while its chunks are embedded: their vectors are skipped
(``vectors.vectors_store``). The model or endpoint failing: the job stops with
``state = failed`` and a sentence in ``error`` (shown on the knowledge page, logged), and is
retried after ``KNOWLEDGE_EMBEDDING_RETRY_S``; keyword search answers meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from .embeddings import (
    EmbeddingSpec,
    EmbeddingUnavailable,
    chunk_text_for_embedding,
    current_spec,
    embed_texts,
    spec_from_key,
)
from .models import (
    ChunkSentenceVectors,
    ChunkVector,
    EmbeddingModel,
    KnowledgeChunk,
    WorkspaceEmbedding,
)
from .sentences import sentences_store, split_sentences
from .vectors import ensure_index, vectors_store

logger = logging.getLogger(__name__)

EMBED_WORKSPACE_TASK = "knowledge.embed_workspace"  # knowledge.tasks.embed_workspace_task
RUNNING_STALE_S = 120  # a running job that has not reported a batch for this long is taken over


def embedding_model_for(spec: EmbeddingSpec) -> EmbeddingModel:
    model, _ = EmbeddingModel.objects.get_or_create(key=spec.key)
    return model


def _progress(state: WorkspaceEmbedding, model_id: int) -> None:
    state.total = KnowledgeChunk.objects.filter(workspace_id=state.workspace_id).count()
    state.embedded = ChunkVector.objects.filter(model_id=model_id, chunk__workspace_id=state.workspace_id).count()


def workspace_embed(*, workspace_id: int, batch: int | None = None, on_batch=None) -> str:
    """Embed the chunks of ``workspace_id`` lacking a vector of the configured model.

    Returns ``"off"`` (embeddings off), ``"running"`` (another job is at it), ``"done"``
    (complete; the model serves),
    ``"superseded"`` (another model became the target mid-job) or ``"failed"`` (the model
    could not answer; recorded on the workspace). ``on_batch(stored)`` is called after each
    batch (tests, the command's progress)."""
    spec = current_spec()
    if spec is None:
        return "off"
    batch = max(1, int(batch or settings.KNOWLEDGE_EMBEDDING_BATCH))
    model = embedding_model_for(spec)
    with transaction.atomic():
        state, _ = WorkspaceEmbedding.objects.select_for_update().get_or_create(workspace_id=workspace_id)
        if (state.state == WorkspaceEmbedding.State.RUNNING and state.target_model_id == model.pk
                and state.updated_at > timezone.now() - timedelta(seconds=RUNNING_STALE_S)):
            # Another job (another worker thread: an import enqueues one per item) is at it;
            # it takes chunks added meanwhile too. One that stopped reporting is taken over.
            return "running"
        if state.target_model_id != model.pk:
            logger.info("workspace %s: embedding with %s (was %s)", workspace_id, spec.key,
                        state.target_model_id and EmbeddingModel.objects.get(pk=state.target_model_id).key)
        state.target_model = model
        state.state = WorkspaceEmbedding.State.RUNNING
        state.error = ""
        _progress(state, model.pk)
        state.save()
    last_id = 0
    while True:
        current = WorkspaceEmbedding.objects.filter(workspace_id=workspace_id).values_list("target_model_id", flat=True).first()
        if current != model.pk:
            logger.info("workspace %s: embedding with %s stopped, the model is now another", workspace_id, spec.key)
            return "superseded"
        chunks = list(
            KnowledgeChunk.objects.filter(workspace_id=workspace_id, pk__gt=last_id)
            .exclude(pk__in=ChunkVector.objects.filter(model_id=model.pk).values("chunk_id"))
            .order_by("pk").values_list("pk", "title", "content")[:batch]
        )
        if not chunks:
            break
        last_id = chunks[-1][0]
        try:
            vectors = embed_texts(spec, [chunk_text_for_embedding(t, c) for _, t, c in chunks])
        except EmbeddingUnavailable as exc:
            return _failed(workspace_id, model, spec, str(exc))
        except Exception as exc:  # the model itself broke: same outcome, with the traceback logged
            logger.exception("workspace %s: embedding failed", workspace_id)
            return _failed(workspace_id, model, spec, f"{type(exc).__name__}: {exc}")
        if model.dimensions is None:
            model.dimensions = len(vectors[0])
            model.save(update_fields=["dimensions"])
        ensure_index(model_id=model.pk, dimensions=model.dimensions)
        stored = vectors_store(model_id=model.pk, rows=[(pk, v) for (pk, _, _), v in zip(chunks, vectors, strict=True)])
        state = WorkspaceEmbedding.objects.get(workspace_id=workspace_id)
        _progress(state, model.pk)
        state.save(update_fields=["total", "embedded", "updated_at"])
        if on_batch:
            on_batch(stored)
    with transaction.atomic():
        state = WorkspaceEmbedding.objects.select_for_update().get(workspace_id=workspace_id)
        if state.target_model_id != model.pk:
            return "superseded"
        missing = (KnowledgeChunk.objects.filter(workspace_id=workspace_id)
                   .exclude(pk__in=ChunkVector.objects.filter(model_id=model.pk).values("chunk_id")).exists())
        if missing:  # chunks added while this job ran: its next run (already enqueued) takes them
            state.state = WorkspaceEmbedding.State.QUEUED
        else:
            state.state = WorkspaceEmbedding.State.IDLE
        if state.serving_model_id != model.pk and not missing:
            old = state.serving_model_id
            state.serving_model = model
            if old:
                ChunkVector.objects.filter(chunk__workspace_id=workspace_id).exclude(model_id=model.pk).delete()
                ChunkSentenceVectors.objects.filter(chunk__workspace_id=workspace_id).exclude(model_id=model.pk).delete()
                logger.info("workspace %s: %s serves now; the previous model's vectors were deleted", workspace_id, spec.key)
        _progress(state, model.pk)
        state.save()
    if settings.KNOWLEDGE_SENTENCE_VECTORS:
        outcome = _embed_sentences(workspace_id, model, spec, batch)
        if outcome != "done":
            return outcome
    return "done"


def _embed_sentences(workspace_id: int, model: EmbeddingModel, spec: EmbeddingSpec, batch: int) -> str:
    """Second pass of a job: the sentence vectors (``knowledge/sentences.py``) of the chunks
    of ``workspace_id`` lacking them, after every chunk has its chunk vector — an upload is
    searchable by meaning as soon as without them; the re-ranking refines it when they
    arrive. Returns ``"done"``, ``"superseded"`` or ``"failed"``."""
    last_id = 0
    while True:
        current = WorkspaceEmbedding.objects.filter(workspace_id=workspace_id).values_list("target_model_id", flat=True).first()
        if current != model.pk:
            return "superseded"
        chunks = list(
            KnowledgeChunk.objects.filter(workspace_id=workspace_id, pk__gt=last_id)
            .exclude(pk__in=ChunkSentenceVectors.objects.filter(model_id=model.pk).values("chunk_id"))
            .order_by("pk").values_list("pk", "content")[:batch]
        )
        if not chunks:
            return "done"
        last_id = chunks[-1][0]
        split = [(pk, split_sentences(content)) for pk, content in chunks]
        texts = [s for _, sentences in split for s in sentences]
        try:
            vectors = []
            for i in range(0, len(texts), batch):  # batches of sentences, as many as the chunks' batch
                vectors.extend(embed_texts(spec, texts[i:i + batch]))
        except EmbeddingUnavailable as exc:
            return _failed(workspace_id, model, spec, str(exc))
        except Exception as exc:
            logger.exception("workspace %s: embedding sentences failed", workspace_id)
            return _failed(workspace_id, model, spec, f"{type(exc).__name__}: {exc}")
        rows, at = [], 0
        for pk, sentences in split:
            rows.append((pk, vectors[at:at + len(sentences)]))
            at += len(sentences)
        sentences_store(model_id=model.pk, rows=rows)


def _failed(workspace_id: int, model: EmbeddingModel, spec: EmbeddingSpec, reason: str) -> str:
    logger.warning("workspace %s: embedding with %s failed, keyword search answers meanwhile: %s",
                   workspace_id, spec.key, reason)
    WorkspaceEmbedding.objects.filter(workspace_id=workspace_id, target_model_id=model.pk).update(
        state=WorkspaceEmbedding.State.FAILED, error=reason[:500], error_at=timezone.now(), updated_at=timezone.now()
    )
    return "failed"


# --- where jobs run -----------------------------------------------------------------------------
_running: set[int] = set()
_again: set[int] = set()
_running_lock = threading.Lock()
_serving = False  # embedded jobs run in server processes only (embedding_serve_in_this_process)
CATCH_UP_DELAY_S = 5.0


def embedding_serve_in_this_process(*, catch_up_after_s: float = CATCH_UP_DELAY_S) -> None:
    """Called by the web process (``config.asgi``): embedded-mode jobs run in this process
    from now on, and after ``catch_up_after_s`` every workspace behind is enqueued (a daemon
    timer; nothing when embeddings are off). Management commands never call it: in embedded
    mode their imports leave the workspace ``queued`` for the server (``seed_demo`` must not
    wait for the demo corpus to be embedded)."""
    global _serving
    _serving = True
    if current_spec() is None:
        return
    timer = threading.Timer(catch_up_after_s, _catch_up_all)
    timer.daemon = True
    timer.name = "kb-embed-catch-up"
    timer.start()


def _catch_up_all() -> None:
    from chat.models import Workspace

    close_old_connections()
    try:
        spec = current_spec()
        if spec is None:
            return
        states = {r["workspace_id"]: r for r in WorkspaceEmbedding.objects.values(
            "workspace_id", "serving_model_id", "target_model_id", "state", "error_at")}
        for workspace_id in Workspace.objects.filter(
                pk__in=KnowledgeChunk.objects.values("workspace_id")).values_list("pk", flat=True):
            embedding_catch_up(workspace_id, states.get(workspace_id), spec)
    except Exception:
        logger.exception("embedding catch-up at start-up failed")
    finally:
        close_old_connections()


def _embedded_job(workspace_id: int) -> None:
    """One embedded job per workspace at a time; a request arriving meanwhile runs it once
    more afterwards (it may have added chunks the running pass already went by)."""
    try:
        while True:
            close_old_connections()
            try:
                workspace_embed(workspace_id=workspace_id)
            except Exception:
                logger.exception("embedding workspace %s failed in the embedded executor", workspace_id)
            finally:
                close_old_connections()
            with _running_lock:
                if workspace_id not in _again:
                    _running.discard(workspace_id)
                    return
                _again.discard(workspace_id)
    except BaseException:
        with _running_lock:
            _running.discard(workspace_id)
        raise


def embedding_enqueue(workspace_id: int) -> threading.Thread | None:
    """Start embedding ``workspace_id`` in the background (call after commit). Embedded
    mode returns the thread (tests join it); Celery mode sends the task; nothing when
    embeddings are off or ``RUN_EXECUTOR`` is ``none``."""
    if current_spec() is None or settings.RUN_EXECUTOR == "none":
        return None
    WorkspaceEmbedding.objects.filter(workspace_id=workspace_id).exclude(
        state=WorkspaceEmbedding.State.RUNNING).update(state=WorkspaceEmbedding.State.QUEUED)
    if settings.RUN_EXECUTOR == "celery":
        from celery import current_app as app

        # Explicit priority, as imports (knowledge.jobs): send_task does not apply the default one.
        app.send_task(EMBED_WORKSPACE_TASK, args=[int(workspace_id)], priority=app.conf.task_default_priority)
        return None
    if not _serving:
        return None
    with _running_lock:
        if workspace_id in _running:
            _again.add(workspace_id)
            return None
        _running.add(workspace_id)
    # A daemon thread: a management command (seed_demo, import_knowledge) never waits for
    # it at exit; what it did not finish is picked up by the server (embedding_catch_up).
    thread = threading.Thread(target=_embedded_job, args=(workspace_id,), name=f"kb-embed-{workspace_id}", daemon=True)
    thread.start()
    return thread


def embedding_enqueue_on_commit(workspace_id: int) -> None:
    transaction.on_commit(lambda: embedding_enqueue(workspace_id))


# --- what a search uses ---------------------------------------------------------------------------
@dataclass(frozen=True)
class QueryModel:
    """The model whose vectors a search of a workspace uses."""

    spec: EmbeddingSpec
    model_id: int
    dimensions: int
    workspace_id: int = 0
    noted_error: bool = False  # the workspace shows a query-time failure (cleared on success)


_unavailable_until: dict[str, float] = {}
_catch_up_at: dict[int, float] = {}


def query_model_for(workspace_id: int) -> QueryModel | None:
    """The serving model of ``workspace_id`` — or, before any model completed, the
    configured one's partial vectors — or None (embeddings off, none stored yet). Starts a
    catch-up job when the workspace is behind (``embedding_catch_up``)."""
    spec = current_spec()
    if spec is None:
        return None
    row = (WorkspaceEmbedding.objects.filter(workspace_id=workspace_id)
           .values("serving_model_id", "target_model_id", "state", "error_at", "error").first())
    embedding_catch_up(workspace_id, row, spec)
    if row is None:
        return None
    model_id = row["serving_model_id"] or row["target_model_id"]
    if model_id is None:
        return None
    model = EmbeddingModel.objects.filter(pk=model_id).values("key", "dimensions").first()
    if model is None or not model["dimensions"]:
        return None
    return QueryModel(spec=spec_from_key(model["key"]), model_id=model_id, dimensions=model["dimensions"],
                      workspace_id=workspace_id,
                      noted_error=bool(row["error"]) and row["state"] != WorkspaceEmbedding.State.FAILED)


def embedding_catch_up(workspace_id: int, row: dict | None, spec: EmbeddingSpec) -> None:
    """Enqueue a job when the workspace has no embedding state yet, its target is not the
    configured model, or a failed job is due for a retry — at most once a minute per
    workspace and process."""
    now = time.monotonic()
    if now < _catch_up_at.get(workspace_id, 0.0):
        return
    behind = row is None
    if row is not None:
        if row["state"] == WorkspaceEmbedding.State.FAILED:
            behind = True
        elif row["target_model_id"] is None or row["state"] == WorkspaceEmbedding.State.QUEUED:
            behind = True
        else:
            target_key = EmbeddingModel.objects.filter(pk=row["target_model_id"]).values_list("key", flat=True).first()
            behind = target_key != spec.key
    if behind:
        _catch_up_at[workspace_id] = now + max(1.0, float(settings.KNOWLEDGE_EMBEDDING_RETRY_S))
        transaction.on_commit(lambda: embedding_enqueue(workspace_id))


_query_pool = None
_query_pool_lock = threading.Lock()


def _query_executor():
    """Threads that wait on query embeddings (a local model computes without the GIL, a
    child process or an endpoint is waited on), so the keyword query runs meanwhile."""
    global _query_pool
    if _query_pool is None:
        with _query_pool_lock:
            if _query_pool is None:
                from concurrent.futures import ThreadPoolExecutor

                _query_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kb-query-embed")
    return _query_pool


class PendingQueryVector:
    """A query's vector being computed in the background (``embed_query_start``); ``result()``
    gives it, or None exactly where ``embed_query`` would."""

    def __init__(self, query_model: QueryModel, future):
        self.query_model = query_model
        self.future = future

    def result(self) -> list[float] | None:
        if self.future is None:
            return None
        try:
            vectors = self.future.result()
        except EmbeddingUnavailable as exc:
            return _query_failed(self.query_model, exc)
        return _query_vector(self.query_model, vectors)


def embed_query_start(query_model: QueryModel, text: str) -> PendingQueryVector:
    """Start embedding the query ``text`` in a pool thread (no database access there); the
    caller runs its keyword query meanwhile and then asks ``.result()``: a search costs the
    longer of the two, not their sum."""
    if time.monotonic() < _unavailable_until.get(query_model.spec.key, 0.0):
        return PendingQueryVector(query_model, None)
    timeout = min(5.0, settings.KNOWLEDGE_EMBEDDING_TIMEOUT_S)
    future = _query_executor().submit(embed_texts, query_model.spec, [text], timeout=timeout, kind="query")
    return PendingQueryVector(query_model, future)


def embed_query(query_model: QueryModel, text: str) -> list[float] | None:
    """The query's vector, or None when the model cannot answer now (logged; the search
    answers from keywords; the model is not asked again for ``KNOWLEDGE_EMBEDDING_RETRY_S``)."""
    return embed_query_start(query_model, text).result()


def _query_failed(query_model: QueryModel, exc: Exception) -> None:
    key = query_model.spec.key
    _unavailable_until[key] = time.monotonic() + float(settings.KNOWLEDGE_EMBEDDING_RETRY_S)
    logger.warning("search by meaning unavailable (%s), keyword results only: %s", key, exc)
    WorkspaceEmbedding.objects.filter(workspace_id=query_model.workspace_id).exclude(
        state=WorkspaceEmbedding.State.FAILED).update(error=str(exc)[:500], error_at=timezone.now())
    return None


def _query_vector(query_model: QueryModel, vectors: list[list[float]]) -> list[float] | None:
    key = query_model.spec.key
    if query_model.noted_error:  # the model answers again: the knowledge page's note goes
        WorkspaceEmbedding.objects.filter(workspace_id=query_model.workspace_id).exclude(
            state=WorkspaceEmbedding.State.FAILED).update(error="")
    if len(vectors[0]) != query_model.dimensions:
        logger.warning("embedding model %s returned %d dimensions, its vectors have %d; keyword results only",
                       key, len(vectors[0]), query_model.dimensions)
        return None
    return vectors[0]


def embedding_status(*, workspace_id: int) -> dict | None:
    """For the knowledge page: ``{"state", "embedded", "total", "percent", "error",
    "model", "serving", "switching"}`` or None when embeddings are off."""
    spec = current_spec()
    if spec is None:
        return None
    row = WorkspaceEmbedding.objects.filter(workspace_id=workspace_id).select_related(
        "serving_model", "target_model").first()
    if row is None:
        return {"state": "queued", "embedded": 0, "total": 0, "percent": 0, "error": "", "model": spec.key,
                "serving": "", "switching": False}
    # Counted now, not the job's last note: items edited or deleted since change both.
    total = KnowledgeChunk.objects.filter(workspace_id=workspace_id).count()
    embedded = (ChunkVector.objects.filter(model_id=row.target_model_id, chunk__workspace_id=workspace_id).count()
                if row.target_model_id else 0)
    return {
        "state": row.state,
        "embedded": embedded,
        "total": total,
        "percent": 100 if not total else min(100, int(100 * embedded / total)),
        "error": row.error,
        "model": row.target_model.key if row.target_model else spec.key,
        "serving": row.serving_model.key if row.serving_model else "",
        "switching": bool(row.serving_model_id and row.target_model_id != row.serving_model_id),
    }
