"""Chunk vectors in the database already in use: pgvector on PostgreSQL, sqlite-vec on SQLite.

Table ``knowledge_chunkvector`` (``ChunkVector``: chunk, model, and the ``embedding`` column
added per backend by migration 0005). Vectors are unit length (the embedders normalise), so
cosine distance ranks them.

* PostgreSQL: ``embedding vector`` without dimensions, one HNSW index per model as a partial
  expression index — ``((embedding::vector(384)) vector_cosine_ops) WHERE model_id = 7`` —
  made when the model's first vectors are written (``ensure_index``). A query names the same
  expression and predicate, so the planner walks that model's graph; pgvector's iterative
  index scan (0.8+) keeps walking while the caller's visibility filters reject rows, so a
  filtered search still returns its ``limit`` rows.
* SQLite: float32 bytes in ``knowledge_chunkvector`` (the record), mirrored per model into a
  sqlite-vec ``vec0`` table ``knowledge_vec0_<model id>`` partitioned by workspace
  (``ensure_index``; triggers on ``knowledge_chunkvector`` keep it in step on every insert and
  delete). A search asks ``vec0`` for the workspace's nearest vectors (an exact scan in C,
  about half the time of ``vec_distance_cosine`` row by row in SQL), over-fetching
  ``SQLITE_KNN_OVERFETCH``× so the visibility filters, applied in the same statement, still
  leave ``limit`` rows; when they do not, or the model has no ``vec0`` table, the exact scan
  of ``knowledge_chunkvector`` with the filters answers. The extension is loaded into every
  new connection (``load_sqlite_vec``, connected in ``KnowledgeConfig.ready``).

The visibility and narrowing filters (``knowledge.search._filter_sql``) are in the same
statement: a vector the caller may not see is never a candidate.
"""

from __future__ import annotations

import logging
import struct

from django.db import IntegrityError, connection, transaction

from .search import Filters, _filter_sql

logger = logging.getLogger(__name__)


def load_sqlite_vec(sender, connection, **kwargs) -> None:
    """``connection_created`` receiver: load sqlite-vec into a new SQLite connection."""
    if connection.vendor != "sqlite":
        return
    import sqlite_vec

    raw = connection.connection
    raw.enable_load_extension(True)
    try:
        sqlite_vec.load(raw)
    finally:
        raw.enable_load_extension(False)


def _pg_literal(vector) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def _sqlite_blob(vector) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def index_name(model_id: int) -> str:
    return f"knowledge_chunkvector_hnsw_{int(model_id)}"


def vec0_table(model_id: int) -> str:
    return f"knowledge_vec0_{int(model_id)}"


SQLITE_KNN_OVERFETCH = 4  # vec0 neighbours fetched per row wanted, before the visibility filters
SQLITE_KNN_MAX = 4096  # sqlite-vec's largest k


def ensure_index(*, model_id: int, dimensions: int) -> None:
    """The model's nearest-neighbour structure (idempotent). PostgreSQL: its HNSW index
    (built as vectors arrive, so it costs each insert a graph update rather than one long
    build). SQLite: its ``vec0`` table, filled from the vectors already stored, and the
    triggers that keep it in step."""
    if connection.vendor == "sqlite":
        _ensure_vec0(model_id=model_id, dimensions=dimensions)
        return
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)", [index_name(model_id)])
        if cur.fetchone()[0] is not None:
            return
        # Inside a transaction with deferred foreign-key checks pending, PostgreSQL refuses
        # CREATE INDEX: run those checks now, then defer again (Django's constraints are all
        # INITIALLY DEFERRED).
        if connection.in_atomic_block:
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cur.execute(
            f"CREATE INDEX IF NOT EXISTS {index_name(model_id)} ON knowledge_chunkvector USING hnsw "
            f"((embedding::vector({int(dimensions)})) vector_cosine_ops) WHERE model_id = {int(model_id)}"
        )
        if connection.in_atomic_block:
            cur.execute("SET CONSTRAINTS ALL DEFERRED")


def _has_vec0(model_id: int) -> bool:
    with connection.cursor() as cur:  # a lookup in the schema (never cached: a rollback drops the table)
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s", [vec0_table(model_id)])
        return cur.fetchone() is not None


def _ensure_vec0(*, model_id: int, dimensions: int) -> None:
    if _has_vec0(model_id):
        return
    table, model_id = vec0_table(model_id), int(model_id)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0("
                    f"workspace_id integer partition key, embedding float[{int(dimensions)}] distance_metric=cosine)")
        cur.execute(f"INSERT INTO {table}(rowid, workspace_id, embedding) "
                    f"SELECT v.chunk_id, c.workspace_id, v.embedding FROM knowledge_chunkvector v "
                    f"JOIN knowledge_knowledgechunk c ON c.id = v.chunk_id "
                    f"WHERE v.model_id = {model_id} AND v.chunk_id NOT IN (SELECT rowid FROM {table})")
        cur.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON knowledge_chunkvector "
                    f"WHEN new.model_id = {model_id} BEGIN "
                    f"INSERT INTO {table}(rowid, workspace_id, embedding) SELECT new.chunk_id, c.workspace_id, "
                    f"new.embedding FROM knowledge_knowledgechunk c WHERE c.id = new.chunk_id; END")
        cur.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON knowledge_chunkvector "
                    f"WHEN old.model_id = {model_id} BEGIN DELETE FROM {table} WHERE rowid = old.chunk_id; END")


