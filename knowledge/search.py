"""Full-text retrieval on chunks: query parsing and the SQL of each database backend.

Two query modes, one result shape (``knowledge.selectors.knowledge_search`` is the API):

* ``"question"`` — for natural-language questions (grounding, the ``search_knowledge``
  tool): the question's words are OR-ed and every pair of adjacent words also counts as a
  phrase, so "How does the with statement work?" ranks the topic titled "The with
  statement" first although "with" alone is in almost every text. AND-ing the words (what
  ``websearch_to_tsquery`` does) would demand "how", "does" and "work" too and find nothing.
* ``"websearch"`` — for explicit search boxes (the search API, the knowledge pages):
  web-search syntax with AND semantics: ``"a phrase"``, ``or``, ``-word``. The query is
  parsed here into groups and written back in a clean form, so both backends see the same
  logic: on PostgreSQL through ``websearch_to_tsquery``, on SQLite as an FTS5 expression
  with every word quoted (FTS5 syntax characters in the input can never raise). A group
  with only negations is dropped (it would match almost everything); no positive word at
  all → no results.

PostgreSQL: each chunk's ``search_vector`` holds the title (weight 'A', ``simple`` config)
and the content (weight 'B', the workspace's language), ``title_vector`` the title alone; both
have GIN indexes. Web-search queries are built with the workspace's language OR-ed with
``simple`` (so title words that are stop words still match) and ranked with ``ts_rank``
(title weighted 10× content). Questions match their words in the workspace's language, rank
with ``ts_rank`` and add 1.0 when an adjacent pair appears verbatim in the title (a phrase
operator inside the rank costs several times more per row). SQLite: an FTS5 table (porter
stemming) ranked with ``bm25`` (title weighted 10×); in the question mode single English
stop words are left out (bm25 reads the whole posting list of every term).

Scale: candidates come from two capped tiers (``TITLE_CANDIDATES`` title matches,
``CONTENT_CANDIDATES`` title-or-content matches) and only they are scored, which keeps a
search's time flat as the corpus grows (bench/retrieval.py). Below the caps the ranking is
exact; above them every item titled by the query stays in the running and the rest is a
sample that keeps almost all of the exhaustive top results' score (bench/retrieval.py). On
PostgreSQL a question's content tier asks only for its rarest words (``_PG_RARE_LEXEMES``).

Workspace and visibility filters are part of the same SQL statement, never applied to the
results afterwards.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from django.db import connection

MAX_QUERY_TERMS = 32
WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN_RE = re.compile(r'(-?)"([^"]*)"?|(-?)([^\s"]+)')


def query_terms(query: str) -> list[str]:
    """The distinct words of ``query`` (letters and digits only, lower-cased), at most 32,
    in order of first appearance."""
    seen: dict[str, None] = {}
    for word in WORD_RE.findall((query or "").lower()):
        seen.setdefault(word, None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


# --- web-search syntax ------------------------------------------------------------------
Phrase = tuple[str, ...]  # one word, or adjacent words


@dataclass
class Group:
    """Positive phrases AND-ed, minus the negative ones."""

    positive: list[Phrase] = field(default_factory=list)
    negative: list[Phrase] = field(default_factory=list)


def parse_websearch(query: str) -> list[Group]:
    """``query`` in web-search syntax → OR-ed groups (empty list: nothing to search).

    ``"a b"`` is a phrase; a token joining words with punctuation (``with-statement``) is a
    phrase too; ``or`` (any case) separates groups; ``-`` negates the next word or phrase.
    Only letters and digits survive, at most 32 words in all.
    """
    groups: list[Group] = [Group()]
    budget = MAX_QUERY_TERMS
    for match in _TOKEN_RE.finditer(query or ""):
        quoted_neg, quoted, plain_neg, plain = match.groups()
        negated = bool(quoted_neg if quoted is not None else plain_neg)
        text = quoted if quoted is not None else plain
        if quoted is None and not negated and text.lower() == "or":
            if groups[-1].positive or groups[-1].negative:
                groups.append(Group())
            continue
        words = tuple(WORD_RE.findall(text.lower()))[:budget]
        if not words:
            continue
        budget -= len(words)
        (groups[-1].negative if negated else groups[-1].positive).append(words)
        if budget <= 0:
            break
    return [g for g in groups if g.positive]


def websearch_text(groups: list[Group]) -> str:
    """Groups written back in clean web-search syntax for ``websearch_to_tsquery``."""

    def phrase(p: Phrase) -> str:
        return p[0] if len(p) == 1 else '"' + " ".join(p) + '"'

    parts = []
    for g in groups:
        parts.append(" ".join([phrase(p) for p in g.positive] + ["-" + phrase(p) for p in g.negative]))
    return " or ".join(parts)


def fts5_websearch(groups: list[Group]) -> str:
    """Groups as an FTS5 expression; every word or phrase is double-quoted."""

    def phrase(p: Phrase) -> str:
        return '"' + " ".join(p) + '"'

    parts = []
    for g in groups:
        expr = "(" + " AND ".join(phrase(p) for p in g.positive) + ")"
        for p in g.negative:
            expr = f"({expr} NOT {phrase(p)})"
        parts.append(expr)
    return " OR ".join(parts)


# English stop words (PostgreSQL's ``english`` list). In the question mode a pair of two
# stop words ("of the") is no phrase worth matching, and on SQLite — whose porter tokenizer
# keeps every word — single stop words are left out of the match too: bm25 reads the whole
# posting list of each term, and "the" is in every chunk.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing don down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it
its itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
""".split())


