from django.db import migrations

ROLES = [
    ("viewer", "Viewer", 10, False, "Reads and asks; cannot change the knowledge base."),
    ("member", "Member", 20, False, "Asks, saves and edits knowledge."),
    ("admin", "Admin", 30, True, "Manages the workspace; reads every thread; decides approvals."),
]


def seed(apps, schema_editor):
    Role = apps.get_model("agents", "Role")
    for name, label, rank, is_admin, description in ROLES:
        Role.objects.get_or_create(
            name=name, defaults={"label": label, "rank": rank, "is_admin": is_admin, "description": description}
        )


class Migration(migrations.Migration):
    dependencies = [("agents", "0002_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
