"""``manage.py seed_demo``: demo workspaces, users, knowledge and providers. Idempotent.

Users alice, bob (members of demo), carol (viewer of demo), dave (member of other),
admin (superuser, admin of demo) and erin (admin of demo, the second pair of eyes). Password: ``$DEMO_PASSWORD``, else a random one printed
once when the users are first created. Providers: always ``offline``; ``openai`` from
``OPENAI_API_KEY`` (+ ``OPENAI_BASE_URL``, ``OPENAI_MODEL``); ``hermes`` (an agent provider) from
``HERMES_API_KEY`` (+ ``HERMES_API_BASE``); ``anthropic`` from
``ANTHROPIC_API_KEY`` (+ ``ANTHROPIC_BASE_URL``); ``ollama`` from ``OLLAMA_BASE_URL``.
Without a key, ``openai`` and ``anthropic`` rows still exist and show as "not configured: set
OPENAI_API_KEY" (``provider_placeholders``). ``manage.py providers_refresh`` lists models.
"""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from agents.models import LLMModel, Provider, Role
from agents.pipeline import tool_policies_sync
from chat.models import Membership, Workspace
from knowledge.pydoc_import import import_python_reference

USERS = [
    # username, workspace, role, superuser
    ("alice", "demo", "member", False),
    ("bob", "demo", "member", False),
    ("carol", "demo", "viewer", False),
    ("dave", "other", "member", False),
    ("admin", "demo", "admin", True),
    # A second admin of demo (not a superuser): the four-eyes features — break-glass into an
    # admin-blind chat, policy changes — need someone other than the requester to decide.
    ("erin", "demo", "admin", False),
]


def providers_from_environment() -> list[dict]:
    """Provider rows the environment asks for (no key values: only variable names)."""
    rows = [
        {"slug": "offline", "name": "Offline (no LLM)", "kind": "offline", "base_url": "", "api_key_env": "",
         "default_model": "rule-based"},
    ]
    if os.environ.get("OPENAI_API_KEY"):
        rows.append({
            "slug": "openai", "name": "OpenAI", "kind": "openai_compatible",
            "base_url": os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
            "api_key_env": "OPENAI_API_KEY", "default_model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
        })
    if os.environ.get("ANTHROPIC_API_KEY"):
        rows.append({
            "slug": "anthropic", "name": "Anthropic", "kind": "anthropic",
            "base_url": os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
            "api_key_env": "ANTHROPIC_API_KEY",
            "default_model": os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5"),
        })
    if os.environ.get("HERMES_API_KEY"):  # a remote agent (agents/agent_runs): admins use it to run servers
        rows.append({
            "slug": "hermes", "name": "Hermes agent", "kind": "agent_runs",
            "base_url": os.environ.get("HERMES_API_BASE", "http://127.0.0.1:8642/v1"),
            "api_key_env": "HERMES_API_KEY", "default_model": "hermes-agent",
        })
    if os.environ.get("OLLAMA_BASE_URL"):
        rows.append({
            "slug": "ollama", "name": "Ollama", "kind": "ollama", "base_url": os.environ["OLLAMA_BASE_URL"],
            "api_key_env": "", "default_model": os.environ.get("OLLAMA_MODEL", "llama3.2"),
        })
    return rows


def provider_placeholders() -> list[dict]:
    """OpenAI and Anthropic rows that exist even without a key, so the UI and the API say
    "not configured: set OPENAI_API_KEY" instead of hiding them. Created once, never
    overwritten (an admin may have changed them)."""
    return [
        {"slug": "openai", "name": "OpenAI", "kind": "openai_compatible", "base_url": "https://api.openai.com/v1",
         "api_key_env": "OPENAI_API_KEY", "default_model": "gpt-4o-mini"},
        {"slug": "anthropic", "name": "Anthropic", "kind": "anthropic", "base_url": "https://api.anthropic.com",
         "api_key_env": "ANTHROPIC_API_KEY", "default_model": "claude-sonnet-4-5"},
    ]


class Command(BaseCommand):
    help = "Create the demo workspaces, users, knowledge base and providers (idempotent)."

    def handle(self, *args, **options):
        with transaction.atomic():
            password, created_users = self._users()
            for row in providers_from_environment():
                provider, _ = Provider.objects.update_or_create(slug=row.pop("slug"), defaults=row)
                LLMModel.objects.get_or_create(provider=provider, name=provider.default_model)
            for row in provider_placeholders():
                provider, created = Provider.objects.get_or_create(slug=row.pop("slug"), defaults=row)
                if created:
                    LLMModel.objects.get_or_create(provider=provider, name=provider.default_model)
            tool_policies_sync()
        demo = Workspace.objects.get(slug="demo")
        created, updated = import_python_reference(workspace=demo, owner=get_user_model().objects.get(username="admin"))
        self.stdout.write(f"knowledge: {created} topics imported, {updated} refreshed (Python Language Reference)")
        # Budget defaults live with the usage app (called by name: chat does not import it).
        call_command("seed_usage", stdout=self.stdout)
        call_command("seed_prompts", stdout=self.stdout)  # the prompt library's demo workspace prompts
        providers = ", ".join(Provider.objects.order_by("slug").values_list("slug", flat=True))
        self.stdout.write(f"providers: {providers}")
        self._mcp_demo()
        if created_users and password:
            self.stdout.write(self.style.WARNING(
                f"demo users {', '.join(created_users)} created; password: {password}  (shown once; set DEMO_PASSWORD to choose it)"
            ))
        elif created_users:
            self.stdout.write(f"demo users {', '.join(created_users)} created with $DEMO_PASSWORD")

    def _mcp_demo(self) -> None:
        """The demo's external MCP server (mcp-server-time): connect once and list its tools."""
        from mcp_client import sync

        server = sync.seed_demo_time_server()
        try:
            report = sync.refresh(server)
        finally:
            sync.reset()
        offered = ", ".join(t.exposed_name for t in report.tools if t.policy and t.policy.enabled) or "none"
        self.stdout.write(f"mcp: {server.slug} {report.health}; offered tools: {offered}")

    def _users(self) -> tuple[str | None, list[str]]:
        User = get_user_model()
        chosen = os.environ.get("DEMO_PASSWORD") or ""
        password = chosen or secrets.token_urlsafe(9)
        workspaces = {
            "demo": Workspace.objects.get_or_create(slug="demo", defaults={"name": "Demo team"})[0],
            "other": Workspace.objects.get_or_create(slug="other", defaults={"name": "Other team"})[0],
        }
        # The demo shows admin-blind chats on (a database from before the setting stored False).
        Workspace.objects.filter(pk=workspaces["demo"].pk, admin_blind=False).update(admin_blind=True)
        roles = {r.name: r for r in Role.objects.all()}
        created_users = []
        for username, ws, role, superuser in USERS:
            user, created = User.objects.get_or_create(
                username=username, defaults={"email": f"{username}@example.com", "is_staff": superuser, "is_superuser": superuser}
            )
            if created or chosen:
                user.set_password(password)
                user.save()
            if created:
                created_users.append(username)
            Membership.objects.update_or_create(user=user, workspace=workspaces[ws], defaults={"role": roles[role]})
        return (None if chosen else password), created_users
