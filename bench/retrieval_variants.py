"""Quality experiments for hybrid retrieval (issue 56, branch ``qual56``), held-out protocol.

Runs against the database ``bench/retrieval_eval.py`` prepared (``DATABASE_URL``, the demo
corpus embedded in the workspace ``bench-eval``). Everything the shipped search does that a
variant does not touch is the real code: the keyword rankings are ``keyword_rows`` (both
modes), fusion is ``knowledge.selectors.fuse``, ``per_item``/``top_k`` as ``knowledge_search``.
The vector ranking is the exact cosine over the workspace's stored chunk vectors (what
``vec0`` / the exact scan return for the demo workspace), so a variant can change it.

Split A = even-numbered questions (0, 2, …; tune here), B = odd ones (held out). Each row:
grounding (question mode, ≤ 2 chunks per item) and search API (search-box mode, one chunk per
item) recall@5 / MRR@10 on A, B and all.

    DATABASE_URL=sqlite:///var/bench-eval.sqlite3 KNOWLEDGE_EMBEDDING_PROCESS=inline \
        .venv/bin/python bench/retrieval_variants.py [--only NAME]

Sentence vectors (and question vectors) are cached in ``var/retrieval_variants_<vendor>.npz``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KNOWLEDGE_EMBEDDING_PROCESS", "inline")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.db import connection  # noqa: E402

from bench.retrieval_eval import EVAL_SLUG, load_questions, score  # noqa: E402
from chat.models import Workspace  # noqa: E402
from knowledge import selectors  # noqa: E402
from knowledge.embeddings import current_spec, embed_texts  # noqa: E402
from knowledge.models import KnowledgeChunk, KnowledgeItem  # noqa: E402
from knowledge.pydoc_import import SOURCE_PREFIX  # noqa: E402
from knowledge.search import STOP_WORDS, Filters, query_terms  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SENT_RE = re.compile(r"(?<=[.!?:])\s+(?=[A-Z(\"'`*])|\n\s*\n")


def sentences(text: str, window: int) -> list[str]:
    parts = [p.strip() for p in SENT_RE.split(text) if p and p.strip()]
    parts = [p for p in parts if len(p) > 15] or [text]
    if window <= 1:
        return parts
    return [" ".join(parts[i:i + window]) for i in range(0, max(1, len(parts) - window + 1))]


class Lab:
    def __init__(self):
        self.workspace = Workspace.objects.get(slug=EVAL_SLUG)
        self.filters = Filters(workspace_id=self.workspace.pk, user_id=None, include_private=False,
                               include_hidden=True)
        keys = dict(KnowledgeItem.objects.filter(workspace=self.workspace).values_list("pk", "source_path"))
        self.key_of = {str(pk): p.removeprefix(SOURCE_PREFIX) for pk, p in keys.items()}
        self.questions = load_questions()
        self.labels = [w for _, w in self.questions]
        rows = list(KnowledgeChunk.objects.filter(workspace=self.workspace).order_by("pk").values_list(
            "pk", "item_id", "title", "content", "item__type"))
        self.rows = [(pk, item, title, content, 0.0, type_) for pk, item, title, content, type_ in rows]
        self.index = {r[0]: n for n, r in enumerate(self.rows)}
        with connection.cursor() as cur:
            cur.execute("SELECT v.chunk_id, v.embedding FROM knowledge_chunkvector v JOIN knowledge_knowledgechunk c"
                        " ON c.id = v.chunk_id WHERE c.workspace_id = %s", [self.workspace.pk])
            got = dict(cur.fetchall())
        self.C = np.stack([self._vec(got[r[0]]) for r in self.rows])
        self.spec = current_spec()
        self.cache = ROOT / "var" / f"retrieval_variants_{connection.vendor}.npz"
        store = dict(np.load(self.cache, allow_pickle=True)) if self.cache.exists() else {}
        self.store = store
        self.Q = self.embed_cached("questions", [q for q, _ in self.questions])
        # document frequencies of words (for keyword PRF: a chunk's rarest words)
        self.df = Counter()
        for r in self.rows:
            self.df.update(set(query_terms(r[2] + " " + r[3])))
        self._kw_cache: dict = {}

    @staticmethod
    def _vec(blob):
        if isinstance(blob, str):
            return np.array([float(x) for x in blob.strip("[]").split(",")], dtype=np.float32)
        return np.frombuffer(bytes(blob), dtype=np.float32)

    def embed_cached(self, name: str, texts: list[str]) -> np.ndarray:
        key = f"{name}:{len(texts)}"
        if key in self.store and self.store[key].shape[0] == len(texts):
            return self.store[key]
        t0 = time.perf_counter()
        out = []
        for i in range(0, len(texts), 64):
            out.extend(embed_texts(self.spec, texts[i:i + 64]))
        arr = np.array(out, dtype=np.float32)
        print(f"  embedded {len(texts)} texts for {name} in {time.perf_counter() - t0:.0f} s "
              f"({len(texts) / (time.perf_counter() - t0):.1f}/s)", flush=True)
        self.store[key] = arr
        np.savez(self.cache, **self.store)
        return arr

    # --- rankings -------------------------------------------------------------------------
    def keyword(self, query: str, mode: str, fetch: int = 40) -> list:
        key = (query, mode)
        if key not in self._kw_cache:
            self._kw_cache[key] = selectors.keyword_rows(query=query, filters=self.filters, mode=mode, fetch=fetch)
        return self._kw_cache[key]

    def vector_rank(self, sims: np.ndarray, fetch: int = 40) -> list:
        order = np.argsort(-sims, kind="stable")[:fetch]
        return [self.rows[i] for i in order]

    def items(self, rows, top_k: int, per_item: int) -> list[str]:
        keys: list[str] = []
        per: Counter = Counter()
        n = 0
        for row in rows:
            item_id = str(uuid.UUID(str(row[1])))
            if per[item_id] >= per_item:
                continue
            per[item_id] += 1
            n += 1
            key = self.key_of.get(item_id)
            if key and key not in keys:
                keys.append(key)
            if n >= top_k:
                break
        return keys

    def evaluate(self, ranker) -> dict:
        """ranker(i, question, mode) -> fused rows. Returns {(path, split): (recall, mrr)}."""
        out = {}
        for path, mode, top_k, per_item in (("grounding", "question", 20, 2), ("search", "websearch", 10, 1)):
            ranked = [self.items(ranker(i, q, mode), top_k, per_item) for i, (q, _) in enumerate(self.questions)]
            for split, idx in (("A", range(0, len(ranked), 2)), ("B", range(1, len(ranked), 2)),
                               ("all", range(len(ranked)))):
                out[(path, split)] = score([ranked[i] for i in idx], [self.labels[i] for i in idx])
        return out


def hybrid(lab: Lab, i: int, q: str, mode: str, vec: list, kw_query: str | None = None,
           kw_extra: list | None = None) -> list:
    """As ``selectors.hybrid_rows`` with the vector ranking ``vec`` (and optionally another
    keyword query for the OR-ed/question ranking)."""
    kq = kw_query if kw_query is not None else q
    W, V = selectors.KEYWORD_WEIGHT, selectors.VECTOR_WEIGHT
    if mode == "websearch":
        strict = lab.keyword(q, "websearch")
        keyword = lab.keyword(kq, "question")
        return selectors.fuse([(W, strict), (W, keyword), (V, vec)] + (kw_extra or []))
    keyword = lab.keyword(kq, "question")
    return selectors.fuse([(W, keyword), (V, vec)] + (kw_extra or []))


# --- variants -------------------------------------------------------------------------------
def v_baseline(lab):
    sims = lab.Q @ lab.C.T
    return lambda i, q, mode: hybrid(lab, i, q, mode, lab.vector_rank(sims[i]))


def v_vector_only(lab):
    sims = lab.Q @ lab.C.T
    return lambda i, q, mode: lab.vector_rank(sims[i])


def sentence_matrix(lab: Lab, window: int, with_title: bool):
    texts, owner = [], []
    for n, r in enumerate(lab.rows):
        for s in sentences(r[3], window):
            texts.append(f"{r[2]}: {s}" if with_title else s)
            owner.append(n)
    S = lab.embed_cached(f"sent-w{window}-t{int(with_title)}", texts)
    return S, np.array(owner)


def sentence_scores(lab, S, owner):
    """questions × chunks: max sentence similarity of each chunk."""
    sims = lab.Q @ S.T
    best = np.full((lab.Q.shape[0], len(lab.rows)), -1.0, dtype=np.float32)
    np.maximum.at(best.T, owner, sims.T)  # best[:, owner[j]] = max(best, sims[:, j])
    return best


def v_sentence(lab, window=1, with_title=False, beta=0.5, mode_="sum", pool=40):
    """Chunk score = chunk sim + beta·max sentence sim (``sum``), or max of the two
    (``max``), re-ranking the chunk ranking's top ``pool`` (0: every chunk)."""
    S, owner = sentence_matrix(lab, window, with_title)
    best = sentence_scores(lab, S, owner)
    sims = lab.Q @ lab.C.T

    def ranker(i, q, mode):
        base = sims[i]
        combined = base + beta * best[i] if mode_ == "sum" else np.maximum(base, best[i])
        if pool:
            cand = np.argsort(-base, kind="stable")[:pool]
            order = cand[np.argsort(-combined[cand], kind="stable")]
            vec = [lab.rows[j] for j in order]
        else:
            vec = lab.vector_rank(combined)
        return hybrid(lab, i, q, mode, vec)
    return ranker


