"""``manage.py import_knowledge --workspace demo PATH…``: import files into a workspace's
knowledge base (``.md``, ``.txt``, ``.rst``, ``.html``, ``.pdf``; directories recursively).

Idempotent by (workspace, source path, content hash): run it again and unchanged files are
skipped, changed ones updated. A file that fails is reported and the rest go on; the command
exits non-zero when any failed. A progress bar shows on a terminal for 10 files or more.
"""

from __future__ import annotations

import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from chat.models import Workspace
from knowledge.importing import iter_files, knowledge_import_paths

PROGRESS_MIN_FILES = 10


class Command(BaseCommand):
    help = "Import .md/.txt/.rst/.html/.pdf files (or directories of them) into a workspace's knowledge base."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--workspace", required=True, help="Workspace slug.")
        parser.add_argument("--owner", default="", help="Username owning the new items (default: none).")
        parser.add_argument("--type", default="document", help="Item type (default: document).")
        parser.add_argument("--tag", action="append", default=[], help="Tag for every item (repeatable).")
        parser.add_argument("--no-progress", action="store_true", help="Never show the progress bar.")

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace with slug {options['workspace']!r}")
        owner = None
        if options["owner"]:
            owner = get_user_model().objects.filter(username=options["owner"]).first()
            if owner is None:
                raise CommandError(f"no user {options['owner']!r}")
        files = list(iter_files(options["paths"]))
        show = not options["no_progress"] and len(files) >= PROGRESS_MIN_FILES and sys.stderr.isatty()
        bar = tqdm(total=len(files), unit="file", disable=not show, file=sys.stderr)

        def on_file(path, outcome):
            bar.update(1)
            if outcome == "failed" or options["verbosity"] >= 2:
                bar.write(f"{outcome:9} {path}", file=sys.stderr)

        try:
            report = knowledge_import_paths(
                workspace=workspace, paths=files, owner=owner, type=options["type"], tags=options["tag"],
                on_file=on_file,
            )
        finally:
            bar.close()
        self.stdout.write(
            f"{workspace.slug}: {report.created} created, {report.updated} updated, "
            f"{report.unchanged} unchanged, {len(report.failed)} failed"
        )
        for path, reason in report.failed:
            self.stderr.write(f"  failed: {path}: {reason}")
        if report.failed:
            raise CommandError(f"{len(report.failed)} of {report.total} file(s) could not be imported")
