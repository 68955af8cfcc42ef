# PostgreSQL: a RUM index on the chunks' search_vector (the ``rum`` extension, Debian's
# postgresql-<version>-rum), so the keyword ranking's candidates come out of the index in rank
# order (``ORDER BY search_vector <=> query LIMIT k``) instead of ts_rank_cd over every match
# read from the table (knowledge/search.py). Made only where the extension is installed on the
# server and this role may create it; otherwise nothing changes and the GIN path serves
# (knowledge.search.rum_available decides per database). Nothing on SQLite.
from django.db import DatabaseError, migrations, transaction

INDEX = "knowledge_chunk_search_rum"


def forward(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'rum'")
        if cur.fetchone() is None:
            return
        try:
            with transaction.atomic(using=connection.alias):  # a savepoint: a refusal leaves the migration whole
                cur.execute("CREATE EXTENSION IF NOT EXISTS rum")
        except DatabaseError:  # not allowed to (docs/configuration.md): keep the GIN path
            return
        cur.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON knowledge_knowledgechunk "
                    "USING rum (search_vector rum_tsvector_ops, workspace_id rum_int8_ops)")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0006_sqlite_vec0")]
    operations = [migrations.RunPython(forward, backward)]
