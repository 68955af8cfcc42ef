"""Budgets and model prices move the configuration generation too (agents.config_cache)."""

from django.db import migrations

from agents.config_cache import install_triggers


def forward(apps, schema_editor):
    install_triggers(schema_editor.connection)


def backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for table in ("usage_modelprice", "usage_budget"):
            name = f"{table}_config_changed"
            if schema_editor.connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}_truncate ON {table}")
            else:
                for event in ("insert", "update", "delete"):
                    cursor.execute(f"DROP TRIGGER IF EXISTS {name}_{event}")


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0014_config_generation'),
        ('usage', '0002_budgetwindow_spent'),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
