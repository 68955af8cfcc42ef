"""``manage.py seed_policy_history``: 14 days of recorded tool calls in the demo workspace
(``policies.demo_history``), to try policy simulation on. Run after ``seed_demo``; a second
run adds nothing."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from chat.models import Membership, Thread
from policies.demo_history import seed_history


class Command(BaseCommand):
    help = "Record a demo history of tool calls for policy simulation (after seed_demo; idempotent)."

    def handle(self, *args, **options):
        if Thread.objects.filter(title="Policy history").exists():
            self.stdout.write("policy history: already seeded")
            return
        names = ["alice", "bob", "carol", "admin", "dave"]
        users = {u.username: u for u in get_user_model().objects.filter(username__in=names)}
        if len(users) != len(names):
            raise CommandError("Run seed_demo first: the demo users are missing.")
        workspaces = dict(Membership.objects.filter(user__username__in=names).values_list("user__username",
                                                                                            "workspace_id"))
        with transaction.atomic():
            written = seed_history(users=users, workspace_ids=workspaces)
        self.stdout.write(f"policy history: {written} tool calls recorded")
