"""``manage.py embed_knowledge [--workspace SLUG]… [--all]``: compute the missing vectors of
the configured embedding model (``KNOWLEDGE_EMBEDDINGS``, ``KNOWLEDGE_EMBEDDING_MODEL``) now,
in this process, for the workspaces named (or all with knowledge). After a change of model it
re-embeds while searches keep using the previous vectors; they switch when a workspace is
complete. ``--background`` hands the work to the executor instead (Celery in production).
Exits 1 when a workspace failed (the model or endpoint could not answer)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from chat.models import Workspace
from knowledge.embedding_jobs import embedding_enqueue, embedding_status, workspace_embed
from knowledge.embeddings import current_spec
from knowledge.models import KnowledgeChunk


class Command(BaseCommand):
    help = "Embed (or re-embed after a model change) the knowledge chunks of workspaces."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", action="append", default=[], help="Workspace slug (repeatable).")
        parser.add_argument("--all", action="store_true", help="Every workspace with knowledge (the default).")
        parser.add_argument("--background", action="store_true",
                            help="Enqueue on the executor (Celery in production) instead of embedding here.")

    def handle(self, *args, **options):
        spec = current_spec()
        if spec is None:
            raise CommandError("embeddings are off (KNOWLEDGE_EMBEDDINGS=off)")
        if options["workspace"]:
            workspaces = list(Workspace.objects.filter(slug__in=options["workspace"]))
            missing = set(options["workspace"]) - {w.slug for w in workspaces}
            if missing:
                raise CommandError(f"no workspace with slug {', '.join(sorted(missing))}")
        else:
            workspaces = list(Workspace.objects.filter(pk__in=KnowledgeChunk.objects.values("workspace_id")))
        failed = False
        for workspace in workspaces:
            if options["background"]:
                embedding_enqueue(workspace.pk)
                self.stdout.write(f"{workspace.slug}: queued ({spec.key})")
                continue

            def progress(_stored, workspace=workspace):
                status = embedding_status(workspace_id=workspace.pk) or {}
                if options["verbosity"] >= 1:
                    self.stdout.write(f"{workspace.slug}: {status.get('embedded')}/{status.get('total')} chunks")

            outcome = workspace_embed(workspace_id=workspace.pk, on_batch=progress)
            status = embedding_status(workspace_id=workspace.pk) or {}
            line = f"{workspace.slug}: {outcome} — {status.get('embedded')}/{status.get('total')} chunks with {spec.key}"
            if outcome == "failed":
                failed = True
                line += f" ({status.get('error')})"
            self.stdout.write(line)
        if failed:
            raise SystemExit(1)
