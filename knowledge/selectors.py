"""Reads for the knowledge base, including ranked full-text retrieval.

``knowledge_search`` runs inside the database's full-text index with the workspace and
visibility filters in the same SQL (never post-filtered in Python):

* PostgreSQL — a stored, weighted ``tsvector`` (title 'A' with the ``simple`` config so
  short titles such as "with" keep their words; content 'B' with ``english`` stemming), a
  GIN index, the question's words OR-ed, ranked with ``ts_rank_cd`` (title 'A' weighted 10×
  content 'B', as in SQLite; the default weights let a long passage repeating "statement"
  outrank the topic titled "The with statement").
* SQLite — an FTS5 table (porter stemming) kept in sync by triggers, ranked with ``bm25``
  (title weighted 10×). The user's words are quoted, so FTS5 syntax never raises.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from django.db import connection
from django.db.models import Q, QuerySet
from django.http import Http404

from .models import KnowledgeItem

MAX_QUERY_TERMS = 32
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass
class Hit:
    """One retrieved chunk. ``score``: higher is better (backend-specific scale)."""

    item_id: str
    chunk_id: int
    title: str
    snippet: str
    score: float
    type: str = ""


def query_terms(query: str) -> list[str]:
    """The distinct words of ``query`` (letters and digits only), at most 32, in order."""
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(query.lower()):
        seen.setdefault(word, None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


def knowledge_search(
    *,
    workspace_id: int,
    user_id: int | None,
    query: str,
    top_k: int = 8,
    include_private: bool = False,
    per_item: int | None = None,
) -> list[Hit]:
    """Top ``top_k`` chunks of ``workspace_id`` for ``query``, best first.

    The question's words are OR-ed, and each pair of adjacent words also counts as a phrase,
    so "the with statement" finds the topic titled that way even though "with" alone is in
    almost every text. Visibility: hidden items are included (AI-OK); private items only
    when ``include_private`` and only those owned by ``user_id``. ``per_item`` keeps at most
    that many chunks of one item. An empty query or one with no words → ``[]``. ``top_k``
    is clamped to 1..50.
    """
    terms = query_terms(query or "")
    if not terms:
        return []
    top_k = max(1, min(int(top_k), 50))
    fetch = top_k * 4 if per_item else top_k
    private_ok = bool(include_private and user_id)
    if connection.vendor == "postgresql":
        rows = _search_postgres(terms, workspace_id, user_id, private_ok, fetch)
    else:
        rows = _search_sqlite(terms, workspace_id, user_id, private_ok, fetch)
    hits: list[Hit] = []
    per: dict[str, int] = {}
    for r in rows:
        item_id = str(uuid.UUID(str(r[1])))  # SQLite returns hex text, PostgreSQL a UUID
        if per_item and per.get(item_id, 0) >= per_item:
            continue
        per[item_id] = per.get(item_id, 0) + 1
        hits.append(Hit(item_id=item_id, chunk_id=r[0], title=r[2], snippet=r[3], score=float(r[4]), type=r[5]))
        if len(hits) >= top_k:
            break
    return hits


def _bigrams(terms: list[str]) -> list[tuple[str, str]]:
    return list(zip(terms, terms[1:], strict=False))


def _search_sqlite(terms, workspace_id, user_id, private_ok, top_k):
    match = " OR ".join([f'"{t}"' for t in terms] + [f'"{a} {b}"' for a, b in _bigrams(terms)])
    sql = """
        SELECT c.id, c.item_id, c.title, c.content, -bm25(knowledge_chunk_fts, 10.0, 1.0) AS score, i.type
        FROM knowledge_chunk_fts
        JOIN knowledge_knowledgechunk c ON c.id = knowledge_chunk_fts.rowid
        JOIN knowledge_knowledgeitem i ON i.id = c.item_id
        WHERE knowledge_chunk_fts MATCH %s
          AND c.workspace_id = %s
          AND (c.is_private = 0 OR (%s AND c.owner_id_copy = %s))
        ORDER BY bm25(knowledge_chunk_fts, 10.0, 1.0)
        LIMIT %s
    """
    with connection.cursor() as cur:
        cur.execute(sql, [match, workspace_id, 1 if private_ok else 0, user_id or -1, top_k])
        return cur.fetchall()


def _search_postgres(terms, workspace_id, user_id, private_ok, top_k):
    text = " | ".join(terms + [f"({a} <-> {b})" for a, b in _bigrams(terms)])
    sql = """
        SELECT c.id, c.item_id, c.title, c.content,
               ts_rank_cd('{0.01, 0.02, 0.1, 1.0}'::float4[], c.search_vector, q.query) AS score, i.type
        FROM knowledge_knowledgechunk c
        JOIN knowledge_knowledgeitem i ON i.id = c.item_id,
             (SELECT to_tsquery('english', %s) || to_tsquery('simple', %s) AS query) q
        WHERE c.search_vector @@ q.query
          AND c.workspace_id = %s
          AND (NOT c.is_private OR (%s AND c.owner_id_copy = %s))
        ORDER BY score DESC, c.id
        LIMIT %s
    """
    with connection.cursor() as cur:
        cur.execute(sql, [text, text, workspace_id, private_ok, user_id or -1, top_k])
        return cur.fetchall()


def knowledge_item_list_for_user(*, user, workspace_id=None) -> QuerySet[KnowledgeItem]:
    """Items the user may see in lists: their workspaces, not hidden, private only if own."""
    qs = KnowledgeItem.objects.filter(workspace__memberships__user=user, is_hidden=False).filter(
        Q(is_private=False) | Q(owner=user)
    )
    if workspace_id:
        qs = qs.filter(workspace_id=workspace_id)
    return qs.distinct()


def knowledge_item_get_for_user(*, user, item_id) -> KnowledgeItem:
    """Http404 unless the user's workspace holds it and (if private) the user owns it."""
    try:
        item = KnowledgeItem.objects.get(pk=item_id, workspace__memberships__user=user)
    except Exception as exc:
        raise Http404("No such knowledge item.") from exc
    if item.is_private and item.owner_id != user.pk:
        raise Http404("No such knowledge item.")
    return item
