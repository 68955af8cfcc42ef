"""The configuration generation (chatplatform.config_cache): a one-row table, and the triggers on
the governed tables that move it (re-checked after every migrate: agents.apps)."""

from django.db import migrations

from chatplatform.config_cache import create_table, drop_table, install_triggers


def forward(apps, schema_editor):
    create_table(schema_editor)
    install_triggers(schema_editor.connection)


def backward(apps, schema_editor):
    drop_table(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0013_run_budget_hold'),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
