"""Thread changes that touch runs or governance: choosing a branch (not while a reply is
being written), duplicating a thread with its tool-call outcomes, and changing settings with a
UI context (validated and, when refused, audited)."""

from __future__ import annotations

from itertools import pairwise

from django.db import transaction
from django.http import Http404

from agents.loop.execute import arguments_summary
from agents.models import ToolCall
from agents.ui_context import ui_context_accept
from chat.models import Message, Thread
from chat.selectors import message_branch_for_thread, message_newest_leaf_under
from chat.services import attachments_copy, thread_settings_save

from .sends import ensure_no_open_run


def thread_changes_check(*, thread: Thread, user, changes: dict) -> dict:
    """``changes`` to ``thread``'s settings, checked: a ``ui_context`` is validated and a rejected
    one audited (``UIContextError``, 413/422). Call it before a transaction that may roll back,
    so the refusal's audit row stays."""
    if "ui_context" in changes:
        changes = {**changes, "ui_context": ui_context_accept(
            raw=changes["ui_context"], user=user, workspace_id=thread.workspace_id, thread_id=thread.pk)}
    return changes


def thread_update(*, thread: Thread, user, checked: bool = False, **changes) -> Thread:
    """Change ``thread``'s settings (``chat.services.THREAD_FIELDS`` only). ``thread`` must come
    from ``thread_get_for_user(..., write=True)``. ``changes`` are checked by
    :func:`thread_changes_check` unless ``checked`` says they already were; ``ValueError`` for a
    name that is not a setting."""
    if not checked:
        changes = thread_changes_check(thread=thread, user=user, changes=changes)
    return thread_settings_save(thread=thread, **changes)


# Copied tool calls keep what happened in the original; a call that was still open there
# did not run in the copy.
_OPEN_CALL_STATUSES = {"pending", "awaiting_approval", "approved", "running"}


def _tool_call_snapshots(messages: list[Message]) -> dict:
    """``(message_id, call_id) → {status, summary, is_error, arguments_summary, decision,
    decided_by}`` from the ledger (or from an earlier snapshot in a copy of a copy)."""
    ids = [m.pk for m in messages if m.tool_calls]
    out = {}
    for tc in ToolCall.objects.filter(message_id__in=ids).select_related("decided_by"):
        shown = {k: v for k, v in (tc.arguments or {}).items() if k not in ("workspace_id", "thread_id", "user_id")}
        out[(tc.message_id, tc.call_id)] = {
            "status": "expired" if tc.status in _OPEN_CALL_STATUSES else tc.status,
            "summary": tc.summary, "is_error": tc.is_error,
            "arguments_summary": arguments_summary(shown) if tc.arguments else "",
            "decision": tc.decision or "", "decided_by": tc.decided_by.get_username() if tc.decided_by else "",
        }
    for m in messages:
        for call in m.tool_calls or []:
            if "status" in call and (m.pk, call["id"]) not in out:
                out[(m.pk, call["id"])] = {k: call[k] for k in call if k not in ("id", "name", "arguments")}
    return out


@transaction.atomic
def thread_duplicate(*, thread: Thread, owner) -> Thread:
    """A copy of ``thread`` for ``owner`` with a fresh id: settings, and every message with
    its branch structure and selected branch (tool calls and tool results included, so the
    copy continues on any provider). Runs and the tool-call ledger are not copied: each
    copied tool call keeps a snapshot of its outcome (status, summary, arguments summary,
    who decided), shown where the ledger would be. The owner's copy of their own chat stays
    in its folder with its tags (``chat.organise``); anyone else's copy is in none."""
    own = owner.pk == thread.owner_id
    copy = Thread.objects.create(
        folder_id=thread.folder_id if own else None,
        workspace=thread.workspace,
        owner=owner,
        title=f"{thread.title or 'Chat'} (copy)"[:200],
        provider=thread.provider,
        model=thread.model,
        assistant_id=thread.assistant_id,
        grounded=thread.grounded,
        allow_model_save=thread.allow_model_save,
        include_private_in_ai=thread.include_private_in_ai,
        ui_context=thread.ui_context,
        prompt_tier=thread.prompt_tier,
    )
    fields = ["position", "role", "content", "reasoning", "tool_call_id", "is_error", "provider",
              "model", "status", "citations", "usage", "error"]
    originals = list(Message.objects.filter(thread=thread).order_by("position"))
    snapshots = _tool_call_snapshots(originals)
    copies = {}
    for m in originals:
        calls = [{"id": c["id"], "name": c["name"], "arguments": c.get("arguments", "{}"),
                  **snapshots.get((m.pk, c["id"]), {})} for c in m.tool_calls or []]
        copies[m.pk] = Message(thread=copy, tool_calls=calls, **{f: getattr(m, f) for f in fields})
    Message.objects.bulk_create(copies.values())
    for m in originals:
        copies[m.pk].parent = copies.get(m.parent_id)
        copies[m.pk].selected_child = copies.get(m.selected_child_id)
    Message.objects.bulk_update(copies.values(), ["parent", "selected_child"])
    if own:
        copy.tags.set(thread.tags.all())
    attachments_copy(targets={m.pk: copies[m.pk] for m in originals if m.role == Message.Role.USER},
                     owner_id=owner.pk)
    leaf = copies.get(thread.leaf_id) or (copies[originals[-1].pk] if originals else None)
    if leaf is not None:
        Thread.objects.filter(pk=copy.pk).update(leaf=leaf)
        copy.leaf = leaf
    return copy


@transaction.atomic
def thread_branch_select(*, thread: Thread, message_id) -> Message:
    """Show the version ``message_id`` of its place in the conversation: the thread's leaf
    becomes the end of the newest branch below it. Returns the new leaf.

    ``thread`` comes from ``thread_get_for_user(..., write=True)``. Raises ``Http404`` for a
    message of another thread and ``RunRejected`` ``run_in_progress`` (409) while a reply is
    being written (its messages continue the current branch).
    """
    thread = Thread.objects.select_for_update().get(pk=thread.pk)
    try:
        message = Message.objects.get(pk=message_id, thread=thread)
    except (Message.DoesNotExist, ValueError, TypeError, Exception) as exc:
        raise Http404("No such message.") from exc
    ensure_no_open_run(thread)
    leaf = message_newest_leaf_under(message=message)
    Thread.objects.filter(pk=thread.pk).update(leaf=leaf)
    for parent, child in pairwise(message_branch_for_thread(thread_id=thread.pk, leaf_id=leaf.pk)):
        if parent.selected_child_id != child.pk:
            Message.objects.filter(pk=parent.pk).update(selected_child=child)
    return leaf
