from django.db import migrations

from agents.roles import ensure_default_roles


def seed(apps, schema_editor):
    ensure_default_roles(apps.get_model("agents", "Role"))


class Migration(migrations.Migration):
    dependencies = [("agents", "0002_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
