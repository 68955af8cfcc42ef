"""Budgets and model prices move the configuration generation too (chatplatform.config_cache)."""

from django.db import migrations

from chatplatform.config_cache import drop_triggers, install_triggers


def forward(apps, schema_editor):
    install_triggers(schema_editor.connection)


def backward(apps, schema_editor):
    drop_triggers(schema_editor.connection, ("usage_modelprice", "usage_budget"))


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0014_config_generation'),
        ('usage', '0002_budgetwindow_spent'),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
