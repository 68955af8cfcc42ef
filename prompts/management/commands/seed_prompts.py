"""``manage.py seed_prompts``: a few useful workspace prompts in the demo workspace (called by
``seed_demo``). Idempotent: a prompt whose command already exists there is left as it is, so
edits made on the Prompts page survive a re-seed."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from chat.models import Workspace
from prompts.models import Prompt

DEMO_PROMPTS = [
    ("summarize", "Summarize a text",
     "Summarize the text below in {{length|5 bullet points}} for {{audience|a busy colleague}}. Keep names, "
     "numbers, dates and decisions; leave out small talk. End with any open questions.\n\n"),
    ("translate", "Translate",
     "Translate the text below into {{language|German}}. Keep the formatting and the tone; answer with the "
     "translation only.\n\n"),
    ("review", "Review code",
     "Review this {{language|Python}} code for bugs, security problems and readability. List the problems by "
     "severity, each with the line it concerns and a fix.\n\n```\n\n```"),
    ("reply", "Draft an email reply",
     "Draft a reply to the email below. It should say: {{what to say}}. Tone: {{tone|friendly and brief}}. "
     "Sign it as {{name}}.\n\n"),
]


class Command(BaseCommand):
    help = "Seed the demo workspace's shared prompts (idempotent)."

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(slug="demo").first()
        author = get_user_model().objects.filter(username="admin").first()
        if workspace is None or author is None:
            self.stdout.write("prompts: no demo workspace or admin user; nothing seeded")
            return
        made = 0
        for command, title, body in DEMO_PROMPTS:
            _, created = Prompt.objects.get_or_create(workspace=workspace, command=command,
                                                      defaults={"owner": author, "title": title, "body": body})
            made += created
        self.stdout.write(f"prompts: {made} demo workspace prompts added ({len(DEMO_PROMPTS) - made} already there)")
