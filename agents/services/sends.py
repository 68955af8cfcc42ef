"""Sending: a user message and a queued run (``run_create``), an edited question
(``message_edit``) and an answer asked again (``message_regenerate``)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from agents.locks import lock_user_then_thread
from agents.metering import meter
from agents.models import Run
from agents.presets import preset_for_thread
from agents.runs.executors import enqueue_run
from agents.selectors import model_allowed, model_takes_images, role_names_for_user
from agents.ui_context import ui_context_accept
from chat.models import Attachment, Message, Thread
from chat.selectors import viewer_role_name
from chat.services import attachments_copy, message_create, title_from_message
from chatplatform.ratelimit import rate_limit_hit

from .results import RunCreated, RunRejected
from .runs import end_waiting_run

MAX_MESSAGE_CHARS = 32_000


ACTIVE = (Run.Status.QUEUED, Run.Status.RUNNING)


def run_create(
    *,
    thread: Thread,
    user,
    content: str,
    grounded: bool | None = None,
    include_private: bool | None = None,
    ui_context: dict | None = None,
    env_id: str = "",
    tool_results: list[dict] | None = None,
    user_message: Message | None = None,
    attachments: list | None = None,
) -> RunCreated:
    """Persist the user's message and a queued run, and enqueue ``run_turn`` after commit.

    ``thread`` must come from ``thread_get_for_user(..., write=True)``; ``ui_context`` is the
    client's raw UI context (None: the thread's). ``tool_results``
    (``[{"tool_call_id", "content"}]``) are results of client-run tool calls
    (``agents/client_tools.py``), stored as tool messages before the user message; with
    them ``content`` may be empty (the run then has no user message). Raises
    :class:`RunRejected`: ``empty_message`` (400), ``message_too_long`` (413, over 32 000
    chars), ``run_in_progress`` (409, the thread already has a queued or running run),
    ``too_many_active_runs`` / ``rate_limited`` (429 + ``retry_after``);
    ``UIContextError`` (413/422, audited) for a context it cannot accept; and
    ``DispatchRefused`` ``budget_exceeded`` (429 + ``retry_after``: a budget's hard limit
    is reached; ``agents.metering``); ``model_not_allowed`` (403) when the thread's model is
    not enabled for the user's role in its workspace (``selectors.model_allowed``);
    ``agents.presets.PresetRefused`` (``assistant_disabled`` 403, ``assistant_not_found`` 404)
    when the thread's assistant may not be used now.
    ``user_message`` (a user message of ``thread`` at the end of the selected branch) re-runs
    that turn instead of appending a new question: regenerate and retry (:func:`message_regenerate`).
    ``attachments``: ids of the user's pending attachments of this thread (``chat.attachments``),
    bound to the new user message in the same transaction (with them ``content`` may be
    empty); refused: ``too_many_files`` (400, over ``CHAT_ATTACHMENT_MAX_FILES``),
    ``not_found`` (404: an attachment unknown, another user's, another thread's or already
    sent), ``images_not_supported`` (400: an image for a model that does not read images).
    """
    if ui_context is not None:
        ui_context = ui_context_accept(raw=ui_context, user=user, workspace_id=thread.workspace_id,
                                       thread_id=thread.pk)
    attachment_ids = list(dict.fromkeys(str(a) for a in attachments or ()))
    if len(attachment_ids) > settings.CHAT_ATTACHMENT_MAX_FILES:
        raise RunRejected("too_many_files", ngettext(
            "At most %(n)d file can be attached to one message.", "At most %(n)d files can be attached to one message.",
            settings.CHAT_ATTACHMENT_MAX_FILES) % {"n": settings.CHAT_ATTACHMENT_MAX_FILES}, 400)
    if (tool_results or attachment_ids) and isinstance(content, str) and not content.strip():
        content = ""
    elif not isinstance(content, str) or not content.strip():
        raise RunRejected("empty_message", _("The message is empty."))
    if len(content) > MAX_MESSAGE_CHARS:
        raise RunRejected("message_too_long", _("The message is longer than %(n)s characters.") % {
            "n": number_format(MAX_MESSAGE_CHARS, force_grouping=True)}, 413)
    model_check(thread=thread, user=user)
    preset_for_thread(thread=thread, user=user)  # a disabled or no longer visible assistant: PresetRefused
    with transaction.atomic():
        # Concurrent sends are serialised per user and per thread (row locks on PostgreSQL;
        # SQLite's IMMEDIATE transactions serialise writers): the checks below cannot race.
        # The partial unique index run_one_active_per_thread backs the first one up.
        lock_user_then_thread(user_id=user.pk, thread_id=thread.pk)
        # One read: the thread's unfinished runs and the user's active ones.
        rows = list(Run.objects.filter(Q(thread=thread, status__in=(*ACTIVE, Run.Status.AWAITING_APPROVAL))
                                       | Q(user=user, status__in=ACTIVE)).order_by())
        unfinished = [run for run in rows if run.thread_id == thread.pk]
        if any(run.status in ACTIVE for run in unfinished):
            raise RunRejected("run_in_progress", _("A reply is still being written in this thread."), 409)
        active = sum(1 for run in rows if run.user_id == user.pk and run.status in ACTIVE)
        if active >= settings.MAX_ACTIVE_RUNS_PER_USER:
            raise RunRejected(
                "too_many_active_runs",
                ngettext("You already have %(n)d reply being written; wait for it to finish.",
                         "You already have %(n)d replies being written; wait for one to finish.", active) % {"n": active},
                429, retry_after=5,
            )
        wait = rate_limit_hit(key=f"runs:{user.pk}", spec=settings.RUN_RATE_LIMIT)
        if wait:
            raise RunRejected("rate_limited", _("Too many messages; try again in %(s)d s.") % {"s": round(wait)}, 429,
                              retry_after=wait)
        meter().before_run(user=user, thread=thread)  # budgets: a hard limit reached → 429
        files = _pending_attachments(thread=thread, user=user, ids=attachment_ids)
        for waiting in unfinished:  # all waiting for a decision (the active ones were refused above)
            end_waiting_run(waiting, reason="Not executed: the user sent a new message instead of deciding.",
                             decision="superseded")
        for result in tool_results or ():
            message_create(thread_id=thread.pk, role=Message.Role.TOOL, content=result["content"],
                           tool_call_id=result["tool_call_id"], is_error=bool(result.get("is_error")))
        run = Run(
            thread=thread,
            user=user,
            provider=thread.provider,
            model=thread.model,
            grounded=thread.grounded if grounded is None else bool(grounded),
            include_private=thread.include_private_in_ai if include_private is None else bool(include_private),
            ui_context=ui_context if ui_context is not None else thread.ui_context,
            env_id=env_id or "",
            queued_at=timezone.now(),
        )
        if user_message is None and (content or files):
            # A new message names its run at once (the run id is made here; the foreign key
            # is checked at commit), so neither row is written twice.
            user_message = message_create(thread_id=thread.pk, role=Message.Role.USER, content=content, run=run)
            if files:
                Attachment.objects.filter(pk__in=[f.pk for f in files]).update(message=user_message)
        elif user_message is not None:  # a turn asked again: the existing message moves to this run
            Message.objects.filter(pk=user_message.pk).update(run_id=run.pk)
            user_message.run = run
        run.user_message = user_message
        try:  # no savepoint: a failure here ends the whole transaction (re-raised below)
            run.save(force_insert=True)
        except IntegrityError as exc:  # another send won a race the locks did not see
            raise RunRejected("run_in_progress", _("A reply is still being written in this thread."), 409) from exc
        if not thread.title and (content or files):  # message_create moved updated_at already
            thread.title = title_from_message(content or ", ".join(f.filename for f in files))
            thread.save(update_fields=["title", "updated_at"])
        transaction.on_commit(lambda: enqueue_run(run.pk))
    return RunCreated(run=run, user_message=user_message)


def _pending_attachments(*, thread: Thread, user, ids: list[str]) -> list[Attachment]:
    """The pending attachments ``ids`` (in that order) of ``user`` in ``thread``, locked for the
    send; ``RunRejected`` ``not_found`` (404) when any is not one, and
    ``images_not_supported`` (400) when one is an image the thread's model cannot read."""
    if not ids:
        return []
    try:
        rows = {str(a.pk): a for a in Attachment.objects.select_for_update().filter(
            pk__in=ids, owner=user, thread=thread, message__isnull=True).only("id", "kind", "filename")}
    except ValidationError:  # a malformed id
        rows = {}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise RunRejected("not_found", _("An attached file is gone (removed, already sent, or not yours): "
                                         "attach it again."), 404, attachment_ids=missing)
    files = [rows[i] for i in ids]
    if any(f.kind == Attachment.Kind.IMAGE for f in files) and not model_takes_images(
            provider=thread.provider, model=thread.model, memo=thread):
        name = (thread.model or "").strip() or (thread.provider.default_model if thread.provider else "")
        raise RunRejected("images_not_supported", _("The model %(name)r cannot read images; pick a model marked "
                                                    "“vision”, or remove the images.") % {"name": name}, 400)
    return files


