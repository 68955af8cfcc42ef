"""Reads for the knowledge base: ranked retrieval, lists, permission-checked fetches and the
write policy.

Visibility (DESIGN §1 ShadowBrain row, §4):

* items are shared within their workspace; a user sees only the workspaces they belong to;
* ``is_hidden`` items are left out of lists (and of the search API unless asked for) but are
  used by the AI (grounding and ``search_knowledge``) and reachable by id, so a citation
  always opens;
* ``is_private`` items are seen only by their owner — anyone else gets a 404 everywhere —
  and retrieval leaves them out unless ``include_private``, and then only the *caller's*
  own, never another user's.

Write policy (``knowledge_can_create`` / ``knowledge_item_can_edit``): viewers read only
(rank below the seeded ``member`` rank); members create items and edit or delete their own;
workspace admins edit or delete any item of the workspace they can see.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404

from chat.models import Membership, Workspace
from chat.selectors import membership_get, memberships_for_user

from .models import DEFAULT_SEARCH_LANGUAGE, KnowledgeChunk, KnowledgeItem, KnowledgeSettings
from .search import MAX_QUERY_TERMS, STOP_WORDS, Filters, parse_websearch, query_terms, run_search

__all__ = [
    "MAX_QUERY_TERMS", "MAX_TOP_K", "MEMBER_RANK", "Hit", "knowledge_can_create", "knowledge_item_can_edit",
    "knowledge_item_get_for_user", "knowledge_item_list_for_user", "knowledge_search",
    "knowledge_search_for_user", "knowledge_search_language", "query_terms",
]

MAX_TOP_K = 50
# Roles ranked below the seeded "member" role (viewer: 10, member: 20) only read knowledge.
MEMBER_RANK = 20


@dataclass
class Hit:
    """One retrieved chunk. ``score``: higher is better (backend-specific scale);
    ``snippet``: the chunk's whole text (≤ ~1.7 k chars)."""

    item_id: str
    chunk_id: int
    title: str
    snippet: str
    score: float
    type: str = ""
    workspace_id: int | None = None


def _pk(obj) -> int | None:
    if obj is None:
        return None
    return obj if isinstance(obj, int) else obj.pk


def knowledge_search(
    *,
    workspace: Workspace | int,
    user=None,
    query: str,
    top_k: int = 8,
    include_private: bool = False,
    types: list[str] | tuple[str, ...] | None = None,
    tags: list[str] | tuple[str, ...] | None = None,
    include_hidden: bool = True,
    mode: str = "question",
    per_item: int | None = None,
    scope: dict | None = None,
) -> list[Hit]:
    """Top ``top_k`` chunks of ``workspace`` (a Workspace or its pk) for ``query``, best first.

    ``scope`` (a chat assistant's knowledge scope, ``agents.presets``): ``{"tags": [...],
    "items": [item ids]}`` keeps only items carrying one of the tags or listed; None: all.

    ``user`` (a User, its pk or None) is whose private items ``include_private`` adds — only
    theirs. ``include_hidden`` (default True: the AI's view) keeps hidden items. ``types``
    and ``tags`` narrow to items of any of those types / carrying any of those tags.
    ``mode``: ``"question"`` (natural language) or ``"websearch"`` (the search boxes: a query
    using the syntax — ``"phrase"``, ``or``, ``-word`` — is answered by it, AND semantics;
    plain words are answered like a question); see ``hybrid_rows`` and ``knowledge/search.py``. ``per_item`` keeps at most that many chunks of one item.
    ``top_k`` is clamped to 1..50. A query without words → ``[]``; never raises for odd
    input (FTS5 / tsquery syntax in the query is neutralised).
    """
    top_k = max(1, min(int(top_k), MAX_TOP_K))
    filters = Filters(
        workspace_id=_pk(workspace),
        user_id=_pk(user),
        include_private=include_private,
        include_hidden=include_hidden,
        types=tuple(t for t in (types or ()) if t),
        tags=tuple(t.lower() for t in (tags or ()) if t),
    )
    if scope is not None:
        filters = _scoped(filters, scope)
    rows = hybrid_rows(query=query or "", filters=filters, mode=mode, fetch=max(top_k * 4 if per_item else top_k,
                                                                               HYBRID_POOL))
    hits: list[Hit] = []
    per: dict[str, int] = {}
    for chunk_id, item_pk, title, content, score, type_ in rows:
        item_id = str(uuid.UUID(str(item_pk)))  # SQLite returns hex text, PostgreSQL a UUID
        if per_item and per.get(item_id, 0) >= per_item:
            continue
        per[item_id] = per.get(item_id, 0) + 1
        hits.append(Hit(item_id=item_id, chunk_id=chunk_id, title=title, snippet=content, score=float(score),
                        type=type_, workspace_id=filters.workspace_id))
        if len(hits) >= top_k:
            break
    return hits


