"""Retrieval quality and speed: keyword, vector and hybrid ranking on labelled natural questions.

Quality (the default): the demo corpus (the Python Language Reference, one item per topic, as
``seed_demo`` imports it) in a workspace of its own, embedded with the configured model
(``KNOWLEDGE_EMBEDDINGS``/``KNOWLEDGE_EMBEDDING_MODEL``, by default the local MiniLM), then
every question of ``bench/data/retrieval_questions.tsv`` (written for this: paraphrased, not
the answers' titles) through the real code:

* ``keyword``  — the keyword ranking alone (question mode: what grounding used before);
* ``vector``   — the vector ranking alone;
* ``hybrid / grounding`` — ``knowledge_search`` as a grounded turn and the model's
  ``search_knowledge`` tool call it (question mode, ≤ 2 chunks per item);
* ``hybrid / search API`` — as the search API, the knowledge pages and ``/mcp/`` call it
  (``knowledge_search_for_user``'s arguments: search-box mode, one chunk per item);
* ``keyword / search API (before)`` — the search boxes' former AND-only query, for comparison.

recall@5: share of questions with an acceptable topic among the first 5 distinct items;
MRR@10: mean of 1/rank of the first acceptable item within 10 (0 when none); each also for
the even-numbered questions (A, where variants are tuned) and the odd ones (B, held out:
``bench/retrieval_variants.py``). The table is printed per database::

    DATABASE_URL=sqlite:///var/bench-eval.sqlite3 .venv/bin/python bench/retrieval_eval.py
    createdb -h 127.0.0.1 -U postgres chatplatform_bench_eval
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/chatplatform_bench_eval .venv/bin/python bench/retrieval_eval.py

``--latency N``: adds N chunks to a second workspace (the corpus's paragraphs shuffled into
items, as bench/retrieval.py; their vectors are the corpus chunks' real vectors with a little
noise — embedding 100 k chunks on this CPU would take hours, and a nearest-neighbour search
costs the same on either) and times 200 hybrid searches of the labelled questions, query
embedding included (p50/p95, with the load average). ``--throughput``: chunks per second
the configured model embeds (batches of ``KNOWLEDGE_EMBEDDING_BATCH``). ``--ab-rank R`` (with
``--latency``, PostgreSQL): the same searches with the keyword rank function ``ts_rank_cd``
(before) and ``ts_rank`` (now) interleaved question by question, R rounds. ``--ab-sentences R``
(with ``--latency``): the sentence re-ranking on against off, interleaved, R rounds (the
latency workspace's sentence vectors are its chunk vectors plus noise, as many as each chunk
has sentences).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from chat.models import Workspace  # noqa: E402
from knowledge.chunking import chunk_text  # noqa: E402
from knowledge.embedding_jobs import embedding_model_for, workspace_embed  # noqa: E402
from knowledge.embeddings import chunk_text_for_embedding, current_spec, embed_texts  # noqa: E402
from knowledge.models import ChunkVector, KnowledgeChunk, KnowledgeItem  # noqa: E402
from knowledge.pydoc_import import SOURCE_PREFIX, import_python_reference, topic_title  # noqa: E402
from knowledge.search import STOP_WORDS, Filters, query_terms, run_search  # noqa: E402
from knowledge.selectors import keyword_rows, knowledge_search, vector_rows  # noqa: E402
from knowledge.services import content_hash  # noqa: E402
from knowledge.vectors import ensure_index, vectors_store  # noqa: E402

QUESTIONS = Path(__file__).resolve().parent / "data" / "retrieval_questions.tsv"
EVAL_SLUG = "bench-eval"
LATENCY_SLUG = "bench-eval-latency"


# The "Compound statements" topic holds the whole chapter: the if, while, for, try and with
# statements, function and class definitions and async for/with, word for word. For a question
# answered by one of those sections it is a right answer too.
CONTAINED_IN = {"compound": {"if", "else", "while", "for", "try", "with", "function", "class", "async"}}


def load_questions() -> list[tuple[str, set[str]]]:
    out = []
    for line in QUESTIONS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            question, keys = line.split("\t")
            wanted = {k.strip() for k in keys.split(",")}
            wanted |= {whole for whole, parts in CONTAINED_IN.items() if wanted & parts}
            out.append((question, wanted))
    return out


def title_overlap(questions) -> int:
    """Questions sharing a content word (crudely stemmed) with an answer's title."""
    from pydoc_data.topics import topics

    def stems(text):
        return {w[:5] for w in query_terms(text) if w not in STOP_WORDS and len(w) > 2}

    titles = {k: stems(topic_title(k, v)) for k, v in topics.items()}
    return sum(1 for q, keys in questions if any(stems(q) & titles[k] for k in keys))