def model_check(*, thread: Thread, user) -> None:
    """Refuse (``model_not_allowed``, 403) a thread whose model its provider may not run for
    ``user``'s role in the thread's workspace (``selectors.model_allowed``). A thread without
    a provider passes: its run fails with a clear message."""
    provider = thread.provider
    if provider is None:
        return
    role = viewer_role_name(thread=thread, user=user)  # found with the thread: no second read
    roles = {role} if role is not None else role_names_for_user(user=user, workspace_id=thread.workspace_id)
    if not model_allowed(provider=provider, model=thread.model, role_names=roles, memo=thread):
        name = (thread.model or "").strip() or provider.default_model
        raise RunRejected(
            "model_not_allowed",
            _("The model %(name)r of %(provider)s is not enabled for your role; pick another model for this "
              "thread, or ask an administrator to enable it.") % {"name": name, "provider": provider.name}, 403,
        )


def ensure_no_open_run(thread: Thread) -> None:
    """Refuse (``run_in_progress``, 409) while ``thread`` has a queued, running or parked run."""
    if Run.objects.filter(thread=thread, status__in=[
        Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL,
    ]).exists():
        raise RunRejected("run_in_progress", _("Stop or finish the current reply first."), 409)


def _lock_for_send(*, user, thread_id) -> Thread:
    """The send path's locks (user → thread), so an edit or a regenerate never deadlocks with
    a concurrent send; returns the thread."""
    lock_user_then_thread(user_id=user.pk, thread_id=thread_id)
    return Thread.objects.get(pk=thread_id)


