"""Writes for the chat app: threads and messages."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max

from agents.ui_context import ui_context_accept

from .models import Message, Thread, Workspace

TITLE_MAX_CHARS = 60


@transaction.atomic
def message_create(*, thread_id, role: str, content: str = "", run=None, **fields) -> Message:
    """Append a message to a thread at the next position.

    The thread row is locked for the transaction (PostgreSQL ``SELECT … FOR UPDATE``;
    SQLite's IMMEDIATE transactions already serialise writers), so concurrent writers never
    take the same position.
    """
    Thread.objects.select_for_update().filter(pk=thread_id).values_list("pk", flat=True).get()
    last = Message.objects.filter(thread_id=thread_id).aggregate(last=Max("position"))["last"] or 0
    return Message.objects.create(thread_id=thread_id, run=run, position=last + 1, role=role, content=content, **fields)


def thread_create(
    *, workspace: Workspace, owner, title: str = "", provider=None, model: str = "", **settings_fields
) -> Thread:
    if provider is not None and not model:
        model = provider.default_model
    return Thread.objects.create(
        workspace=workspace, owner=owner, title=title.strip()[:200], provider=provider, model=model, **settings_fields
    )


def title_from_message(content: str) -> str:
    """Auto-title: the first line of the first user message, plain text, ≤ 60 chars."""
    line = " ".join(content.strip().split())
    if len(line) <= TITLE_MAX_CHARS:
        return line
    cut = line.rfind(" ", 0, TITLE_MAX_CHARS - 1)
    return (line[: cut if cut > 20 else TITLE_MAX_CHARS - 1]).rstrip() + "…"


@transaction.atomic
def thread_duplicate(*, thread: Thread, owner) -> Thread:
    """A copy of ``thread`` for ``owner`` with a fresh id: settings, and every message in
    order (tool calls and tool results included, so the copy continues on any provider).
    Runs and the tool-call ledger are not copied: they record what happened in the original."""
    copy = Thread.objects.create(
        workspace=thread.workspace,
        owner=owner,
        title=f"{thread.title or 'Chat'} (copy)"[:200],
        provider=thread.provider,
        model=thread.model,
        grounded=thread.grounded,
        allow_model_save=thread.allow_model_save,
        include_private_in_ai=thread.include_private_in_ai,
        ui_context=thread.ui_context,
        prompt_tier=thread.prompt_tier,
    )
    fields = ["position", "role", "content", "reasoning", "tool_calls", "tool_call_id", "is_error", "provider",
              "model", "status", "citations", "usage", "error"]
    Message.objects.bulk_create(
        Message(thread=copy, **{f: getattr(m, f) for f in fields})
        for m in Message.objects.filter(thread=thread).order_by("position")
    )
    return copy


THREAD_FIELDS = ("title", "provider", "model", "grounded", "allow_model_save", "include_private_in_ai",
                 "prompt_tier", "ui_context")


def thread_update(*, thread: Thread, user, **changes) -> Thread:
    """Change ``thread``'s settings (``THREAD_FIELDS`` only). ``thread`` must come from
    ``thread_get_for_user(..., write=True)``. A ``ui_context`` is validated and a rejected one
    audited (``UIContextError``, 413/422)."""
    unknown = set(changes) - set(THREAD_FIELDS)
    if unknown:
        raise ValueError(f"not thread settings: {sorted(unknown)}")
    if "ui_context" in changes:
        changes["ui_context"] = ui_context_accept(raw=changes["ui_context"], user=user,
                                                  workspace_id=thread.workspace_id, thread_id=thread.pk)
    for key, value in changes.items():
        setattr(thread, key, value)
    thread.save(update_fields=[*changes, "updated_at"])
    return thread


def thread_delete(*, thread: Thread) -> None:
    """Delete ``thread`` with its messages, runs and ledger (``thread_get_for_user(..., write=True)``)."""
    thread.delete()
