"""Writes for the agents app: creating runs (a user message + a queued Run)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from chat.models import Message, Thread
from chat.selectors import viewer_role_name
from chat.services import message_create, title_from_message
from chatplatform.errors import ServiceError

from .backends import abandon_waiting
from .events import RunEmitter
from .metering import meter
from .models import Run, ToolCall
from .ratelimit import rate_limit_hit
from .runs import lifecycle
from .runs.calls import CANCELLED_RESULT, close_open_calls
from .runs.control import run_check_now
from .runs.driver import close_round_cancelled, mark_unanswered
from .runs.executors import enqueue_run
from .selectors import model_allowed, role_names_for_user
from .ui_context import ui_context_accept

MAX_MESSAGE_CHARS = 32_000


class RunRejected(ServiceError):
    """A send, cancel or decision the server refuses (``chatplatform.errors.ServiceError``)."""


@dataclass
class RunCreated:
    run: Run
    user_message: Message | None  # None only for a run that continues after client tool results


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
    not enabled for the user's role in its workspace (``selectors.model_allowed``).
    ``user_message`` (a user message of ``thread`` at the end of the selected branch) re-runs
    that turn instead of appending a new question: regenerate and retry (chat/services.py).
    """
    if ui_context is not None:
        ui_context = ui_context_accept(raw=ui_context, user=user, workspace_id=thread.workspace_id,
                                       thread_id=thread.pk)
    if tool_results and not (content or "").strip():
        content = ""
    elif not isinstance(content, str) or not content.strip():
        raise RunRejected("empty_message", "The message is empty.")
    if len(content) > MAX_MESSAGE_CHARS:
        raise RunRejected("message_too_long", f"The message is longer than {MAX_MESSAGE_CHARS} characters.", 413)
    model_check(thread=thread, user=user)
    with transaction.atomic():
        # Concurrent sends are serialised per user and per thread (row locks on PostgreSQL;
        # SQLite's IMMEDIATE transactions serialise writers): the checks below cannot race.
        # The partial unique index run_one_active_per_thread backs the first one up.
        _lock(user_id=user.pk, thread_id=thread.pk)
        # One read: the thread's unfinished runs and the user's active ones.
        rows = list(Run.objects.filter(Q(thread=thread, status__in=(*ACTIVE, Run.Status.AWAITING_APPROVAL))
                                       | Q(user=user, status__in=ACTIVE)).order_by())
        unfinished = [run for run in rows if run.thread_id == thread.pk]
        if any(run.status in ACTIVE for run in unfinished):
            raise RunRejected("run_in_progress", "A reply is still being written in this thread.", 409)
        active = sum(1 for run in rows if run.user_id == user.pk and run.status in ACTIVE)
        if active >= settings.MAX_ACTIVE_RUNS_PER_USER:
            raise RunRejected(
                "too_many_active_runs",
                f"You already have {active} replies being written; wait for one to finish.", 429, retry_after=5,
            )
        wait = rate_limit_hit(key=f"runs:{user.pk}", spec=settings.RUN_RATE_LIMIT)
        if wait:
            raise RunRejected("rate_limited", f"Too many messages; try again in {wait:.0f} s.", 429, retry_after=wait)
        meter().before_run(user=user, thread=thread)  # budgets: a hard limit reached → 429
        for waiting in unfinished:  # all waiting for a decision (the active ones were refused above)
            _end_waiting_run(waiting, reason="Not executed: the user sent a new message instead of deciding.",
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
        if user_message is None and content:
            # A new message names its run at once (the run id is made here; the foreign key
            # is checked at commit), so neither row is written twice.
            user_message = message_create(thread_id=thread.pk, role=Message.Role.USER, content=content, run=run)
        elif user_message is not None:  # a turn asked again: the existing message moves to this run
            Message.objects.filter(pk=user_message.pk).update(run_id=run.pk)
            user_message.run = run
        run.user_message = user_message
        try:  # no savepoint: a failure here ends the whole transaction (re-raised below)
            run.save(force_insert=True)
        except IntegrityError as exc:  # another send won a race the locks did not see
            raise RunRejected("run_in_progress", "A reply is still being written in this thread.", 409) from exc
        if not thread.title and content:  # message_create moved updated_at already
            thread.title = title_from_message(content)
            thread.save(update_fields=["title", "updated_at"])
        transaction.on_commit(lambda: enqueue_run(run.pk))
    return RunCreated(run=run, user_message=user_message)


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
            f"The model {name!r} of {provider.name} is not enabled for your role; pick another model for this "
            "thread, or ask an administrator to enable it.", 403,
        )


