"""Temporary chats (``Thread.temporary``) are not kept: deleted when their owner closes one
(leaves it, or starts another chat: :func:`temporary_chats_close`) or, by the run reaper,
``CHAT_TEMPORARY_TTL_S`` after their last activity (:func:`temporary_chats_delete_expired`).

A chat with a run that has not finished (queued, running, waiting for approval, or a cancel
its worker has not closed) is never deleted here: deleting it would take the run from under
its worker and leave the run's budget reservation held. It goes once the run is over — its
last message restarts the time to live. Usage records hold no key to a thread (a plain
``thread_id``; ``run`` and ``message`` are ``SET_NULL``), so metering and budgets outlive it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Min, Q, QuerySet
from django.utils import timezone

from chat.models import Thread
from chat.selectors import temporary_expiry_cutoff

from .models import Run

_UNFINISHED = Q(status__in=(Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL)) | Q(
    finished_at__isnull=True)


def _deletable() -> QuerySet[Thread]:
    """Temporary chats without an unfinished run."""
    busy = Run.objects.filter(_UNFINISHED, thread__temporary=True).values("thread_id")
    return Thread.objects.filter(temporary=True).exclude(pk__in=busy)


def temporary_chats_earliest_expiry() -> datetime | None:
    """When the first temporary chat the reaper may delete expires (None: there is none).
    One aggregate query over the partial index ``thread_temporary_recent``."""
    last = _deletable().aggregate(last=Min("updated_at"))["last"]
    return None if last is None else last + timedelta(seconds=settings.CHAT_TEMPORARY_TTL_S)


def temporary_chats_delete_expired(now: datetime | None = None) -> list[str]:
    """Delete every temporary chat whose time to live has passed (messages, runs, ledger and
    files go with it; usage records stay). Returns the ids deleted. The reaper's."""
    expired = _deletable().filter(updated_at__lt=temporary_expiry_cutoff(now or timezone.now()))
    return _delete(expired)


def temporary_chats_close(*, owner, thread_id=None) -> list[str]:
    """``owner`` closed their temporary chat ``thread_id`` (None: every one of theirs — they
    start another chat). Returns the ids deleted."""
    rows = _deletable().filter(owner=owner)
    if thread_id is not None:
        rows = rows.filter(pk=thread_id)
    return _delete(rows)


def _delete(rows: QuerySet[Thread]) -> list[str]:
    ids = [str(pk) for pk in rows.values_list("pk", flat=True)]
    if ids:
        _deletable().filter(pk__in=ids).delete()  # a run sent since is still spared
    return ids