TITLE_RERANK_POOL = 40  # question mode: candidates looked at for the title re-rank
# Fusion (tuned on bench/retrieval_eval.py's labelled questions): each ranking gives its n-th
# candidate WEIGHT / (RRF_K + n). A small RRF_K lets the first places of a ranking count; the
# keyword ranking weighs 0.3 of the vector one — on natural questions its words are the asker's,
# not the document's, and its first places are right less often (bench/retrieval_eval.py: keyword
# alone recall@5 0.70 / 0.56 on SQLite / PostgreSQL against 0.85 for vectors alone).
HYBRID_POOL = 40  # candidates taken from each ranking before fusion (more when a caller needs more)
RRF_K = 5
KEYWORD_WEIGHT = 0.3
VECTOR_WEIGHT = 1.0


def uses_websearch_syntax(query: str) -> bool:
    """Whether a search-box query asks for what only the web-search syntax gives: a
    ``"phrase"`` or a ``-word``. (``or`` needs no strict mode: the question ranking ORs the
    words anyway, and natural questions say "or" all the time.)"""
    return '"' in query or any(t.startswith("-") and len(t) > 1 for t in query.split())


def keyword_rows(*, query: str, filters: Filters, mode: str, fetch: int) -> list:
    """Keyword candidates, best first (``knowledge/search.py``; question mode re-ranked by
    title)."""
    if mode == "question":
        return rerank_by_title(run_search(mode="question", query=query, filters=filters,
                                          limit=max(fetch, TITLE_RERANK_POOL)), query)
    return run_search(mode=mode, query=query, filters=filters, limit=fetch)


def vector_rows(*, query: str, filters: Filters, fetch: int) -> list:
    """Vector candidates, nearest first, as result rows; ``[]`` when embeddings are off, the
    workspace has no vectors yet or the model cannot answer (logged)."""
    return vector_search_start(query=query, filters=filters).rows(fetch=fetch)


class PendingVectorSearch:
    """A vector search whose query embedding runs in the background while the caller's
    thread does other work (the keyword query); ``rows()`` finishes it in the caller's
    thread (the database is only used there)."""

    def __init__(self, filters: Filters, query_model=None, pending=None):
        self.filters = filters
        self.query_model = query_model
        self.pending = pending

    def rows(self, *, fetch: int) -> list:
        """The ``fetch`` nearest chunks the filters allow, re-ranked by their sentence
        vectors (``knowledge/sentences.py``) when ``KNOWLEDGE_SENTENCE_VECTORS``."""
        from django.conf import settings

        from .sentences import rerank, sentences_for
        from .vectors import vector_candidates_scored

        if self.pending is None:
            return []
        vector = self.pending.result()
        if vector is None:
            return []
        model_id, dimensions = self.query_model.model_id, self.query_model.dimensions
        scored = vector_candidates_scored(model_id=model_id, dimensions=dimensions, vector=vector,
                                          filters=self.filters, limit=fetch)
        if not scored:
            return []
        if settings.KNOWLEDGE_SENTENCE_VECTORS:
            ids = rerank(query=vector, candidates=scored, weight=settings.KNOWLEDGE_SENTENCE_WEIGHT,
                         sentences=sentences_for(model_id=model_id, chunk_ids=[c for c, _ in scored],
                                                 dimensions=dimensions))
        else:
            ids = [c for c, _ in scored]
        by_id = {row[0]: row for row in KnowledgeChunk.objects.filter(pk__in=ids).values_list(
            "pk", "item_id", "title", "content", "item__type")}
        return [(*by_id[i][:4], 0.0, by_id[i][4]) for i in ids if i in by_id]