def vectors_store(*, model_id: int, rows: list[tuple[int, list[float]]]) -> int:
    """Write ``(chunk_id, vector)`` rows for ``model_id``; returns how many were stored. A
    chunk that already has a vector of the model keeps it; a chunk deleted meanwhile (its
    item edited or deleted while the batch was embedded) is skipped, never an error."""
    if not rows:
        return 0
    postgres = connection.vendor == "postgresql"
    sql = (
        "INSERT INTO knowledge_chunkvector (chunk_id, model_id, embedding) "
        f"SELECT %s, %s, {'%s::vector' if postgres else '%s'} "
        "WHERE EXISTS (SELECT 1 FROM knowledge_knowledgechunk WHERE id = %s) "
        "ON CONFLICT DO NOTHING"
    )
    encode = _pg_literal if postgres else _sqlite_blob
    params = [(chunk_id, model_id, encode(vector), chunk_id) for chunk_id, vector in rows]
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.executemany(sql, params)
                return max(0, cur.rowcount)
    except IntegrityError:
        # A chunk deleted between the EXISTS and the commit (foreign keys are checked at
        # commit): store the rest one by one.
        stored = 0
        for p in params:
            try:
                with transaction.atomic(), connection.cursor() as cur:
                    cur.execute(sql, p)
                    stored += max(0, cur.rowcount)
            except IntegrityError:
                logger.info("chunk %s was deleted while it was embedded; its vector is dropped", p[0])
        return stored


def vector_candidates(*, model_id: int, dimensions: int, vector: list[float], filters: Filters,
                      limit: int) -> list[int]:
    """Chunk ids of the ``limit`` nearest vectors of ``model_id`` the filters allow, nearest
    first."""
    return [chunk_id for chunk_id, _ in vector_candidates_scored(
        model_id=model_id, dimensions=dimensions, vector=vector, filters=filters, limit=limit)]


def vector_candidates_scored(*, model_id: int, dimensions: int, vector: list[float], filters: Filters,
                             limit: int) -> list[tuple[int, float]]:
    """``(chunk_id, cosine distance)`` of the ``limit`` nearest vectors of ``model_id`` the
    filters allow, nearest first (distance = 1 − cosine similarity, 0..2)."""
    postgres = connection.vendor == "postgresql"
    where, params = _filter_sql(filters, true="TRUE" if postgres else "1", false="FALSE" if postgres else "0")
    if postgres:
        dims = int(dimensions)
        sql = f"""
            SELECT v.chunk_id, v.embedding::vector({dims}) <=> %s::vector({dims}) AS distance
            FROM knowledge_chunkvector v
            JOIN knowledge_knowledgechunk c ON c.id = v.chunk_id
            WHERE v.model_id = {int(model_id)} AND {where}
            ORDER BY v.embedding::vector({dims}) <=> %s::vector({dims})
            LIMIT %s
        """
        with transaction.atomic(), connection.cursor() as cur:
            # ef_search: candidates kept while walking the graph (pgvector default 40);
            # iterative scans continue past rows the filters reject (pgvector ≥ 0.8).
            cur.execute("SET LOCAL hnsw.ef_search = 100")
            cur.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            literal = _pg_literal(vector)
            cur.execute(sql, [literal, *params, literal, limit])
            return [(r[0], float(r[1])) for r in cur.fetchall()]
    if _has_vec0(model_id):
        k = min(SQLITE_KNN_MAX, max(limit * SQLITE_KNN_OVERFETCH, 100))
        sql = f"""
            WITH knn AS MATERIALIZED (
                SELECT rowid AS chunk_id, distance FROM {vec0_table(model_id)}
                WHERE embedding MATCH %s AND k = {k} AND workspace_id = %s
            )
            SELECT knn.chunk_id, knn.distance FROM knn
            JOIN knowledge_knowledgechunk c ON c.id = knn.chunk_id
            WHERE {where}
            ORDER BY knn.distance, knn.chunk_id
            LIMIT %s
        """
        with connection.cursor() as cur:
            cur.execute(sql, [_sqlite_blob(vector), filters.workspace_id, *params, limit])
            ids = [(r[0], float(r[1])) for r in cur.fetchall()]
        if len(ids) >= limit:
            return ids
        # Fewer than asked: the workspace is that small, or the filters rejected most of the
        # neighbours; the exact scan below settles it.
    sql = f"""
        SELECT v.chunk_id, vec_distance_cosine(v.embedding, %s) AS distance FROM knowledge_chunkvector v
        JOIN knowledge_knowledgechunk c ON c.id = v.chunk_id
        WHERE v.model_id = %s AND {where}
        ORDER BY distance, v.chunk_id
        LIMIT %s
    """
    with connection.cursor() as cur:
        cur.execute(sql, [_sqlite_blob(vector), model_id, *params, limit])
        return [(r[0], float(r[1])) for r in cur.fetchall()]