@dataclass(frozen=True)
class Question:
    """A natural-language query: ``words`` to OR, ``pairs`` of adjacent words as phrases
    (pairs of two stop words dropped), ``keywords`` = words that are not stop words (all
    words when every one is a stop word)."""

    words: list[str]
    pairs: list[tuple[str, str]]
    keywords: list[str]


def parse_question(query: str) -> Question | None:
    words = query_terms(query)
    if not words:
        return None
    pairs = [(a, b) for a, b in zip(words, words[1:], strict=False) if a not in STOP_WORDS or b not in STOP_WORDS]
    keywords = [w for w in words if w not in STOP_WORDS] or words
    return Question(words=words, pairs=pairs, keywords=keywords)


def fts5_question(q: Question) -> tuple[str, str]:
    """(match, title) FTS5 expressions: keywords and pairs OR-ed; the title tier asks for a
    pair (or, with none, a keyword) in the title."""
    phrases = [f'"{a} {b}"' for a, b in q.pairs]
    match = " OR ".join([f'"{w}"' for w in q.keywords] + phrases)
    title = " OR ".join(phrases or [f'"{w}"' for w in q.keywords])
    return match, title


# --- SQL ----------------------------------------------------------------------------------
# Candidate caps. Ranking costs one score per candidate, so on a large knowledge base a
# query word found in 40 % of the chunks cannot be ranked exhaustively within the latency
# budget (bench/retrieval.py). Candidates are therefore gathered in two tiers from the
# full-text index: chunks whose *title* matches (at most TITLE_CANDIDATES) and chunks whose
# title or content matches (at most CONTENT_CANDIDATES, in storage order); the union is
# ranked. A query matching fewer chunks than the caps is ranked exactly; a broader one
# still ranks every item titled by its words, plus a sample of the rest.
TITLE_CANDIDATES = 300
CONTENT_CANDIDATES = 2000


@dataclass(frozen=True)
class Filters:
    """Everything that narrows a search; all of it goes into the SQL ``WHERE``."""

    workspace_id: int
    user_id: int | None
    include_private: bool
    include_hidden: bool
    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # With ``scoped``: only items carrying one of ``scope_tags`` OR listed in ``scope_items``
    # (a chat assistant's knowledge scope), besides the filters above; an empty scope matches nothing.
    scope_tags: tuple[str, ...] = ()
    scope_items: tuple[str, ...] = ()
    scoped: bool = False


Row = tuple  # (chunk_id, item_id, title, content, score, type)


