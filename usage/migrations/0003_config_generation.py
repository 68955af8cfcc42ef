"""Budgets and model prices move the configuration generation too (agents.config_cache)."""

from django.db import migrations

from agents.config_cache import GOVERNED_TABLES, trigger_sql


def forward(apps, schema_editor):
    for sql in trigger_sql(schema_editor.connection.vendor, GOVERNED_TABLES["usage"])[0]:
        schema_editor.execute(sql)


def backward(apps, schema_editor):
    for sql in trigger_sql(schema_editor.connection.vendor, GOVERNED_TABLES["usage"])[1]:
        schema_editor.execute(sql)


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0014_config_generation'),
        ('usage', '0002_budgetwindow_spent'),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