def items_of(rows) -> list[str]:
    """Distinct item ids of ranked rows, in order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.setdefault(str(uuid.UUID(str(row[1]))), None)
    return list(seen)


def score(ranked: list[list[str]], labels: list[set[str]]) -> tuple[float, float]:
    recall = mrr = 0.0
    for items, wanted in zip(ranked, labels, strict=True):
        ranks = [n for n, key in enumerate(items[:10], start=1) if key in wanted]
        recall += 1.0 if ranks and ranks[0] <= 5 else 0.0
        mrr += 1.0 / ranks[0] if ranks else 0.0
    return recall / len(labels), mrr / len(labels)


def quality(workspace, user) -> None:
    questions = load_questions()
    keys = dict(KnowledgeItem.objects.filter(workspace=workspace).values_list("pk", "source_path"))
    key_of = {str(pk): path.removeprefix(SOURCE_PREFIX) for pk, path in keys.items()}
    filters = Filters(workspace_id=workspace.pk, user_id=user.pk, include_private=False, include_hidden=True)
    methods = {
        "keyword": lambda q: items_of(keyword_rows(query=q, filters=filters, mode="question", fetch=40)),
        "vector": lambda q: items_of(vector_rows(query=q, filters=filters, fetch=40)),
        "hybrid / grounding": lambda q: [h.item_id for h in knowledge_search(
            workspace=workspace, user=user, query=q, top_k=20, mode="question", per_item=2)],
        "hybrid / search API": lambda q: [h.item_id for h in knowledge_search(
            workspace=workspace, user=user, query=q, top_k=10, mode="websearch", per_item=1,
            include_private=True, include_hidden=False)],
        "keyword / search API (before)": lambda q: items_of(run_search(
            mode="websearch", query=q, filters=filters, limit=40)),
    }
    labels = [wanted for _, wanted in questions]
    print(f"\n{connection.vendor}: {len(questions)} questions ({title_overlap(questions)} share a word with "
          f"their answer's title), model {current_spec().key if current_spec() else 'off'}")
    print(f"{'method':32} {'recall@5':>9} {'MRR@10':>7}   split A (even) / B (odd), recall@5 / MRR@10")
    for name, method in methods.items():
        ranked = []
        for question, _ in questions:
            items = []
            for item_id in method(question):
                key = key_of.get(item_id)
                if key and key not in items:
                    items.append(key)
            ranked.append(items)
        recall, mrr = score(ranked, labels)
        halves = [score(ranked[h::2], labels[h::2]) for h in (0, 1)]
        print(f"{name:32} {recall:9.3f} {mrr:7.3f}   " + " / ".join(f"{r:.3f} / {m:.3f}" for r, m in halves))


def prepare(slug: str, name: str):
    workspace, _ = Workspace.objects.get_or_create(slug=slug, defaults={"name": name})
    return workspace


def throughput(workspace) -> None:
    spec = current_spec()
    texts = [chunk_text_for_embedding(t, c) for t, c in
             KnowledgeChunk.objects.filter(workspace=workspace).order_by("pk").values_list("title", "content")[:128]]
    embed_texts(spec, texts[:2])  # load the model
    batch = settings.KNOWLEDGE_EMBEDDING_BATCH
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        embed_texts(spec, texts[i:i + batch])
    elapsed = time.perf_counter() - started
    print(f"\nembedding throughput ({spec.key}, {settings.KNOWLEDGE_EMBEDDING_THREADS} thread(s), batch {batch}): "
          f"{len(texts) / elapsed:.1f} chunks/s over {len(texts)} demo chunks; load average {os.getloadavg()[0]:.2f}")
    from knowledge.sentences import split_sentences

    sentences = [x for c in KnowledgeChunk.objects.filter(workspace=workspace).order_by("pk")
                 .values_list("content", flat=True)[:128] for x in split_sentences(c)]
    started = time.perf_counter()
    for i in range(0, len(sentences), batch):
        embed_texts(spec, sentences[i:i + batch])
    took = time.perf_counter() - started
    print(f"  their {len(sentences)} sentences (KNOWLEDGE_SENTENCE_VECTORS): {took:.1f} s against {elapsed:.1f} s for "
          f"the chunks, {len(texts) / (elapsed + took):.1f} chunks/s with both; load average {os.getloadavg()[0]:.2f}")


def build_latency_corpus(source, workspace, target: int, user) -> None:
    """``target`` chunks in ``workspace``: shuffled corpus paragraphs, vectors from the
    source chunks' real vectors plus noise (unit length)."""
    import numpy as np

    have = KnowledgeChunk.objects.filter(workspace=workspace).count()
    if have >= target:
        return
    model = embedding_model_for(current_spec())
    src = list(KnowledgeChunk.objects.filter(workspace=source).values_list("pk", "content"))
    base = {}
    with connection.cursor() as cur:
        cur.execute("SELECT chunk_id, embedding FROM knowledge_chunkvector WHERE model_id = %s", [model.pk])
        for chunk_id, blob in cur.fetchall():
            base[chunk_id] = (np.array([float(x) for x in blob.strip("[]").split(",")], dtype=np.float32)
                              if isinstance(blob, str) else np.frombuffer(blob, dtype=np.float32))
    src = [(pk, content) for pk, content in src if pk in base]
    rng = random.Random(7)
    nrng = np.random.default_rng(7)
    started = time.perf_counter()
    while have < target:
        items, chunks, vectors = [], [], []
        for _ in range(min(2000, target - have)):
            picks = rng.sample(src, rng.randint(1, 3))
            body = "\n\n".join(c for _, c in picks)
            title = " ".join(re.findall(r"[A-Za-z]+", body)[:6]) or "Untitled"
            item = KnowledgeItem(id=uuid.uuid4(), workspace=workspace, owner=user, title=title, content=body,
                                 type="note", content_hash=content_hash(title, body))
            items.append(item)
            vec = sum(base[pk] for pk, _ in picks) + nrng.normal(0, 0.02, size=base[picks[0][0]].shape)
            for ordinal, piece in enumerate(chunk_text(body) or [title]):
                chunks.append(KnowledgeChunk(item=item, workspace=workspace, owner_id_copy=user.pk, ordinal=ordinal,
                                             title=title, content=piece))
                v = vec + nrng.normal(0, 0.02, size=vec.shape)
                vectors.append((v / np.linalg.norm(v)).astype(np.float32).tolist())
            have += len(chunk_text(body) or [title])
        with transaction.atomic():
            KnowledgeItem.objects.bulk_create(items, batch_size=2000)
            made = KnowledgeChunk.objects.bulk_create(chunks, batch_size=2000)
        ids = [c.pk for c in made] if made[0].pk else list(
            KnowledgeChunk.objects.filter(item__in=items).order_by("item_id", "ordinal").values_list("pk", flat=True))
        vectors_store(model_id=model.pk, rows=list(zip(ids, vectors, strict=True)))
        print(f"\r  built {have}/{target} chunks ({time.perf_counter() - started:.0f} s)", end="", flush=True)
    print()
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:  # the HNSW build in memory (pgvector warns beyond it)
            cur.execute("SET maintenance_work_mem = '1GB'")
    started = time.perf_counter()
    ensure_index(model_id=model.pk, dimensions=len(vectors[0]))
    print(f"  index built ({time.perf_counter() - started:.0f} s)")
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("VACUUM ANALYZE knowledge_knowledgechunk")
            cur.execute("VACUUM ANALYZE knowledge_chunkvector")
        else:
            cur.execute("INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts) VALUES ('optimize')")
            cur.execute("ANALYZE")
    from knowledge.models import WorkspaceEmbedding

    WorkspaceEmbedding.objects.update_or_create(workspace=workspace, defaults={
        "serving_model": model, "target_model": model, "state": "idle", "embedded": have, "total": have})


