"""The seeded workspace roles (admins may add more in the admin)."""

# name, label, rank, is_admin, description
DEFAULT_ROLES = [
    ("viewer", "Viewer", 10, False, "Reads and asks; cannot change the knowledge base."),
    ("member", "Member", 20, False, "Asks, saves and edits knowledge."),
    ("admin", "Admin", 30, True, "Manages the workspace; reads every thread; decides approvals."),
]


def ensure_default_roles(role_model) -> None:
    """Create the default roles that are missing (``role_model``: the Role model class)."""
    for name, label, rank, is_admin, description in DEFAULT_ROLES:
        role_model.objects.get_or_create(
            name=name, defaults={"label": label, "rank": rank, "is_admin": is_admin, "description": description}
        )