def _lock(*, user_id=None, thread_id=None) -> None:
    """Row locks, always in the order user → thread, for the rest of the transaction.

    ``FOR NO KEY UPDATE`` on PostgreSQL: it serialises these writers but not rows that merely
    reference the user or thread (a decision stamping ``decided_by`` takes a key-share lock on
    the user; with a plain ``FOR UPDATE`` that and a send by the same user deadlocked)."""
    if user_id is not None:
        list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user_id).values_list("pk", flat=True))
    if thread_id is not None:
        list(Thread.objects.select_for_update(no_key=True).filter(pk=thread_id).values_list("pk", flat=True))


def _end_waiting_run(run: Run, *, reason: str, decision: str, run_message: str = "") -> bool:
    """Cancel a run that waits for approval, or is queued: what a lost worker left open is
    closed (``driver.close_round_cancelled``: a run re-queued after its worker died), its
    open calls get ``reason`` as an error result (history stays valid for every provider),
    ``approval.resolved`` and ``run.cancelled`` are published; the run's ``error`` is
    ``{decision, run_message or reason}``. Returns False if the run was no longer waiting."""
    if not lifecycle.run_cancel_waiting(run_id=run.pk, code=decision, reason=run_message or reason):
        return False
    run.refresh_from_db()
    emitter = RunEmitter.for_run(run)
    # A run re-queued after its worker died still holds that worker's round: close it too.
    close_round_cancelled(run, emitter)
    mark_unanswered(run, Message.Status.CANCELLED)  # cancelled while it waited for a worker
    closed = close_open_calls(run=run, reason=reason)
    for ledger_id in closed:
        emitter.emit("approval.resolved", tool_call_id=ledger_id, decision=decision, decided_by=None)
    emitter.emit("run.cancelled", status=Run.Status.CANCELLED)
    emitter.close()
    transaction.on_commit(lambda: abandon_waiting(run))  # a remote agent: deny and stop it there
    return True


def _may_manage(run: Run, user) -> bool:
    """The run's own user, or an admin of its workspace."""
    from chat.selectors import membership_get

    if run.user_id == user.pk:
        return True
    membership = membership_get(user=user, workspace_id=run.thread.workspace_id)
    return membership is not None and membership.role.is_admin


def run_cancel(*, run: Run, user) -> Run:
    """Cancel a queued, running or awaiting run.

    Only the run's user or an admin of its workspace may cancel (others: ``not_allowed``,
    403). A queued or awaiting run is ended here: open tool calls get a "cancelled by the
    user" result and ``run.cancelled`` is published now. A running one is stopped by its
    worker, which closes the upstream stream and keeps the partial text with status
    ``cancelled``: at its next token or check once the commit woke its heartbeat
    (``agents.runs.control``), else at its next heartbeat (within a second). A finished run →
    ``run_finished`` (409; the message says "already cancelled" when a cancel came first).
    """
    if not _may_manage(run, user):
        raise RunRejected("not_allowed", "Only the person who started this run or an admin of its workspace can "
                                         "cancel it.", 403)
    # The calls were not executed; the run may have written text (a lost attempt's).
    if _end_waiting_run(run, reason=CANCELLED_RESULT, decision="cancelled", run_message="Cancelled by the user."):
        return run
    if not lifecycle.run_cancel_running(run_id=run.pk):
        # A Stop that lost a race with another Stop says so, not "finished" (four Stops at once
        # across two web processes: three were told the cancelled run had finished).
        status = Run.objects.filter(pk=run.pk).values_list("status", flat=True).first()
        message = ("This run was already cancelled." if status == Run.Status.CANCELLED
                   else "This run has already finished.")
        raise RunRejected("run_finished", message, 409)
    run_id = run.pk
    transaction.on_commit(lambda: run_check_now(run_id))
    run.status = Run.Status.CANCELLED
    return run


def tool_call_decide(*, tool_call: ToolCall, user, decision: str) -> ToolCall:
    """Approve or deny a call that waits for approval, under the approval rule it carries
    (``agents.approvals.services.approval_decide``: who may decide, two-person rule, expiry,
    countdown; 400/403/409 as ``ServiceError``). ``tool_call`` must come from
    ``tool_call_get_for_decider``."""
    from .approvals.services import approval_decide

    return approval_decide(tool_call=tool_call, user=user, decision=decision)