def vector_search_start(*, query: str, filters: Filters) -> PendingVectorSearch:
    """Start a vector search: the workspace's model is looked up here and the query's
    embedding starts in a pool thread (``embedding_jobs.embed_query_start``)."""
    from .embedding_jobs import embed_query_start, query_model_for

    if not query.strip():
        return PendingVectorSearch(filters)
    query_model = query_model_for(filters.workspace_id)
    if query_model is None:
        return PendingVectorSearch(filters)
    return PendingVectorSearch(filters, query_model, embed_query_start(query_model, query))


def fuse(rankings: list[tuple[float, list]]) -> list:
    """Weighted reciprocal rank fusion of ``(weight, rows)`` rankings: each row scores
    Σ weight / (RRF_K + rank) over the rankings it is in (rank from 1); best first, ties by
    first appearance. Rows are result rows ``(chunk_id, item_id, title, content, score,
    type)``; the fused score replaces ``score``."""
    scores: dict[int, float] = {}
    rows: dict[int, tuple] = {}
    for weight, ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            scores[row[0]] = scores.get(row[0], 0.0) + weight / (RRF_K + rank)
            rows.setdefault(row[0], row)
    order = sorted(scores, key=lambda chunk_id: -scores[chunk_id])
    return [(*rows[c][:4], scores[c], rows[c][5]) for c in order]


def hybrid_rows(*, query: str, filters: Filters, mode: str, fetch: int) -> list:
    """The one ranking every caller uses (grounding, ``search_knowledge``, the search API,
    the knowledge pages, ``/mcp/``): keyword and vector candidates — both filtered by the
    caller's visibility inside their SQL — fused by weighted reciprocal rank.

    ``"question"``: keyword (words OR-ed) and vector candidates fused.
    ``"websearch"`` (the search boxes): a query using ``"phrases"`` or ``-word`` gets exactly
    what the syntax asks for (AND, phrases, ``or``, ``-word``), its matches ordered by their
    keyword rank fused with their vector rank; nothing when nothing matches. A query of
    plain words is ranked as a question with one more ranking fused in, the chunks holding
    every word (web-search AND), which therefore come first — and a natural question never
    comes back empty because one of its words is missing. No positive word → nothing."""
    if mode == "websearch":
        if not parse_websearch(query):
            return []
        pending = vector_search_start(query=query, filters=filters)  # embeds while the keywords run
        strict = keyword_rows(query=query, filters=filters, mode="websearch", fetch=fetch)
        if uses_websearch_syntax(query):
            vector = pending.rows(fetch=max(fetch, HYBRID_POOL))
            allowed = {row[0] for row in strict}
            vector = [row for row in vector if row[0] in allowed]
            return fuse([(KEYWORD_WEIGHT, strict), (VECTOR_WEIGHT, vector)]) if vector else strict
        keyword = keyword_rows(query=query, filters=filters, mode="question", fetch=fetch)
        vector = pending.rows(fetch=max(fetch, HYBRID_POOL))
        return fuse([(KEYWORD_WEIGHT, strict), (KEYWORD_WEIGHT, keyword), (VECTOR_WEIGHT, vector)])
    if mode != "question":
        raise ValueError(f"unknown search mode {mode!r}")
    pending = vector_search_start(query=query, filters=filters)  # embeds while the keywords run
    keyword = keyword_rows(query=query, filters=filters, mode=mode, fetch=fetch)
    vector = pending.rows(fetch=max(fetch, HYBRID_POOL))
    if not vector:
        return keyword
    return fuse([(KEYWORD_WEIGHT, keyword), (VECTOR_WEIGHT, vector)])