def v_sentence_rrf(lab, window=1, with_title=False, weight=0.5, pool=40):
    """Sentence ranking (chunks by their best sentence, within the chunk ranking's top
    ``pool``) fused as a third ranking."""
    S, owner = sentence_matrix(lab, window, with_title)
    best = sentence_scores(lab, S, owner)
    sims = lab.Q @ lab.C.T

    def ranker(i, q, mode):
        cand = np.argsort(-sims[i], kind="stable")[:pool] if pool else np.arange(len(lab.rows))
        order = cand[np.argsort(-best[i][cand], kind="stable")][:40]
        return hybrid(lab, i, q, mode, lab.vector_rank(sims[i]), kw_extra=[(weight, [lab.rows[j] for j in order])])
    return ranker


def v_rocchio(lab, alpha=0.5, k=3, source="vector"):
    """q' = q + alpha·mean(top-k chunk vectors) (of the vector ranking, or of the fused
    ranking), normalised, searched again."""
    sims = lab.Q @ lab.C.T

    def ranker(i, q, mode):
        if source == "vector":
            top = np.argsort(-sims[i], kind="stable")[:k]
        else:
            fused = hybrid(lab, i, q, "question", lab.vector_rank(sims[i]))
            top = [lab.index[r[0]] for r in fused[:k]]
        qv = lab.Q[i] + alpha * lab.C[top].mean(axis=0)
        qv = qv / np.linalg.norm(qv)
        return hybrid(lab, i, q, mode, lab.vector_rank(lab.C @ qv))
    return ranker


