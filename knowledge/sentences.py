"""Sentence vectors: each chunk's sentences embedded too, to re-rank the vector candidates.

A paraphrased question often matches one sentence of its answer while the chunk's single
vector — the mean of ~250 word pieces — is pulled towards everything else the chunk says. So
each chunk also gets one vector per sentence (``KNOWLEDGE_SENTENCE_VECTORS``, on by default),
stored as one row per chunk and model (``ChunkSentenceVectors``: float32 bytes, ``count`` ×
the model's dimensions; deleted with its chunk). They are never searched as such — at 20 k
chunks that would be ~10× the vectors for the nearest-neighbour scan — but re-rank the vector
ranking's candidates (``HYBRID_POOL``, 40): each candidate scores

    cosine(question, chunk) + KNOWLEDGE_SENTENCE_WEIGHT × max over its sentences cosine(question, sentence)

(a candidate without sentence vectors yet counts its chunk cosine for the sentences' too).
The candidates already passed the caller's visibility filters in the SQL; this only
reorders them. Measured on bench/retrieval_eval.py's questions with a held-out split
(``bench/retrieval_variants.py``, docs/performance.md).
"""

from __future__ import annotations

import re

import numpy as np

# A sentence ends at . ! ? or : before whitespace and a capital, a quote, a parenthesis or
# markup; a blank line ends one too. Fragments of ≤ 15 characters ("Notes:") are left out.
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z(\"'`*])|\n\s*\n")
MIN_SENTENCE_CHARS = 16
MAX_SENTENCES = 64  # per chunk (a ~1.5 k-char chunk has ~11); the rest of a longer list is merged into the last


def split_sentences(text: str) -> list[str]:
    """The sentences of a chunk's ``text`` (at least one: the text itself when it has no
    sentence longer than 15 characters; ``[]`` for blank text)."""
    parts = [p.strip() for p in _SENTENCE_END.split(text or "") if p and p.strip()]
    kept = [p for p in parts if len(p) >= MIN_SENTENCE_CHARS]
    if not kept:
        return [text.strip()] if (text or "").strip() else []
    if len(kept) > MAX_SENTENCES:
        kept = kept[:MAX_SENTENCES - 1] + [" ".join(kept[MAX_SENTENCES - 1:])]
    return kept


def pack(vectors: list[list[float]]) -> bytes:
    """Sentence vectors → float32 little-endian bytes, row after row."""
    return np.asarray(vectors, dtype="<f4").tobytes()


def unpack(blob: bytes, dimensions: int) -> np.ndarray:
    """Bytes of ``pack`` → a (count, dimensions) float32 array."""
    return np.frombuffer(bytes(blob), dtype="<f4").reshape(-1, int(dimensions))


def rerank(*, query: list[float], candidates: list[tuple[int, float]], sentences: dict[int, np.ndarray],
           weight: float) -> list[int]:
    """Chunk ids of ``candidates`` (``(chunk_id, cosine distance)``, nearest first) ordered by
    ``similarity + weight × best sentence similarity``, best first (ties keep their order).
    ``sentences``: chunk id → its (count, dimensions) sentence vectors (a chunk missing
    counts its chunk similarity for its sentences)."""
    q = np.asarray(query, dtype=np.float32)
    scored = []
    for position, (chunk_id, distance) in enumerate(candidates):
        similarity = 1.0 - float(distance)
        vectors = sentences.get(chunk_id)
        best = float((vectors @ q).max()) if vectors is not None and len(vectors) else similarity
        scored.append((-(similarity + weight * best), position, chunk_id))
    scored.sort()
    return [chunk_id for _, _, chunk_id in scored]


def sentences_store(*, model_id: int, rows: list[tuple[int, list[list[float]]]]) -> int:
    """Write ``(chunk_id, sentence vectors)`` rows for ``model_id``; returns how many were
    stored. A chunk that has them already keeps them; a chunk deleted meanwhile is skipped."""
    from django.db import IntegrityError, transaction

    from .models import ChunkSentenceVectors, KnowledgeChunk

    alive = set(KnowledgeChunk.objects.filter(pk__in=[c for c, _ in rows]).values_list("pk", flat=True))
    objs = [ChunkSentenceVectors(chunk_id=c, model_id=model_id, count=len(v), vectors=pack(v))
            for c, v in rows if c in alive and v]
    try:
        with transaction.atomic():
            ChunkSentenceVectors.objects.bulk_create(objs, ignore_conflicts=True)
    except IntegrityError:  # a chunk deleted between the check and the commit: one by one
        stored = 0
        for obj in objs:
            try:
                with transaction.atomic():
                    ChunkSentenceVectors.objects.bulk_create([obj], ignore_conflicts=True)
                stored += 1
            except IntegrityError:
                pass
        return stored
    return len(objs)


def sentences_for(*, model_id: int, chunk_ids: list[int], dimensions: int) -> dict[int, np.ndarray]:
    """chunk id → its (count, dimensions) sentence vectors of ``model_id`` (chunks without
    any are missing)."""
    from .models import ChunkSentenceVectors

    rows = ChunkSentenceVectors.objects.filter(model_id=model_id, chunk_id__in=chunk_ids).values_list(
        "chunk_id", "vectors")
    return {chunk_id: unpack(blob, dimensions) for chunk_id, blob in rows}