def rerank_by_title(rows: list, query: str) -> list:
    """Question mode: items whose title the question names completely come first.

    A question such as "How does the with statement work?" names the title "The with
    statement" word for word, while "With Statement Context Managers" only shares two of its
    words — but full-text ranking sees both titles match the phrase. Chunks whose title's
    content words are all in the question keep their relative order and move ahead; within
    such an item the earliest chunk (its introduction) leads. Visibility was applied in the
    SQL; this only reorders what it returned.
    """
    def base(word: str) -> str:  # "lambdas" names the title "Lambdas" as "lambda" does
        return word[:-1] if len(word) > 3 and word.endswith("s") else word

    asked = {base(w) for w in query_terms(query)}
    promoted = []
    for row in rows:
        title_words = [base(w) for w in query_terms(row[2]) if w not in STOP_WORDS]
        if title_words and all(w in asked for w in title_words):
            promoted.append(row)
    if not promoted:
        return rows
    ordinals = dict(KnowledgeChunk.objects.filter(pk__in=[r[0] for r in promoted]).values_list("pk", "ordinal"))
    first_seen: dict = {}
    for position, row in enumerate(promoted):
        first_seen.setdefault(row[1], position)
    promoted.sort(key=lambda r: (first_seen[r[1]], ordinals.get(r[0], 0)))
    chosen = {r[0] for r in promoted}
    return promoted + [r for r in rows if r[0] not in chosen]


def _scoped(filters: Filters, scope: dict) -> Filters:
    """``filters`` narrowed to a knowledge scope ``{"tags", "items"}`` (ids that are not
    UUIDs are dropped: they match nothing)."""
    items = []
    for raw in scope.get("items") or ():
        try:
            items.append(str(uuid.UUID(str(raw))))
        except ValueError:
            continue
    return dataclasses.replace(filters, scoped=True, scope_items=tuple(items),
                               scope_tags=tuple(str(t).lower() for t in scope.get("tags") or () if t))


def knowledge_search_for_user(
    *,
    user,
    query: str,
    workspace: Workspace | None = None,
    top_k: int = 8,
    types: list[str] | None = None,
    tags: list[str] | None = None,
    include_private: bool = True,
    include_hidden: bool = False,
    mode: str = "websearch",
) -> list[Hit]:
    """What ``user`` finds when searching: ``workspace`` (already permission-checked) or
    every workspace they belong to, merged by score. Defaults match the knowledge pages:
    the caller's own private items in, hidden items out, one hit per item, web-search
    syntax."""
    if workspace is not None:
        workspace_ids = [workspace.pk]
    else:
        workspace_ids = list(memberships_for_user(user=user).values_list("workspace_id", flat=True))
    hits: list[Hit] = []
    for workspace_id in workspace_ids:
        hits.extend(
            knowledge_search(
                workspace=workspace_id, user=user, query=query, top_k=top_k, include_private=include_private,
                types=types, tags=tags, include_hidden=include_hidden, mode=mode, per_item=1,
            )
        )
    if len(workspace_ids) > 1:
        hits.sort(key=lambda h: -h.score)
    return hits[: max(1, min(int(top_k), MAX_TOP_K))]


def knowledge_search_language(*, workspace: Workspace | int) -> str:
    """The workspace's PostgreSQL text search configuration (``english`` by default)."""
    value = (
        KnowledgeSettings.objects.filter(workspace_id=_pk(workspace)).values_list("search_language", flat=True).first()
    )
    return value or DEFAULT_SEARCH_LANGUAGE


