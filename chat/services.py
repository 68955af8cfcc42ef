"""Writes of the conversation core: threads, messages, preferences. It knows nothing of runs,
tools or governance (``agents.services`` builds the use cases on top of it)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max
from django.http import Http404
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext

from chatplatform.db import retry_transient, update_rows
from chatplatform.errors import ServiceError

from .models import Attachment, AttachmentBlob, Message, Thread, UserPreferences, Workspace
from .selectors import membership_get

TITLE_MAX_CHARS = 60
_LEAF = object()  # message_create's default parent: the end of the selected branch


@retry_transient  # outside the transaction: a lost connection re-runs the whole append
@transaction.atomic(savepoint=False)  # inside a caller's transaction, a failure ends that one
def message_create(*, thread_id, role: str, content: str = "", run=None, parent_id=_LEAF, **fields) -> Message:
    """Append a message to a thread at the next position, at the end of the selected branch.

    Its ``parent`` is the thread's ``leaf`` (or ``parent_id`` when given; None: a new first
    message) and it becomes the new leaf, so the loop's
    messages always continue the branch the turn started on. The thread row is locked for
    the transaction (PostgreSQL ``SELECT … FOR UPDATE``; SQLite's IMMEDIATE transactions
    already serialise writers), so concurrent writers never take the same position.
    """
    leaf_id = Thread.objects.select_for_update().filter(pk=thread_id).values_list("leaf_id", flat=True).get()
    last = Message.objects.filter(thread_id=thread_id).aggregate(last=Max("position"))["last"] or 0
    if parent_id is _LEAF:
        parent_id = leaf_id
        if parent_id is None and last:
            # No leaf although there are messages (a thread saved whole from a stale copy):
            # continue after the newest message, as before branches existed.
            parent_id = Message.objects.filter(thread_id=thread_id, position=last).values_list("pk", flat=True).first()
    message = Message.objects.create(
        thread_id=thread_id, run=run, position=last + 1, role=role, content=content, parent_id=parent_id, **fields
    )
    Thread.objects.filter(pk=thread_id).update(leaf=message, updated_at=timezone.now())
    if parent_id is not None:
        Message.objects.filter(pk=parent_id).update(selected_child=message)
    return message


def messages_save_streamed(*, texts: dict, using: str = "default") -> int:
    """Save the text streamed so far into streaming messages: one ``UPDATE`` run for every
    message in one ``executemany`` (``chatplatform.db.update_rows``).

    ``texts`` is ``{message_id: {"content": str, "reasoning": str?}}`` (each message's fields;
    messages may name different ones: a field a message does not name keeps its value). Only
    messages still ``streaming`` are written: a message's own closing save, committed first,
    is never overwritten with an older partial text. Returns the number of rows written.
    Raises what the database raises (the caller, the lease heartbeat, retries at its next beat)."""
    names = sorted({name for values in texts.values() for name in values})
    now = timezone.now()
    rows = [(*(values.get(name) for name in names), now, pk, Message.Status.STREAMING) for pk, values in texts.items()]
    return update_rows(Message, set_fields=[*names, "updated_at"], where_fields=["id", "status"], rows=rows,
                       set_sql={name: "COALESCE(%s, {col})" for name in names}, using=using)


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


THREAD_FIELDS = ("title", "provider", "model", "assistant_id", "grounded", "allow_model_save", "include_private_in_ai",
                 "prompt_tier", "ui_context", "pinned", "archived", "title_visible_to_admins")


def thread_settings_save(*, thread: Thread, **changes) -> Thread:
    """Save ``thread``'s settings (``THREAD_FIELDS`` only; values already validated — a UI
    context goes through ``agents.services.thread_update``). Raises ``ValueError`` for a name
    that is not a setting."""
    unknown = set(changes) - set(THREAD_FIELDS)
    if unknown:
        raise ValueError(f"not thread settings: {sorted(unknown)}")
    for key, value in changes.items():
        setattr(thread, key, value)
    thread.save(update_fields=[*changes, "updated_at"])
    return thread


def thread_delete(*, thread: Thread) -> None:
    """Delete ``thread`` with its messages, runs and ledger (``thread_get_for_user(..., write=True)``)."""
    thread.delete()


def custom_instructions_set(*, user, text: str) -> UserPreferences:
    """Save ``user``'s custom instructions (surrounding whitespace dropped). Raises
    ``ServiceError`` ``too_long`` (400) over 4000 characters — nothing is cut silently."""
    from chatplatform.errors import ServiceError

    from .selectors import INSTRUCTIONS_MAX_CHARS

    text = (text or "").strip()
    if len(text) > INSTRUCTIONS_MAX_CHARS:
        raise ServiceError("too_long", gettext("Custom instructions are limited to %(limit)s characters (%(n)s given).") % {
            "limit": number_format(INSTRUCTIONS_MAX_CHARS, force_grouping=True),
            "n": number_format(len(text), force_grouping=True)}, 400)
    prefs, _ = UserPreferences.objects.update_or_create(user=user, defaults={"custom_instructions": text})
    return prefs


def attachments_copy(*, targets: dict, owner_id=None) -> int:
    """Copy the attachments of messages to other messages: ``targets`` is ``{source message
    id: target Message}`` (an edited question keeps the files of the version it replaces; a
    duplicated chat keeps every message's files). Each copy belongs to its target's thread
    and to ``owner_id`` (default: the original's owner). Returns how many were copied."""
    originals = list(Attachment.objects.filter(message_id__in=list(targets)).select_related("blob")
                     .order_by("created_at", "id"))
    copies = [Attachment(thread_id=targets[a.message_id].thread_id, owner_id=owner_id or a.owner_id,
                         message=targets[a.message_id], kind=a.kind, filename=a.filename,
                         content_type=a.content_type, size=a.size, model_content_type=a.model_content_type,
                         width=a.width, height=a.height, text=a.text)
              for a in originals]
    Attachment.objects.bulk_create(copies)
    AttachmentBlob.objects.bulk_create([
        AttachmentBlob(attachment=copy, data=a.blob.data, thumbnail=a.blob.thumbnail, model_data=a.blob.model_data)
        for a, copy in zip(originals, copies, strict=True)])
    return len(copies)

def default_model_set(*, user, provider, model: str = "") -> UserPreferences:
    """Save the model ``user``'s new chats start with (``provider`` None: none of their own —
    the workspace's default applies). The caller checked that they may use it
    (``agents.selectors.model_choice_parse``)."""
    prefs, _ = UserPreferences.objects.update_or_create(
        user=user, defaults={"default_provider": provider, "default_model": model if provider is not None else ""})
    return prefs


def workspace_artifacts_set(*, user, workspace_id, enabled: bool) -> Workspace:
    """Turn artifact previews (``Workspace.artifacts_enabled``) on or off in ``workspace_id``.
    Who may: staff, or an admin of that workspace (checked now, at use). Raises Http404 when
    ``user`` is not a member (staff too: the workspace is not theirs to find here), ServiceError
    403 ``not_allowed`` for a member who is not an admin. Returns the saved workspace."""
    membership = membership_get(user=user, workspace_id=workspace_id)
    if membership is None:
        raise Http404("No such workspace.")
    if not (membership.role.is_admin or user.is_staff):
        raise ServiceError("not_allowed", gettext("Only a workspace administrator can change this setting."),
                           status=403)
    workspace = membership.workspace
    workspace.artifacts_enabled = bool(enabled)
    workspace.save(update_fields=["artifacts_enabled"])
    return workspace
