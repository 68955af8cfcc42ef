"""``manage.py providers_refresh [slug ...]``: probe providers, cache their model listings
and health status (what the admin action "Refresh models and health" does). Exits 1 when a
provider is unreachable or answers with an error (not for "not configured"), so it can run
from cron or a health check."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from agents.catalogue import lists_models, models_refresh
from agents.models import Provider


class Command(BaseCommand):
    help = "Refresh the model listing and health status of providers (all enabled ones by default)."

    def add_arguments(self, parser):
        parser.add_argument("slugs", nargs="*", help="provider slugs (default: every enabled provider)")
        parser.add_argument("--no-details", action="store_true", help="Ollama: skip /api/show per model")

    def handle(self, *args, **options):
        providers = Provider.objects.filter(enabled=True).order_by("slug")
        if options["slugs"]:
            providers = Provider.objects.filter(slug__in=options["slugs"]).order_by("slug")
            missing = set(options["slugs"]) - set(providers.values_list("slug", flat=True))
            if missing:
                raise CommandError(f"no such provider: {', '.join(sorted(missing))}")
        failed = False
        for provider in providers:
            result = models_refresh(provider=provider, details=not options["no_details"])
            listed = f" ({len(result.listed)} models)" if result.ok and lists_models(provider) else ""
            self.stdout.write(f"{provider.slug}: {result.status}{listed}")
            failed = failed or result.status.startswith(("unreachable", "error"))
        if failed:
            sys.exit(1)