def run_search(*, mode: str, query: str, filters: Filters, limit: int) -> list[Row]:
    """Ranked rows, best first, or ``[]`` when the query has nothing to search for."""
    postgres = connection.vendor == "postgresql"
    if mode == "websearch":
        groups = parse_websearch(query)
        if not groups:
            return []
        if postgres:
            return _postgres(_pg_websearch_query(websearch_text(groups)), filters, limit)
        match = fts5_websearch(groups)
        return _sqlite(match, f"({{title}} : ({match})) AND ({match})", filters, limit)
    if mode == "question":
        question = parse_question(query)
        if question is None:
            return []
        if postgres:
            return _postgres(_pg_question_query(question), filters, limit)
        match, title = fts5_question(question)
        return _sqlite(match, f"({{title}} : ({title})) AND ({match})", filters, limit)
    raise ValueError(f"unknown search mode {mode!r}")


def _filter_sql(f: Filters, *, true: str, false: str) -> tuple[str, list]:
    """The visibility and narrowing clauses on a chunk ``c`` (item columns through EXISTS)."""
    private_ok = bool(f.include_private and f.user_id)
    sql = [
        "c.workspace_id = %s",
        f"(NOT c.is_private OR ({true if private_ok else false} AND c.owner_id_copy = %s))",
    ]
    params: list = [f.workspace_id, f.user_id or -1]
    if not f.include_hidden:
        sql.append("NOT c.is_hidden")
    item_sql: list[str] = []
    if f.types:
        item_sql.append("i.type IN (" + ", ".join(["%s"] * len(f.types)) + ")")
        params.extend(f.types)
    if f.tags:
        if connection.vendor == "postgresql":
            item_sql.append("i.tags ?| %s::text[]")
            params.append(list(f.tags))
        else:
            item_sql.append(
                "EXISTS (SELECT 1 FROM json_each(i.tags) t WHERE t.value IN (" + ", ".join(["%s"] * len(f.tags)) + "))"
            )
            params.extend(f.tags)
    if f.scoped:
        scope: list[str] = []
        if f.scope_tags:
            if connection.vendor == "postgresql":
                scope.append("i.tags ?| %s::text[]")
                params.append(list(f.scope_tags))
            else:
                scope.append("EXISTS (SELECT 1 FROM json_each(i.tags) t WHERE t.value IN ("
                             + ", ".join(["%s"] * len(f.scope_tags)) + "))")
                params.extend(f.scope_tags)
        if f.scope_items:
            scope.append("i.id IN (" + ", ".join(["%s"] * len(f.scope_items)) + ")")
            # SQLite stores a UUID as 32 hex digits, PostgreSQL as a uuid
            params.extend(uuid.UUID(i).hex if connection.vendor != "postgresql" else str(uuid.UUID(i))
                          for i in f.scope_items)
        item_sql.append("(" + " OR ".join(scope) + ")" if scope else "1 = 0")
    if item_sql:
        sql.append("EXISTS (SELECT 1 FROM knowledge_knowledgeitem i WHERE i.id = c.item_id AND "
                   + " AND ".join(item_sql) + ")")
    return " AND ".join(sql), params


def _sqlite(match: str, title_match: str, f: Filters, limit: int) -> list[Row]:
    """Two capped candidate tiers, as on PostgreSQL. ``bm25`` can only score rows of the
    query that matched them, so the title tier matches ``title_match`` — the full expression
    AND it restricted to the title column — whose extra title phrases act as the title bonus."""
    where, params = _filter_sql(f, true="1", false="0")
    # CROSS JOIN keeps the full-text table the outer loop (SQLite does not reorder it): with a
    # plain JOIN the planner may walk the workspace's chunks by index and evaluate the MATCH
    # once per chunk — 27–44 ms for a question over the demo's 402 chunks, growing with the
    # workspace, against 0.3–0.6 ms when the MATCH runs once (bench/retrieval.py).
    tier = f"""
        SELECT * FROM (
            SELECT f.rowid AS id, bm25(knowledge_chunk_fts, 10.0, 1.0) AS rank
            FROM knowledge_chunk_fts f CROSS JOIN knowledge_knowledgechunk c ON c.id = f.rowid
            WHERE knowledge_chunk_fts MATCH %s AND {where} LIMIT {{cap}}
        )"""
    sql = f"""
        WITH hits AS ({tier.format(cap=TITLE_CANDIDATES)} UNION ALL {tier.format(cap=CONTENT_CANDIDATES)}),
        top AS (SELECT id, min(rank) AS rank FROM hits GROUP BY id ORDER BY rank, id LIMIT %s)
        SELECT c.id, c.item_id, c.title, c.content, -top.rank AS score, i.type
        FROM top
        JOIN knowledge_knowledgechunk c ON c.id = top.id
        JOIN knowledge_knowledgeitem i ON i.id = c.item_id
        ORDER BY top.rank, c.id
    """
    with connection.cursor() as cur:
        cur.execute(sql, [title_match, *params, match, *params, limit])
        return cur.fetchall()