def _turn_question(message: Message) -> Message | None:
    """The user message whose turn ``message`` belongs to (itself for a user message)."""
    current: Message | None = message
    while current is not None and current.role != Message.Role.USER:
        current = current.parent
    return current


@transaction.atomic
def message_regenerate(*, message: Message, user, **run_options) -> RunCreated:
    """Run the turn of ``message`` again as a new version of its answer: the question stays
    the same message (no new user message), the earlier answer stays as a sibling version.

    ``message`` comes from ``message_get_for_user(..., write=True)``; a user message or any
    message of its answer. Returns ``agents.services.RunCreated``. Raises ``RunRejected``:
    ``run_in_progress`` (409), ``no_question`` (400, nothing asked before it), and those of
    ``run_create``. ``run_options`` are ``run_create``'s (grounded, include_private, env_id).
    """
    thread = _lock_for_send(user=user, thread_id=message.thread_id)
    ensure_no_open_run(thread)
    question = _turn_question(message)
    if question is None:
        raise RunRejected("no_question", _("There is no question before this message to answer again."), 400)
    Thread.objects.filter(pk=thread.pk).update(leaf=question)
    return run_create(thread=thread, user=user, content=question.content, user_message=question, **run_options)


@transaction.atomic
def message_edit(*, message: Message, user, content: str, **run_options) -> RunCreated:
    """Send an edited version of user message ``message``: a new user message beside it (same
    parent) and a run that answers it; the original and its answers stay as version 1.

    Raises ``RunRejected``: ``not_a_question`` (400, not a user message),
    ``run_in_progress`` (409), and those of ``run_create`` (empty, too long, rate limits).
    """
    if message.role != Message.Role.USER:
        raise RunRejected("not_a_question", _("Only your own messages can be edited."), 400)
    thread = _lock_for_send(user=user, thread_id=message.thread_id)
    ensure_no_open_run(thread)
    if isinstance(content, str) and content.strip():
        edited = message_create(thread_id=thread.pk, role=Message.Role.USER, content=content,
                                parent_id=message.parent_id)
        attachments_copy(targets={message.pk: edited})
    else:
        edited = None  # run_create refuses the empty text with its usual error
    return run_create(thread=thread, user=user, content=content, user_message=edited, **run_options)