def fill_latency_sentences(workspace) -> None:
    """Sentence vectors for the latency workspace's chunks lacking them (``knowledge/sentences.py``):
    as many per chunk as it has sentences, each its chunk's vector plus noise (unit length)."""
    import numpy as np

    from knowledge.models import ChunkSentenceVectors
    from knowledge.sentences import split_sentences

    if not settings.KNOWLEDGE_SENTENCE_VECTORS:
        return
    model = embedding_model_for(current_spec())
    nrng = np.random.default_rng(11)
    started, made, last = time.perf_counter(), 0, 0
    while True:
        chunks = list(KnowledgeChunk.objects.filter(workspace=workspace, pk__gt=last)
                      .exclude(pk__in=ChunkSentenceVectors.objects.filter(model_id=model.pk).values("chunk_id"))
                      .order_by("pk").values_list("pk", "content")[:2000])
        if not chunks:
            break
        last = chunks[-1][0]
        with connection.cursor() as cur:
            ids = [pk for pk, _ in chunks]
            cur.execute("SELECT chunk_id, embedding FROM knowledge_chunkvector WHERE model_id = %s AND chunk_id IN ("
                        + ", ".join(["%s"] * len(ids)) + ")", [model.pk, *ids])
            base = {}
            for chunk_id, blob in cur.fetchall():
                base[chunk_id] = (np.array([float(x) for x in blob.strip("[]").split(",")], dtype=np.float32)
                                  if isinstance(blob, str) else np.frombuffer(blob, dtype=np.float32))
        rows = []
        for pk, content in chunks:
            if pk not in base:
                continue
            n = len(split_sentences(content))
            v = base[pk] + nrng.normal(0, 0.05, size=(n, base[pk].shape[0])).astype(np.float32)
            rows.append(ChunkSentenceVectors(chunk_id=pk, model_id=model.pk, count=n,
                                             vectors=(v / np.linalg.norm(v, axis=1, keepdims=True)).astype("<f4").tobytes()))
        ChunkSentenceVectors.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
        made += len(rows)
        print(f"\r  sentence vectors for {made} chunks ({time.perf_counter() - started:.0f} s)", end="", flush=True)
    print()