# The workspace's language, resolved inside the statement (no extra round trip).
_PG_LANGUAGE = (
    "coalesce((SELECT s.search_language FROM knowledge_knowledgesettings s WHERE s.workspace_id = %s),"
    " 'english')::regconfig"
)
# Title 'A' counts 10× content 'B' (weights {D, C, B, A}), as bm25's 10:1 on SQLite: with
# the defaults a long passage repeating a word outranks the topic titled by it.
_PG_WEIGHTS = "'{0.01, 0.02, 0.1, 1.0}'::float4[]"
# ts_rank (word frequency), not ts_rank_cd (cover density): for a question's OR-ed words
# ts_rank_cd looks for covers in every candidate, which costs several times more per row, and
# ranked the labelled questions worse (docs/performance.md, Retrieval).
_PG_RANK = "ts_rank"


@dataclass(frozen=True)
class PgQuery:
    """The ``q`` row of a PostgreSQL search: ``select`` defines ``query`` (ranking),
    ``candidates`` (content tier), ``title_query`` (title tier) and optionally ``bonus`` (a
    tsquery whose match on the title adds 1.0 to the score), with its parameters."""

    select: str
    params: list
    has_bonus: bool = False


def _pg_websearch_query(text: str) -> PgQuery:
    both = f"websearch_to_tsquery({_PG_LANGUAGE}, %s) || websearch_to_tsquery('simple', %s)"
    return PgQuery(select=f"SELECT {both} AS query, {both} AS candidates, {both} AS title_query",
                   params=[None, text, text] * 3)


# Question mode, content tier: the question's lexemes rarest first, as many as the column's
# statistics (ANALYZE's most common lexemes and their frequencies, ``pg_stats``) expect to
# match at most CONTENT_CANDIDATES chunks of the workspace together — at least the rarest
# one. A 12-word question OR-ed matches a third of a large knowledge base; without this the
# capped tier was a storage-order sample of that third (the chunks holding a rare word of the
# question could be left out for ones sharing only "function" or "value" with it), and most
# of a search's time went to reading and ranking it. The title tier and the vector ranking
# still look at every chunk. Lexemes missing from the
# statistics count as rare. The workspace's chunks are estimated from the statistics too (its
# share of the table's rows, ``workspace_id``'s most common values): a workspace too small to
# be among them, or no statistics at all (never analysed), takes every lexeme — the whole
# question, exactly ranked below the caps as before. The ranking still scores each candidate against every word.
_PG_RARE_LEXEMES = f"""(
    SELECT to_tsquery('simple', string_agg(r.lexeme, ' | '))
    FROM (
        SELECT e.lexeme, row_number() OVER w AS n, sum(e.expected) OVER w AS running
        FROM (
            SELECT l.lexeme, coalesce(st.freqs[array_position(st.elems, l.lexeme)] * ws.rows, 0) AS expected
            FROM unnest(tsvector_to_array(to_tsvector({_PG_LANGUAGE}, %s))) AS l(lexeme)
            LEFT JOIN (
                SELECT s.most_common_elems::text::text[] AS elems, s.most_common_elem_freqs AS freqs
                FROM pg_stats s
                WHERE s.schemaname = current_schema() AND s.tablename = 'knowledge_knowledgechunk'
                  AND s.attname = 'search_vector'
            ) st ON TRUE
            LEFT JOIN (
                SELECT s.most_common_freqs[array_position(s.most_common_vals::text::bigint[], %s::bigint)]
                       * (SELECT greatest(reltuples, 0) FROM pg_class
                          WHERE oid = 'knowledge_knowledgechunk'::regclass) AS rows
                FROM pg_stats s
                WHERE s.schemaname = current_schema() AND s.tablename = 'knowledge_knowledgechunk'
                  AND s.attname = 'workspace_id'
            ) ws ON TRUE
        ) e
        WINDOW w AS (ORDER BY e.expected, e.lexeme)
    ) r
    WHERE r.n = 1 OR r.running <= %s
)"""


