"""The configuration generation (agents.config_cache): a one-row table that triggers on the
governed tables of this app move on every change."""

from django.db import migrations

from agents.config_cache import GOVERNED_TABLES, generation_table_sql, trigger_sql


def _run(schema_editor, statements):
    for sql in statements:
        schema_editor.execute(sql)


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    _run(schema_editor, generation_table_sql(vendor)[0] + trigger_sql(vendor, GOVERNED_TABLES["agents"])[0])


def backward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    _run(schema_editor, trigger_sql(vendor, GOVERNED_TABLES["agents"])[1] + generation_table_sql(vendor)[1])


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0013_run_budget_hold'),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