def v_kw_prf(lab, terms=3, k=3, weight=None):
    """Keyword side: the question plus the ``terms`` rarest words (df ≥ 2) of the fused top
    ``k`` chunks, for the OR-ed keyword ranking."""
    sims = lab.Q @ lab.C.T

    def ranker(i, q, mode):
        vec = lab.vector_rank(sims[i])
        fused = hybrid(lab, i, q, "question", vec)
        asked = set(query_terms(q))
        cands = Counter()
        for r in fused[:k]:
            for w in set(query_terms(r[2] + " " + r[3])):
                if w not in STOP_WORDS and w not in asked and len(w) > 2 and not w.isdigit() and lab.df[w] >= 2:
                    cands[w] += 1
        # words in several of the top chunks first, then rarest
        extra = sorted(cands, key=lambda w: (-cands[w], lab.df[w], w))[:terms]
        return hybrid(lab, i, q, mode, vec, kw_query=q + " " + " ".join(extra))
    return ranker


SCAFFOLD = [
    r"\bis there (?:a|any) way (?:to|of)\b", r"\bwhat happens (?:when|if)\b", r"\bhow (?:do|can|should|would) (?:i|you|we)\b",
    r"\bwhat(?:'s| is) the (?:way|syntax|rule|difference)\b", r"\bis it possible to\b", r"\bcan (?:i|you|we)\b",
    r"\bwhat does\b", r"\bwhat do\b", r"\bhow does\b", r"\bhow is\b", r"\bwhy (?:does|do|is|can't|cannot)\b",
    r"\bin python\b", r"\bpython\b", r"\bi want to\b", r"\bi need to\b", r"\bi'm\b", r"\bdoes python\b",
    r"\bsomething\b", r"\bsomehow\b", r"\bactually\b", r"\bexactly\b", r"\bwork\b", r"\bwhen\b", r"\bhappens\b",
]


def strip_scaffolding(q: str, patterns) -> str:
    out = q
    for p in patterns:
        out = re.sub(p, " ", out, flags=re.IGNORECASE)
    out = re.sub(r"\s+", " ", out).strip(" ?")
    return out if query_terms(out) else q


def v_normalise(lab, patterns=SCAFFOLD, websearch_too=False):
    sims = lab.Q @ lab.C.T

    def ranker(i, q, mode):
        kq = strip_scaffolding(q, patterns)
        vec = lab.vector_rank(sims[i])
        if mode == "websearch" and websearch_too:
            W, V = selectors.KEYWORD_WEIGHT, selectors.VECTOR_WEIGHT
            return selectors.fuse([(W, lab.keyword(kq, "websearch")), (W, lab.keyword(kq, "question")), (V, vec)])
        return hybrid(lab, i, q, mode, vec, kw_query=kq)
    return ranker


def v_centre(lab, shrink=1.0):
    """Anisotropy correction: subtract the corpus's mean chunk vector from chunks and
    question (``shrink``× of it), cosine after."""
    m = lab.C.mean(axis=0) * shrink
    C = lab.C - m
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    Q = lab.Q - m
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    sims = Q @ C.T
    return lambda i, q, mode: hybrid(lab, i, q, mode, lab.vector_rank(sims[i]))


