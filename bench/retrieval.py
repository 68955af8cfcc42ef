"""Retrieval benchmark: ranked full-text search over N knowledge items.

Builds N items from the demo corpus (the Python Language Reference shipped with CPython,
``pydoc_data.topics``: its paragraphs shuffled, 1–4 per item, 5 % private, 5 % hidden) in a
workspace of their own, then times 200 searches of 1–4 consecutive corpus words through the
real selector (``knowledge.selectors.knowledge_search``), in both query modes:

* ``websearch`` — the search API and knowledge pages (AND semantics);
* ``question``  — grounding and the ``search_knowledge`` tool (OR + adjacent phrases).

Prints p50/p95/max per mode and size. The database is the one ``DATABASE_URL`` names (use a
scratch database: the bench adds up to 100 k items to it)::

    # PostgreSQL
    createdb -h 127.0.0.1 -U postgres chatplatform_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/chatplatform_bench .venv/bin/python bench/retrieval.py
    # SQLite
    DATABASE_URL=sqlite:///var/bench.sqlite3 .venv/bin/python bench/retrieval.py

Options: ``--sizes 10000,100000`` (built incrementally, kept between runs: a second run only
times), ``--queries 200``, ``--seed 7``, ``--rebuild`` (drop the bench workspace first).
Target (issue 6, 2 cores): at 100 k items on PostgreSQL p50 ≤ 20 ms and p95 ≤ 60 ms.
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

import django  # noqa: E402

django.setup()

from pydoc_data.topics import topics  # noqa: E402

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from chat.models import Workspace  # noqa: E402
from knowledge.chunking import chunk_text  # noqa: E402
from knowledge.models import KnowledgeChunk, KnowledgeItem  # noqa: E402
from knowledge.selectors import knowledge_search  # noqa: E402
from knowledge.services import content_hash  # noqa: E402

BENCH_SLUG = "bench-retrieval"
BATCH = 2000
WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def paragraphs() -> list[str]:
    out = []
    for text in topics.values():
        for para in re.split(r"\n\s*\n", text):
            para = para.strip()
            if len(para) >= 60 and not re.fullmatch(r"[*=\-~^\s]+", para):
                out.append(para)
    return out


def build(workspace, users, target: int, paras: list[str], rng: random.Random) -> None:
    have = KnowledgeItem.objects.filter(workspace=workspace).count()
    started = time.perf_counter()
    while have < target:
        n = min(BATCH, target - have)
        items, chunks = [], []
        for _ in range(n):
            body = "\n\n".join(rng.sample(paras, rng.randint(1, 4)))
            words = WORD_RE.findall(body)[: rng.randint(3, 8)]
            title = " ".join(words)[:300] or "Untitled"
            roll = rng.random()
            owner = rng.choice(users)
            item = KnowledgeItem(
                id=uuid.uuid4(), workspace=workspace, owner=owner, title=title, content=body,
                type=rng.choice(["note", "reference", "howto", "fact"]), tags=[rng.choice(["python", "ops", "docs"])],
                content_hash=content_hash(title, body), is_private=roll < 0.05, is_hidden=0.05 <= roll < 0.10,
            )
            items.append(item)
            for ordinal, piece in enumerate(chunk_text(body) or [title]):
                chunks.append(KnowledgeChunk(
                    item=item, workspace=workspace, owner_id_copy=owner.pk, is_private=item.is_private, is_hidden=item.is_hidden,
                    ordinal=ordinal, title=title, content=piece,
                ))
        with transaction.atomic():
            KnowledgeItem.objects.bulk_create(items, batch_size=BATCH)
            KnowledgeChunk.objects.bulk_create(chunks, batch_size=BATCH)
        have += n
        print(f"\r  built {have}/{target} items ({time.perf_counter() - started:.0f} s)", end="", flush=True)
    print()
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("VACUUM ANALYZE knowledge_knowledgechunk")
            cur.execute("VACUUM ANALYZE knowledge_knowledgeitem")
        else:
            cur.execute("INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts) VALUES ('optimize')")
            cur.execute("ANALYZE")


def make_queries(paras: list[str], count: int, rng: random.Random) -> list[str]:
    queries = []
    while len(queries) < count:
        words = WORD_RE.findall(rng.choice(paras))
        k = rng.randint(1, 4)
        if len(words) < k:
            continue
        start = rng.randrange(0, len(words) - k + 1)
        queries.append(" ".join(words[start:start + k]))
    return queries


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def time_searches(workspace, user, queries: list[str], mode: str) -> dict:
    for q in queries[:10]:  # warm caches and the connection
        knowledge_search(workspace=workspace, user=user, query=q, mode=mode, include_private=True)
    times, found = [], []
    for q in queries:
        t0 = time.perf_counter()
        hits = knowledge_search(workspace=workspace, user=user, query=q, top_k=8, mode=mode, include_private=True)
        times.append((time.perf_counter() - t0) * 1000)
        found.append(len(hits))
    return {"p50": statistics.median(times), "p95": pct(times, 95), "max": max(times),
            "hits": statistics.mean(found)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    backend = connection.vendor
    rng = random.Random(args.seed)
    paras = paragraphs()
    User = get_user_model()
    users = [User.objects.get_or_create(username=f"bench{i}")[0] for i in range(5)]
    if args.rebuild:
        Workspace.objects.filter(slug=BENCH_SLUG).delete()
    workspace, _ = Workspace.objects.get_or_create(slug=BENCH_SLUG, defaults={"name": "Retrieval benchmark"})
    queries = make_queries(paras, args.queries, random.Random(args.seed + 1))
    print(f"backend: {backend}; corpus: {len(paras)} paragraphs; {len(queries)} queries of 1-4 words")
    for size in [int(s) for s in args.sizes.split(",")]:
        have = KnowledgeItem.objects.filter(workspace=workspace).count()
        if have > size:
            print(f"N={size}: the bench workspace already holds {have} items; use --rebuild")
            continue
        build(workspace, users, size, paras, rng)
        chunks = KnowledgeChunk.objects.filter(workspace=workspace).count()
        for mode in ("websearch", "question"):
            r = time_searches(workspace, users[0], queries, mode)
            print(f"{backend:10} N={size:>6} items ({chunks} chunks) {mode:9}: "
                  f"p50 {r['p50']:6.1f} ms  p95 {r['p95']:6.1f} ms  max {r['max']:6.1f} ms  (avg {r['hits']:.1f} hits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
