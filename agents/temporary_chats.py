"""Temporary chats (``Thread.temporary``) are not kept: closed when their owner leaves one
(or starts another chat: :func:`temporary_chats_close`) or, by the run reaper,
``CHAT_TEMPORARY_TTL_S`` after their last activity (:func:`temporary_chats_delete_expired`).

A closed or expired chat is gone for everyone at once (``chat.selectors.thread_expired``), and
deleted — unless its tool calls still count towards a per-tool limit (a call made since the
start of the current UTC month: the longest limit window). Deleting those would take them out
of the ledger the limits count, so a person could reset a tool's quota by closing temporary
chats; such a chat is *erased* instead (its messages' text and its files removed, the ledger
rows kept) and deleted by the reaper once the month has turned.

A chat with a run that has not finished (queued, running, waiting for approval, or a cancel
its worker has not closed) is never closed here: deleting it would take the run from under
its worker and leave the run's budget reservation held. It goes once the run is over — its
last message restarts the time to live. Usage records hold no key to a thread (a plain
``thread_id``; ``run`` and ``message`` are ``SET_NULL``), so metering and budgets outlive it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Min, Q, QuerySet
from django.utils import timezone

from chat.models import Attachment, Message, Thread
from chat.selectors import temporary_expiry_cutoff
from chatplatform.periods import window_bounds

from .models import Run, ToolCall

_UNFINISHED = Q(status__in=(Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL)) | Q(
    finished_at__isnull=True)


def _deletable() -> QuerySet[Thread]:
    """Temporary chats without an unfinished run."""
    busy = Run.objects.filter(_UNFINISHED, thread__temporary=True).values("thread_id")
    return Thread.objects.filter(temporary=True).exclude(pk__in=busy)


def _ledger_held(now: datetime):
    """Ids of temporary chats with a tool call that counts towards a limit window still open."""
    return ToolCall.objects.filter(run__thread__temporary=True, status__in=ToolCall.COUNTED,
                                   created_at__gte=window_bounds("month", now)[0]).values("run__thread_id")


def temporary_chats_earliest_expiry(now: datetime | None = None) -> datetime | None:
    """When the reaper next has a temporary chat to close or delete (None: none). Two aggregate
    queries over the partial index ``thread_temporary_recent``."""
    now = now or timezone.now()
    held = _ledger_held(now)
    last = _deletable().exclude(pk__in=held).aggregate(last=Min("updated_at"))["last"]
    due = None if last is None else last + timedelta(seconds=settings.CHAT_TEMPORARY_TTL_S)
    if _deletable().filter(pk__in=held).exists():  # erased chats go when the month turns
        month = window_bounds("month", now)[1]
        due = month if due is None else min(due, month)
    return due


def temporary_chats_delete_expired(now: datetime | None = None) -> list[str]:
    """Close every temporary chat whose time to live has passed (deleted with its messages,
    runs, ledger and files — or erased while its ledger counts; usage records stay). Returns
    the ids closed. The reaper's."""
    now = now or timezone.now()
    return _close(_deletable().filter(updated_at__lt=temporary_expiry_cutoff(now)), now)


def temporary_chats_close(*, owner, thread_id=None) -> list[str]:
    """``owner`` closed their temporary chat ``thread_id`` (None: every one of theirs — they
    start another chat). Returns the ids closed."""
    rows = _deletable().filter(owner=owner)
    if thread_id is not None:
        rows = rows.filter(pk=thread_id)
    return _close(rows, timezone.now())


def _close(rows: QuerySet[Thread], now: datetime) -> list[str]:
    ids = [str(pk) for pk in rows.values_list("pk", flat=True)]
    if not ids:
        return ids
    with transaction.atomic():
        rows = _deletable().filter(pk__in=ids)  # a run sent since is still spared
        held = rows.filter(pk__in=_ledger_held(now))
        # Erased: gone for everyone now (past its time to live), its words and files removed.
        Attachment.objects.filter(thread__in=held).delete()
        Message.objects.filter(thread__in=held).update(content="", reasoning="", citations=[], error={})
        held.update(title="", updated_at=temporary_expiry_cutoff(now) - timedelta(seconds=1))
        rows.exclude(pk__in=_ledger_held(now)).delete()
    return ids
