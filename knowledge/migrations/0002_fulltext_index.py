"""Full-text index for chunks, per database backend.

PostgreSQL: a stored generated ``tsvector`` (title 'A' with ``simple``, content 'B' with
``english``) and a GIN index. SQLite: an external-content FTS5 table with porter stemming,
kept in sync by triggers.
"""

from django.db import migrations

PG_FORWARD = [
    """
    ALTER TABLE knowledge_knowledgechunk ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', coalesce(title, '')), 'A') ||
        setweight(to_tsvector('english', coalesce(content, '')), 'B')
    ) STORED
    """,
    "CREATE INDEX knowledge_chunk_search ON knowledge_knowledgechunk USING GIN (search_vector)",
]
PG_BACKWARD = [
    "DROP INDEX IF EXISTS knowledge_chunk_search",
    "ALTER TABLE knowledge_knowledgechunk DROP COLUMN IF EXISTS search_vector",
]
SQLITE_FORWARD = [
    """
    CREATE VIRTUAL TABLE knowledge_chunk_fts USING fts5(
        title, content, content='knowledge_knowledgechunk', content_rowid='id',
        tokenize='porter unicode61'
    )
    """,
    """
    CREATE TRIGGER knowledge_chunk_ai AFTER INSERT ON knowledge_knowledgechunk BEGIN
        INSERT INTO knowledge_chunk_fts(rowid, title, content) VALUES (new.id, new.title, new.content);
    END
    """,
    """
    CREATE TRIGGER knowledge_chunk_ad AFTER DELETE ON knowledge_knowledgechunk BEGIN
        INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts, rowid, title, content)
        VALUES ('delete', old.id, old.title, old.content);
    END
    """,
    """
    CREATE TRIGGER knowledge_chunk_au AFTER UPDATE ON knowledge_knowledgechunk BEGIN
        INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts, rowid, title, content)
        VALUES ('delete', old.id, old.title, old.content);
        INSERT INTO knowledge_chunk_fts(rowid, title, content) VALUES (new.id, new.title, new.content);
    END
    """,
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS knowledge_chunk_au",
    "DROP TRIGGER IF EXISTS knowledge_chunk_ad",
    "DROP TRIGGER IF EXISTS knowledge_chunk_ai",
    "DROP TABLE IF EXISTS knowledge_chunk_fts",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": PG_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": PG_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        )
    ]
