"""Upgrade step for the safe tool-policy default (issue 17).

Before: a ToolPolicy with no roles meant *every role*. Now it means every role for a read
tool and no one for a write or dangerous tool. On upgrade, a write or dangerous policy with
no roles gets the roles its tool declares (``@tool(default_roles=...)``, what a fresh install
gets) — so members and admins keep the knowledge write tools, and viewers lose them. A tool
that declares no roles (or is no longer registered) is left with none: no one may use it
until an administrator names roles in the admin. The migration prints those tool names.
"""

from django.db import migrations, models


def name_roles_for_write_tools(apps, schema_editor):
    from agents.tools import tool_sources

    ToolPolicy = apps.get_model("agents", "ToolPolicy")  # noqa: N806
    Role = apps.get_model("agents", "Role")  # noqa: N806
    closed = []
    for row in ToolPolicy.objects.filter(risk__in=("write", "dangerous"), allowed_roles__isnull=True):
        spec = tool_sources.get(row.tool_name)
        declared = tuple(spec.default_roles) if spec is not None else ()
        roles = list(Role.objects.filter(name__in=declared))
        if roles:
            row.allowed_roles.set(roles)
        else:
            closed.append(row.tool_name)
    if closed:
        print(f"\n  Tool policies with no roles are now closed to everyone: {', '.join(sorted(closed))} "
              "(name roles in the admin to allow them).")


class Migration(migrations.Migration):

    dependencies = [
        ("agents", "0009_auditevent_mcp_kinds"),
    ]

    operations = [
        migrations.AlterField(
            model_name="toolpolicy",
            name="allowed_roles",
            field=models.ManyToManyField(
                blank=True, help_text="Empty: every role for a read tool, no one for a write or dangerous tool.",
                related_name="tool_policies", to="agents.role",
            ),
        ),
        migrations.RunPython(name_roles_for_write_tools, migrations.RunPython.noop),
    ]
