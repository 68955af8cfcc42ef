"""The send path's row locks: one order (user → thread) for every writer that must not
interleave with a send — a new message, an edit or regenerate, a decision — so two of them
never deadlock."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from chat.models import Thread


def lock_user_then_thread(*, user_id=None, thread_id=None) -> None:
    """Row locks, always in the order user → thread, for the rest of the transaction.

    ``FOR NO KEY UPDATE`` on PostgreSQL: it serialises these writers but not rows that merely
    reference the user or thread (a decision stamping ``decided_by`` takes a key-share lock on
    the user; with a plain ``FOR UPDATE`` that and a send by the same user deadlocked). SQLite's
    IMMEDIATE transactions already serialise writers."""
    if user_id is not None:
        list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user_id).values_list("pk", flat=True))
    if thread_id is not None:
        list(Thread.objects.select_for_update(no_key=True).filter(pk=thread_id).values_list("pk", flat=True))
