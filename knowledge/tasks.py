"""Celery task of the knowledge base: import one uploaded file (``knowledge/uploads.py``).

``acks_late`` is safe: the import is one transaction and idempotent by source path, and a
finished upload is skipped."""

from celery import shared_task

from .embedding_jobs import EMBED_WORKSPACE_TASK, workspace_embed
from .jobs import IMPORT_UPLOAD_TASK
from .uploads import knowledge_upload_process


@shared_task(name=IMPORT_UPLOAD_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def import_upload_task(upload_id: str) -> None:
    knowledge_upload_process(upload_id=upload_id)


@shared_task(name=EMBED_WORKSPACE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def embed_workspace_task(workspace_id: int) -> None:
    """Embed a workspace's missing vectors (``knowledge/embedding_jobs.py``); idempotent:
    a second run finds nothing missing."""
    workspace_embed(workspace_id=int(workspace_id))