def _tags_q(tags: list[str]) -> Q:
    """Items carrying any of ``tags`` (a JSON list), on either backend."""
    if connection.vendor == "postgresql":
        q = Q()
        for tag in tags:
            q |= Q(tags__contains=[tag])
        return q
    placeholders = ", ".join(["%s"] * len(tags))
    return Q(pk__in=RawSQL(
        f"SELECT i.id FROM knowledge_knowledgeitem i, json_each(i.tags) t WHERE t.value IN ({placeholders})",
        list(tags),
    ))


def knowledge_item_list_for_user(
    *,
    user,
    workspace: Workspace | None = None,
    types: list[str] | None = None,
    tags: list[str] | None = None,
    include_hidden: bool = False,
) -> QuerySet[KnowledgeItem]:
    """Items ``user`` may see in lists, newest first: their workspaces (or ``workspace``),
    not hidden unless ``include_hidden``, private only their own."""
    qs = KnowledgeItem.objects.filter(
        workspace__in=memberships_for_user(user=user).values("workspace_id")
    ).filter(Q(is_private=False) | Q(owner=user))
    if not include_hidden:
        qs = qs.filter(is_hidden=False)
    if workspace is not None:
        qs = qs.filter(workspace=workspace)
    if types:
        qs = qs.filter(type__in=types)
    tags = [t.lower() for t in (tags or []) if t]
    if tags:
        qs = qs.filter(_tags_q(tags))
    return qs.select_related("workspace", "owner").order_by("-updated_at")


def knowledge_item_get_for_user(*, user, item_id) -> KnowledgeItem:
    """The item if ``user`` belongs to its workspace and (if it is private) owns it; hidden
    items are reachable by id. Raises ``Http404`` otherwise — also for malformed ids — so
    existence is never revealed."""
    if not getattr(user, "is_authenticated", False):
        raise Http404("No such knowledge item.")
    try:
        item = KnowledgeItem.objects.select_related("workspace", "owner").get(
            pk=item_id, workspace__memberships__user=user
        )
    except (KnowledgeItem.DoesNotExist, ValueError, TypeError, Exception) as exc:  # bad UUIDs: ValidationError
        raise Http404("No such knowledge item.") from exc
    if item.is_private and item.owner_id != user.pk:
        raise Http404("No such knowledge item.")
    return item


def _membership(user, workspace_id) -> Membership | None:
    if not getattr(user, "is_authenticated", False):
        return None
    return membership_get(user=user, workspace_id=workspace_id)


def knowledge_can_create(*, user, workspace: Workspace | int) -> bool:
    """Members and admins may add items; viewers (rank < 20) read only."""
    membership = _membership(user, _pk(workspace))
    return membership is not None and (membership.role.is_admin or membership.role.rank >= MEMBER_RANK)


def knowledge_item_can_edit(*, user, item: KnowledgeItem) -> bool:
    """Edit or delete: the item's owner if they may still create items in its workspace,
    or a workspace admin. ``item`` must come from ``knowledge_item_get_for_user``."""
    membership = _membership(user, item.workspace_id)
    if membership is None:
        return False
    if membership.role.is_admin:
        return True
    return item.owner_id == user.pk and membership.role.rank >= MEMBER_RANK


CITATION_PASSAGE_CHARS = 600


def citation_passages(*, chunk_ids, workspace_id: int, owner_id: int) -> dict:
    """``chunk_id → {"passage": text ≤ 600 chars, "item_title"}`` for the chunks an answer
    cited, shown as the hover preview of ``[n]``. Only chunks of the thread's workspace that
    the thread's owner may use (not another member's private item) — the same rule the
    answer was grounded under; a chunk rewritten or deleted since is simply missing."""
    ids = [c for c in chunk_ids if c is not None]
    if not ids:
        return {}
    rows = (KnowledgeChunk.objects.filter(pk__in=ids, workspace_id=workspace_id)
            .filter(Q(is_private=False) | Q(owner_id_copy=owner_id))
            .values_list("pk", "content"))
    return {pk: {"passage": content[:CITATION_PASSAGE_CHARS]} for pk, content in rows}
