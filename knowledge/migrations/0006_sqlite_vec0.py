# SQLite: each embedding model's vectors mirrored into a sqlite-vec vec0 table partitioned by
# workspace, kept in step by triggers (knowledge/vectors.py, ensure_index). Made here for the
# models that already have vectors; new models get theirs at their first batch. Nothing on
# PostgreSQL (its HNSW indexes are made the same way since 0005).
from django.db import migrations


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    from knowledge.vectors import ensure_index

    for model_id, dimensions in apps.get_model("knowledge", "EmbeddingModel").objects.filter(
            dimensions__isnull=False).values_list("pk", "dimensions"):
        ensure_index(model_id=model_id, dimensions=dimensions)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    from knowledge.vectors import vec0_table

    with schema_editor.connection.cursor() as cur:
        for model_id in apps.get_model("knowledge", "EmbeddingModel").objects.values_list("pk", flat=True):
            table = vec0_table(model_id)
            cur.execute(f"DROP TRIGGER IF EXISTS {table}_insert")
            cur.execute(f"DROP TRIGGER IF EXISTS {table}_delete")
            cur.execute(f"DROP TABLE IF EXISTS {table}")


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0005_embeddings")]
    operations = [migrations.RunPython(forward, backward)]