def v_multiquery(lab, patterns=SCAFFOLD, weight=0.5):
    """The question's vector plus the vector of its scaffolding-stripped form (averaged)."""
    stripped = [strip_scaffolding(q, patterns) for q, _ in lab.questions]
    S = lab.embed_cached("questions-stripped", stripped)

    def ranker(i, q, mode):
        qv = lab.Q[i] + weight * S[i]
        qv /= np.linalg.norm(qv)
        return hybrid(lab, i, q, mode, lab.vector_rank(lab.C @ qv))
    return ranker


def v_sentence_kw_prf(lab, beta=0.5, terms=2, k=3):
    """Sentence re-ranking (window 1, no title, sum) and the keyword feedback together."""
    S, owner = sentence_matrix(lab, 1, False)
    best = sentence_scores(lab, S, owner)
    sims = lab.Q @ lab.C.T

    def ranker(i, q, mode):
        combined = sims[i] + beta * best[i]
        cand = np.argsort(-sims[i], kind="stable")[:40]
        vec = [lab.rows[j] for j in cand[np.argsort(-combined[cand], kind="stable")]]
        fused = hybrid(lab, i, q, "question", vec)
        asked = set(query_terms(q))
        cands = Counter()
        for r in fused[:k]:
            for w in set(query_terms(r[2] + " " + r[3])):
                if w not in STOP_WORDS and w not in asked and len(w) > 2 and not w.isdigit() and lab.df[w] >= 2:
                    cands[w] += 1
        extra = sorted(cands, key=lambda w: (-cands[w], lab.df[w], w))[:terms]
        return hybrid(lab, i, q, mode, vec, kw_query=q + " " + " ".join(extra))
    return ranker


def fmt(res) -> str:
    parts = []
    for path in ("grounding", "search"):
        parts.append(" | ".join(f"{res[(path, s)][0]:.3f} / {res[(path, s)][1]:.3f}" for s in ("A", "B", "all")))
    return " | ".join(parts)


def variants():
    yield "baseline (shipped)", v_baseline, {}
    yield "vector alone", v_vector_only, {}
    for window in (1, 2):
        for with_title in (False, True):
            for beta in (0.3, 0.5, 1.0):
                yield f"sentence w{window} title{int(with_title)} sum beta {beta}", v_sentence, dict(
                    window=window, with_title=with_title, beta=beta)
            yield f"sentence w{window} title{int(with_title)} max", v_sentence, dict(
                window=window, with_title=with_title, mode_="max")
            yield f"sentence w{window} title{int(with_title)} sum 0.5 all chunks", v_sentence, dict(
                window=window, with_title=with_title, beta=0.5, pool=0)
            for weight in (0.3, 0.6, 1.0):
                yield f"sentence w{window} title{int(with_title)} rrf {weight}", v_sentence_rrf, dict(
                    window=window, with_title=with_title, weight=weight)
    for source in ("vector", "fused"):
        for k in (3, 5):
            for alpha in (0.3, 0.6, 1.0):
                yield f"rocchio {source} k{k} alpha {alpha}", v_rocchio, dict(alpha=alpha, k=k, source=source)
    for k in (3, 5):
        for terms in (2, 4, 8):
            yield f"keyword prf k{k} terms {terms}", v_kw_prf, dict(k=k, terms=terms)
    yield "normalise keyword query", v_normalise, {}
    yield "normalise keyword query (search boxes too)", v_normalise, dict(websearch_too=True)
    for terms in (1, 2, 3):
        yield f"combined: sentence sum 0.5 + keyword prf k3 terms {terms}", v_sentence_kw_prf, dict(terms=terms)
    yield "keyword prf k3 terms 1", v_kw_prf, dict(k=3, terms=1)
    yield "keyword prf k3 terms 3", v_kw_prf, dict(k=3, terms=3)
    for shrink in (0.5, 1.0):
        yield f"centre vectors {shrink}", v_centre, dict(shrink=shrink)
    for weight in (0.3, 0.6, 1.0):
        yield f"multi-query stripped {weight}", v_multiquery, dict(weight=weight)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="run the variants whose name contains this")
    parser.add_argument("--skip", default="", help="leave out the variants whose name contains this")
    args = parser.parse_args()
    lab = Lab()
    print(f"{connection.vendor}: {len(lab.rows)} chunks, {len(lab.questions)} questions; A = even, B = odd")
    print("| variant | grounding A | B | all | search API A | B | all |")
    print("|---|---|---|---|---|---|---|")
    for name, make, kwargs in variants():
        if args.only and args.only not in name and not name.startswith("baseline"):
            continue
        if args.skip and args.skip in name:
            continue
        res = lab.evaluate(make(lab, **kwargs))
        print(f"| {name} | {fmt(res)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
