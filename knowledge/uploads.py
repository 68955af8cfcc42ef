"""Files uploaded from the browser (or the REST API) into a workspace's knowledge base.

Two steps, so no request ever parses a PDF:

1. ``knowledge_upload_create`` (in the request): checks the write policy, the file type and
   the size, stores the bytes in a ``KnowledgeUpload`` row (``queued``) and hands its id to
   the executor once the transaction commits.
2. ``knowledge_upload_process`` (in the executor: a thread of the embedded pool, or the
   Celery task ``knowledge.import_upload``): claims the row, parses the bytes with the
   same extractors as ``manage.py import_knowledge`` (``importing.extract_bytes``) and
   creates or updates the item in **one transaction** — a file that fails leaves nothing
   behind. The bytes are cleared when it ends, whatever the outcome.

Re-uploading a file of the same name by the same person into the same workspace updates
that item (unchanged content → ``unchanged``), as a re-import does.

Limits (settings): ``KNOWLEDGE_MAX_FILE_BYTES`` per file (default 20 MiB, shared with
``import_knowledge``) and ``KNOWLEDGE_UPLOAD_MAX_PENDING`` unfinished uploads per person
(default 200).
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _

from chat.models import Workspace
from chatplatform.locale import file_size

from .importing import SUFFIXES, ImportFailed, extract_bytes, max_file_bytes
from .models import KnowledgeItem, KnowledgeUpload
from .selectors import knowledge_can_create
from .services import KnowledgeRejected, content_hash, knowledge_item_create, knowledge_item_update

logger = logging.getLogger(__name__)

Status = KnowledgeUpload.Status
SOURCE_PREFIX = "upload:"


def upload_max_bytes() -> int:
    return max_file_bytes()


def upload_source_path(*, owner_id: int, filename: str) -> str:
    """The item's ``source_path`` for an upload: per person and file name, so a re-upload
    updates the same item and two people's ``README.md`` stay two items."""
    return f"{SOURCE_PREFIX}{owner_id}/{filename}"[:500]


def clean_filename(name: str) -> str:
    """The last path component of a client-supplied name, without control characters,
    at most 255 characters (keeping the suffix)."""
    base = Path((name or "").replace("\\", "/")).name
    base = "".join(ch for ch in base if ch.isprintable()).strip()
    if len(base) > 255:
        suffix = Path(base).suffix[:20]
        base = base[: 255 - len(suffix)] + suffix
    return base



def knowledge_upload_check(*, filename: str, size: int) -> None:
    """Reject early what can never import. Raises KnowledgeRejected: ``unsupported_type``
    (415), ``too_large`` (413), ``empty`` (422)."""
    suffix = Path(filename).suffix.lower()
    if not filename or suffix not in SUFFIXES:
        allowed = ", ".join(sorted(SUFFIXES))
        raise KnowledgeRejected(
            "unsupported_type", _("%(file)s: unsupported file type %(suffix)s (use %(allowed)s).") % {
                "file": filename or _("The file"), "suffix": suffix or _("(none)"), "allowed": allowed}, 415
        )
    limit = upload_max_bytes()
    if size > limit:
        raise KnowledgeRejected("too_large", _("%(file)s: larger than the %(limit)s limit (%(size)s).") % {
            "file": filename, "limit": file_size(limit), "size": file_size(size)}, 413)
    if size == 0:
        raise KnowledgeRejected("empty", _("%(file)s: the file is empty.") % {"file": filename}, 422)


def knowledge_upload_create(
    *,
    user,
    workspace: Workspace,
    filename: str,
    data: bytes,
    type: str = "document",
    tags: list[str] | None = None,
    is_private: bool = False,
) -> KnowledgeUpload:
    """Store one uploaded file and queue its import. ``workspace`` comes from
    ``workspace_get_for_user``. Raises KnowledgeRejected: ``forbidden`` (403, viewers),
    ``unsupported_type`` (415), ``too_large`` (413), ``empty`` (422), ``too_many`` (429,
    more than ``KNOWLEDGE_UPLOAD_MAX_PENDING`` unfinished uploads)."""
    from .jobs import enqueue_upload
    from .services import normalize_tags, normalize_type

    if not knowledge_can_create(user=user, workspace=workspace):
        raise KnowledgeRejected("forbidden", _("Your role in this workspace can read the knowledge base but not add to "
                                  "it."), 403)
    filename = clean_filename(filename)
    knowledge_upload_check(filename=filename, size=len(data))
    pending = KnowledgeUpload.objects.filter(owner=user, status__in=[Status.QUEUED, Status.IMPORTING]).count()
    if pending >= int(getattr(settings, "KNOWLEDGE_UPLOAD_MAX_PENDING", 200)):
        raise KnowledgeRejected("too_many", "Too many files are still being imported; wait for them to finish.", 429)
    upload = KnowledgeUpload.objects.create(
        workspace=workspace, owner=user, filename=filename, size=len(data), data=data,
        type=normalize_type(type), tags=normalize_tags(tags), is_private=bool(is_private),
    )
    transaction.on_commit(lambda: enqueue_upload(upload.pk))
    return upload