def _pg_question_query(q: Question) -> PgQuery:
    """Words OR-ed in the workspace's language (``simple`` when they are all stop words)
    rank with ``ts_rank``; adjacent pairs are matched verbatim against the title for a
    bonus instead of inside the rank — phrase operators make the ranking several times slower.
    Content tier: the rarest of the words (``_PG_RARE_LEXEMES``). Title tier: titles holding
    an adjacent pair (in the language: a stop word between is skipped, so "a coroutine"
    finds the title "Coroutines"), or the word for one word."""
    words = " | ".join(q.words)
    pairs = " | ".join(f"({a} <-> {b})" for a, b in q.pairs) or " | ".join(q.keywords)
    # OFFSET 0 keeps ``w`` a subquery of its own: flattened, each of the CASEs' references to
    # w.rare became a copy of the statistics sub-select, planned and run twice.
    select = f"""
        SELECT CASE WHEN numnode(w.lang) > 0 THEN w.lang ELSE to_tsquery('simple', %s) END AS query,
               CASE WHEN numnode(w.lang) > 0 AND numnode(coalesce(w.rare, ''::tsquery)) > 0 THEN w.rare
                    WHEN numnode(w.lang) > 0 THEN w.lang ELSE to_tsquery('simple', %s) END AS candidates,
               to_tsquery({_PG_LANGUAGE}, %s) || to_tsquery('simple', %s) AS title_query,
               to_tsquery('simple', %s) AS bonus
        FROM (SELECT to_tsquery({_PG_LANGUAGE}, %s) AS lang, {_PG_RARE_LEXEMES} AS rare OFFSET 0) w
    """
    return PgQuery(select=select, params=[words, words, None, pairs, pairs, pairs, None, words,
                                          None, " ".join(q.words), None, CONTENT_CANDIDATES], has_bonus=True)


def _postgres(pq: PgQuery, f: Filters, limit: int) -> list[Row]:
    """Two capped candidate tiers, ranked together. A title candidate must also match the
    whole query (``-word`` applies to the content too); ``ts_match_vq`` is ``@@`` spelled as
    a function so the planner rechecks it per candidate instead of building a second bitmap
    from the content index."""
    where, params = _filter_sql(f, true="TRUE", false="FALSE")
    q_params = [f.workspace_id if p is None else p for p in pq.params]
    score = f"{_PG_RANK}({_PG_WEIGHTS}, c.search_vector, q.query)"
    if pq.has_bonus:
        score += " + CASE WHEN c.title_vector @@ q.bonus THEN 1.0 ELSE 0.0 END"
    sql = f"""
        WITH q AS MATERIALIZED ({pq.select}),
        hits AS (
            (SELECT c.id, {score} AS score FROM knowledge_knowledgechunk c, q
             WHERE c.title_vector @@ q.title_query AND ts_match_vq(c.search_vector, q.query) AND {where}
             LIMIT {TITLE_CANDIDATES})
            UNION ALL
            (SELECT c.id, {score} AS score FROM knowledge_knowledgechunk c, q
             WHERE c.search_vector @@ q.candidates AND {where} LIMIT {CONTENT_CANDIDATES})
        ),
        top AS (SELECT DISTINCT id, score FROM hits ORDER BY score DESC, id LIMIT %s)
        SELECT c.id, c.item_id, c.title, c.content, top.score, i.type
        FROM top
        JOIN knowledge_knowledgechunk c ON c.id = top.id
        JOIN knowledge_knowledgeitem i ON i.id = c.item_id
        ORDER BY top.score DESC, c.id
    """
    with connection.cursor() as cur:
        cur.execute(sql, [*q_params, *params, *params, limit])
        return cur.fetchall()