def latency(source, target: int, user) -> None:
    workspace = prepare(LATENCY_SLUG, "Retrieval latency benchmark")
    build_latency_corpus(source, workspace, target, user)
    fill_latency_sentences(workspace)
    chunks = KnowledgeChunk.objects.filter(workspace=workspace).count()
    vectors = ChunkVector.objects.filter(chunk__workspace=workspace).count()
    questions = [q for q, _ in load_questions()]
    queries = [questions[i % len(questions)] for i in range(200)]
    for q in queries[:10]:
        knowledge_search(workspace=workspace, user=user, query=q, mode="question", per_item=2)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        knowledge_search(workspace=workspace, user=user, query=q, top_k=8, mode="question", per_item=2)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    print(f"\n{connection.vendor}: {chunks} chunks ({vectors} vectors), 200 hybrid searches (query embedding "
          f"included): p50 {statistics.median(times):.1f} ms, p95 {times[int(0.95 * (len(times) - 1))]:.1f} ms, "
          f"max {times[-1]:.1f} ms; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def latency_ab(user, rounds: int) -> None:
    """PostgreSQL's keyword rank function A/B, interleaved: every labelled question searched
    with ``ts_rank_cd`` and with ``ts_rank`` back to back (the order alternating), ``rounds``
    times, so both sides see the same load."""
    from knowledge import search

    workspace = prepare(LATENCY_SLUG, "Retrieval latency benchmark")
    questions = [q for q, _ in load_questions()]
    shipped = search._PG_RANK
    times: dict[str, list[float]] = {"ts_rank_cd": [], "ts_rank": []}
    try:
        for n, q in enumerate(questions[:10] + questions * rounds):
            for rank in (("ts_rank_cd", "ts_rank") if n % 2 else ("ts_rank", "ts_rank_cd")):
                search._PG_RANK = rank
                t0 = time.perf_counter()
                knowledge_search(workspace=workspace, user=user, query=q, top_k=8, mode="question", per_item=2)
                if n >= 10:
                    times[rank].append((time.perf_counter() - t0) * 1000)
    finally:
        search._PG_RANK = shipped
    print(f"\ninterleaved, {len(questions)} questions x {rounds}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}:")
    for rank, t in times.items():
        t.sort()
        print(f"  {rank:10} p50 {statistics.median(t):.1f} ms, p95 {t[int(0.95 * (len(t) - 1))]:.1f} ms")


def latency_ab_sentences(user, rounds: int) -> None:
    """The sentence re-ranking's cost, interleaved: every labelled question searched with
    ``KNOWLEDGE_SENTENCE_VECTORS`` on and off back to back (the order alternating)."""
    from django.test import override_settings

    workspace = prepare(LATENCY_SLUG, "Retrieval latency benchmark")
    questions = [q for q, _ in load_questions()]
    times: dict[bool, list[float]] = {True: [], False: []}
    for n, q in enumerate(questions[:10] + questions * rounds):
        for on in ((True, False) if n % 2 else (False, True)):
            with override_settings(KNOWLEDGE_SENTENCE_VECTORS=on):
                t0 = time.perf_counter()
                knowledge_search(workspace=workspace, user=user, query=q, top_k=8, mode="question", per_item=2)
                if n >= 10:
                    times[on].append((time.perf_counter() - t0) * 1000)
    print(f"\ninterleaved, sentence re-ranking on/off, {len(questions)} questions x {rounds}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}:")
    for on, t in times.items():
        t.sort()
        print(f"  {'on' if on else 'off':4} p50 {statistics.median(t):.1f} ms, p95 {t[int(0.95 * (len(t) - 1))]:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=int, default=0, help="chunks in the latency workspace (0: skip)")
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--ab-sentences", type=int, default=0, metavar="ROUNDS",
                        help="time the sentence re-ranking on against off, interleaved (needs --latency)")
    parser.add_argument("--ab-rank", type=int, default=0, metavar="ROUNDS",
                        help="PostgreSQL: time ts_rank_cd against ts_rank interleaved (needs --latency)")
    args = parser.parse_args()
    if current_spec() is None:
        print("embeddings are off (KNOWLEDGE_EMBEDDINGS=off)")
        return 2
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench-eval")
    workspace = prepare(EVAL_SLUG, "Retrieval evaluation")
    import_python_reference(workspace=workspace)
    started = time.perf_counter()
    outcome = workspace_embed(workspace_id=workspace.pk)
    print(f"demo corpus embedded: {outcome} ({time.perf_counter() - started:.0f} s)")
    if not args.no_quality:
        quality(workspace, user)
    if args.throughput:
        throughput(workspace)
    if args.latency:
        latency(workspace, args.latency, user)
        if args.ab_rank and connection.vendor == "postgresql":
            latency_ab(user, args.ab_rank)
        if args.ab_sentences:
            latency_ab_sentences(user, args.ab_sentences)
    return 0


if __name__ == "__main__":
    sys.exit(main())
