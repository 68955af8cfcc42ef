"""Per-workspace search language, per-run numbered sources, a title index, and the
PostgreSQL vectors maintained by a trigger.

PostgreSQL: the generated ``search_vector`` column could only use a fixed configuration
(``to_tsvector('english', …)``; a per-row ``language::regconfig`` cast is not immutable), so
it becomes a plain column kept by a ``BEFORE INSERT OR UPDATE`` trigger: title 'A' with
``simple`` (short titles keep words such as "with"), content 'B' with the chunk's language.
A second column, ``title_vector`` (the title in the chunk's language and in ``simple``),
with its own GIN index, lets retrieval find the items titled by a query word without
visiting every chunk that mentions it (``knowledge/search.py``).

SQLite: adding columns makes Django rebuild ``knowledge_knowledgechunk`` (new table, copy,
rename), which drops the triggers that keep the FTS5 table in sync; they are created again
and the FTS5 index is rebuilt. Any later migration that alters that table must do the same.
"""


import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

PG_FORWARD = [
    "ALTER TABLE knowledge_knowledgechunk ALTER COLUMN search_vector DROP EXPRESSION",
    "ALTER TABLE knowledge_knowledgechunk ADD COLUMN title_vector tsvector",
    """
    CREATE FUNCTION knowledge_chunk_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        config regconfig := coalesce(nullif(NEW.language, ''), 'english')::regconfig;
    BEGIN
        NEW.search_vector :=
            setweight(to_tsvector('simple', coalesce(NEW.title, '')), 'A') ||
            setweight(to_tsvector(config, coalesce(NEW.content, '')), 'B');
        NEW.title_vector :=
            to_tsvector(config, coalesce(NEW.title, '')) || to_tsvector('simple', coalesce(NEW.title, ''));
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER knowledge_chunk_tsv BEFORE INSERT OR UPDATE OF title, content, language
    ON knowledge_knowledgechunk FOR EACH ROW EXECUTE FUNCTION knowledge_chunk_tsv()
    """,
    # Fill title_vector for existing rows (the trigger recomputes both vectors).
    "UPDATE knowledge_knowledgechunk SET language = language",
    "CREATE INDEX knowledge_chunk_title ON knowledge_knowledgechunk USING GIN (title_vector)",
]
PG_BACKWARD = [
    "DROP TRIGGER IF EXISTS knowledge_chunk_tsv ON knowledge_knowledgechunk",
    "DROP FUNCTION IF EXISTS knowledge_chunk_tsv()",
    "DROP INDEX IF EXISTS knowledge_chunk_title",
    "ALTER TABLE knowledge_knowledgechunk DROP COLUMN IF EXISTS title_vector",
    "DROP INDEX IF EXISTS knowledge_chunk_search",
    "ALTER TABLE knowledge_knowledgechunk DROP COLUMN IF EXISTS search_vector",
    """
    ALTER TABLE knowledge_knowledgechunk ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', coalesce(title, '')), 'A') ||
        setweight(to_tsvector('english', coalesce(content, '')), 'B')
    ) STORED
    """,
    "CREATE INDEX knowledge_chunk_search ON knowledge_knowledgechunk USING GIN (search_vector)",
]
SQLITE_TRIGGERS = [
    "DROP TRIGGER IF EXISTS knowledge_chunk_ai",
    "DROP TRIGGER IF EXISTS knowledge_chunk_ad",
    "DROP TRIGGER IF EXISTS knowledge_chunk_au",
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
    CREATE TRIGGER knowledge_chunk_au AFTER UPDATE OF title, content ON knowledge_knowledgechunk BEGIN
        INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts, rowid, title, content)
        VALUES ('delete', old.id, old.title, old.content);
        INSERT INTO knowledge_chunk_fts(rowid, title, content) VALUES (new.id, new.title, new.content);
    END
    """,
    "INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts) VALUES ('rebuild')",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return run


def _copy_hidden(apps, schema_editor):
    chunk = apps.get_model("knowledge", "KnowledgeChunk")
    chunk.objects.filter(item__is_hidden=True).update(is_hidden=True)


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0005_provider_catalogue'),
        ('chat', '0002_remove_thread_message_count'),
        ('knowledge', '0002_fulltext_index'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # Reversed last: SQLite's chunk table is rebuilt again when the columns are removed.
        migrations.RunPython(migrations.RunPython.noop, _run({"sqlite": SQLITE_TRIGGERS})),
        migrations.CreateModel(
            name='KnowledgeSettings',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('search_language', models.CharField(choices=[('simple', 'simple'), ('arabic', 'arabic'), ('armenian', 'armenian'), ('basque', 'basque'), ('catalan', 'catalan'), ('danish', 'danish'), ('dutch', 'dutch'), ('english', 'english'), ('finnish', 'finnish'), ('french', 'french'), ('german', 'german'), ('greek', 'greek'), ('hindi', 'hindi'), ('hungarian', 'hungarian'), ('indonesian', 'indonesian'), ('irish', 'irish'), ('italian', 'italian'), ('lithuanian', 'lithuanian'), ('nepali', 'nepali'), ('norwegian', 'norwegian'), ('portuguese', 'portuguese'), ('romanian', 'romanian'), ('russian', 'russian'), ('serbian', 'serbian'), ('spanish', 'spanish'), ('swedish', 'swedish'), ('tamil', 'tamil'), ('turkish', 'turkish'), ('yiddish', 'yiddish')], default='english', help_text="PostgreSQL text search configuration for stemming content (SQLite always uses the porter stemmer). Changing it re-indexes the workspace's knowledge.", max_length=32)),
            ],
            options={
                'verbose_name_plural': 'knowledge settings',
            },
        ),
        migrations.CreateModel(
            name='RunSources',
            fields=[
                ('run', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='+', serialize=False, to='agents.run')),
                ('sources', models.JSONField(blank=True, default=list)),
                ('block', models.TextField(blank=True)),
                ('grounded_at', models.DateTimeField(blank=True, null=True)),
                ('grounding_note', models.CharField(blank=True, max_length=300)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name_plural': 'run sources',
            },
        ),
        migrations.AddField(
            model_name='knowledgechunk',
            name='is_hidden',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='knowledgechunk',
            name='language',
            field=models.CharField(default='english', max_length=32),
        ),
        migrations.AddIndex(
            model_name='knowledgeitem',
            index=models.Index(fields=['workspace', '-updated_at'], name='knowledge_ws_recent'),
        ),
        migrations.AddConstraint(
            model_name='knowledgeitem',
            constraint=models.UniqueConstraint(condition=models.Q(('source_path', ''), _negated=True), fields=('workspace', 'source_path'), name='knowledge_unique_source'),
        ),
        migrations.AddField(
            model_name='knowledgesettings',
            name='workspace',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='knowledge_settings', to='chat.workspace'),
        ),
        # Last: the PostgreSQL trigger names the new columns; SQLite's table was rebuilt.
        migrations.RunPython(
            _run({"postgresql": PG_FORWARD, "sqlite": SQLITE_TRIGGERS}),
            _run({"postgresql": PG_BACKWARD}),
        ),
        migrations.RunPython(_copy_hidden, migrations.RunPython.noop),
    ]
