"""Writes for the chat app: threads and messages."""

from __future__ import annotations

from itertools import pairwise

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from agents.ui_context import ui_context_accept
from chatplatform.db import retry_transient, update_rows

from .models import Message, Thread, UserPreferences, Workspace

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


# Copied tool calls keep what happened in the original; a call that was still open there
# did not run in the copy.
_OPEN_CALL_STATUSES = {"pending", "awaiting_approval", "approved", "running"}


def _tool_call_snapshots(messages: list[Message]) -> dict:
    """``(message_id, call_id) → {status, summary, is_error, arguments_summary, decision,
    decided_by}`` from the ledger (or from an earlier snapshot in a copy of a copy)."""
    from agents.loop.execute import arguments_summary
    from agents.models import ToolCall

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
    who decided), shown where the ledger would be."""
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
    leaf = copies.get(thread.leaf_id) or (copies[originals[-1].pk] if originals else None)
    if leaf is not None:
        Thread.objects.filter(pk=copy.pk).update(leaf=leaf)
        copy.leaf = leaf
    return copy


THREAD_FIELDS = ("title", "provider", "model", "grounded", "allow_model_save", "include_private_in_ai",
                 "prompt_tier", "ui_context", "pinned", "archived")


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


def _ensure_no_open_run(thread: Thread) -> None:
    from agents.models import Run
    from agents.services import RunRejected

    if Run.objects.filter(thread=thread, status__in=[
        Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL,
    ]).exists():
        raise RunRejected("run_in_progress", "Stop or finish the current reply first.", 409)


def _lock_for_send(*, user, thread_id) -> Thread:
    """Row locks in the order run_create takes them (user → thread), so an edit or a
    regenerate never deadlocks with a concurrent send."""
    from django.contrib.auth import get_user_model

    list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user.pk).values_list("pk", flat=True))
    return Thread.objects.select_for_update(no_key=True).get(pk=thread_id)


def _turn_question(message: Message) -> Message | None:
    """The user message whose turn ``message`` belongs to (itself for a user message)."""
    current: Message | None = message
    while current is not None and current.role != Message.Role.USER:
        current = current.parent
    return current


@transaction.atomic
def message_regenerate(*, message: Message, user, **run_options):
    """Run the turn of ``message`` again as a new version of its answer: the question stays
    the same message (no new user message), the earlier answer stays as a sibling version.

    ``message`` comes from ``message_get_for_user(..., write=True)``; a user message or any
    message of its answer. Returns ``agents.services.RunCreated``. Raises ``RunRejected``:
    ``run_in_progress`` (409), ``no_question`` (400, nothing asked before it), and those of
    ``run_create``. ``run_options`` are ``run_create``'s (grounded, include_private, env_id).
    """
    from agents.services import RunRejected, run_create

    thread = _lock_for_send(user=user, thread_id=message.thread_id)
    _ensure_no_open_run(thread)
    question = _turn_question(message)
    if question is None:
        raise RunRejected("no_question", "There is no question before this message to answer again.", 400)
    Thread.objects.filter(pk=thread.pk).update(leaf=question)
    return run_create(thread=thread, user=user, content=question.content, user_message=question, **run_options)


@transaction.atomic
def message_edit(*, message: Message, user, content: str, **run_options):
    """Send an edited version of user message ``message``: a new user message beside it (same
    parent) and a run that answers it; the original and its answers stay as version 1.

    Raises ``RunRejected``: ``not_a_question`` (400, not a user message),
    ``run_in_progress`` (409), and those of ``run_create`` (empty, too long, rate limits).
    """
    from agents.services import RunRejected, run_create

    if message.role != Message.Role.USER:
        raise RunRejected("not_a_question", "Only your own messages can be edited.", 400)
    thread = _lock_for_send(user=user, thread_id=message.thread_id)
    _ensure_no_open_run(thread)
    if isinstance(content, str) and content.strip():
        edited = message_create(thread_id=thread.pk, role=Message.Role.USER, content=content,
                                parent_id=message.parent_id)
    else:
        edited = None  # run_create refuses the empty text with its usual error
    return run_create(thread=thread, user=user, content=content, user_message=edited, **run_options)


@transaction.atomic
def thread_branch_select(*, thread: Thread, message_id) -> Message:
    """Show the version ``message_id`` of its place in the conversation: the thread's leaf
    becomes the end of the newest branch below it. Returns the new leaf.

    ``thread`` comes from ``thread_get_for_user(..., write=True)``. Raises ``Http404`` for a
    message of another thread and ``RunRejected`` ``run_in_progress`` (409) while a reply is
    being written (its messages continue the current branch).
    """
    from django.http import Http404

    from .selectors import message_branch_for_thread, message_newest_leaf_under

    thread = Thread.objects.select_for_update().get(pk=thread.pk)
    try:
        message = Message.objects.get(pk=message_id, thread=thread)
    except (Message.DoesNotExist, ValueError, TypeError, Exception) as exc:
        raise Http404("No such message.") from exc
    _ensure_no_open_run(thread)
    leaf = message_newest_leaf_under(message=message)
    Thread.objects.filter(pk=thread.pk).update(leaf=leaf)
    for parent, child in pairwise(message_branch_for_thread(thread_id=thread.pk, leaf_id=leaf.pk)):
        if parent.selected_child_id != child.pk:
            Message.objects.filter(pk=parent.pk).update(selected_child=child)
    return leaf


def custom_instructions_set(*, user, text: str) -> UserPreferences:
    """Save ``user``'s custom instructions (surrounding whitespace dropped). Raises
    ``ServiceError`` ``too_long`` (400) over 4000 characters — nothing is cut silently."""
    from chatplatform.errors import ServiceError

    from .selectors import INSTRUCTIONS_MAX_CHARS

    text = (text or "").strip()
    if len(text) > INSTRUCTIONS_MAX_CHARS:
        raise ServiceError("too_long", f"Custom instructions are limited to {INSTRUCTIONS_MAX_CHARS} characters "
                                       f"({len(text)} given).", 400)
    prefs, _ = UserPreferences.objects.update_or_create(user=user, defaults={"custom_instructions": text})
    return prefs