def _claim(upload_id) -> bool:
    """queued|importing → importing. ``importing`` may be claimed again: a worker that died
    mid-import left nothing (the import is one transaction), so redoing it is safe."""
    return bool(KnowledgeUpload.objects.filter(pk=upload_id, status__in=[Status.QUEUED, Status.IMPORTING])
                .update(status=Status.IMPORTING))


def _finish(upload_id, *, status: str, error: str = "", item_id=None) -> None:
    KnowledgeUpload.objects.filter(pk=upload_id).update(
        status=status, error=error[:500], item_id=item_id, data=b"", finished_at=timezone.now()
    )


def knowledge_upload_process(*, upload_id) -> str:
    """Import upload ``upload_id`` (executor side). Returns the final status (``created``,
    ``updated``, ``unchanged``, ``failed``), or the current one when the upload was already
    done. Never raises for a bad file: the reason goes to ``error``."""
    if not _claim(upload_id):
        return KnowledgeUpload.objects.filter(pk=upload_id).values_list("status", flat=True).first() or ""
    upload = KnowledgeUpload.objects.select_related("workspace", "owner").get(pk=upload_id)
    try:
        # Permission at invocation: the person may have lost the right since uploading.
        if not knowledge_can_create(user=upload.owner, workspace=upload.workspace_id):
            raise ImportFailed("you can no longer add to this workspace's knowledge base")
        title, text = extract_bytes(upload.filename, bytes(upload.data))
        source = upload_source_path(owner_id=upload.owner_id, filename=upload.filename)
        with transaction.atomic():
            existing = (KnowledgeItem.objects.select_for_update()
                        .filter(workspace_id=upload.workspace_id, source_path=source).first())
            if existing is None:
                item = knowledge_item_create(
                    workspace=upload.workspace, owner=upload.owner, title=title, content=text, type=upload.type,
                    tags=upload.tags, source_path=source, is_private=upload.is_private,
                )
                outcome = Status.CREATED
            elif existing.content_hash == content_hash(title, text):
                item, outcome = existing, Status.UNCHANGED
            else:
                item = knowledge_item_update(item=existing, title=title, content=text)
                outcome = Status.UPDATED
            _finish(upload_id, status=outcome, item_id=item.pk)
        return outcome
    except ImportFailed as exc:
        _finish(upload_id, status=Status.FAILED, error=f"{upload.filename}: {exc}")
    except KnowledgeRejected as exc:
        _finish(upload_id, status=Status.FAILED, error=f"{upload.filename}: {exc.message}")
    except Exception as exc:  # a bug or a database error: the person still gets an answer
        logger.exception("upload %s failed", upload_id)
        _finish(upload_id, status=Status.FAILED, error=f"{upload.filename}: internal error ({type(exc).__name__})")
    return Status.FAILED


# --- reads ----------------------------------------------------------------------------------
def knowledge_upload_get_for_user(*, user, upload_id) -> KnowledgeUpload:
    """The caller's own upload; anything else (another person's, a bad id) → Http404."""
    try:
        return KnowledgeUpload.objects.defer("data").get(pk=upload_id, owner=user)
    except (KnowledgeUpload.DoesNotExist, ValueError, TypeError, Exception) as exc:  # bad UUID: ValidationError
        raise Http404("No such upload.") from exc


def knowledge_upload_list_for_user(*, user):
    """The caller's uploads, newest first (bytes deferred)."""
    return KnowledgeUpload.objects.defer("data").filter(owner=user).select_related("workspace")
