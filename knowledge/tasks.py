"""Celery task of the knowledge base: import one uploaded file (``knowledge/uploads.py``).

``acks_late`` is safe: the import is one transaction and idempotent by source path, and a
finished upload is skipped."""

from celery import shared_task

from .jobs import IMPORT_UPLOAD_TASK
from .uploads import knowledge_upload_process


@shared_task(name=IMPORT_UPLOAD_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def import_upload_task(upload_id: str) -> None:
    knowledge_upload_process(upload_id=upload_id)
