"""Writes for the agents app: creating runs (a user message + a queued Run)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from chat.models import Message, Thread
from chat.services import message_create, title_from_message

from .executors import enqueue_run
from .models import Run

MAX_MESSAGE_CHARS = 32_000


class RunRejected(Exception):
    """A send the server refuses. ``code`` and ``status`` map to the API error shape."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass
class RunCreated:
    run: Run
    user_message: Message


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
) -> RunCreated:
    """Persist the user's message and a queued run, and enqueue ``run_turn`` after commit.

    ``thread`` must come from ``thread_get_for_user(..., write=True)``. Raises
    :class:`RunRejected`: ``empty_message`` (400), ``message_too_long`` (413, over 32 000
    chars), ``run_in_progress`` (409, the thread already has a queued or running run).
    """
    if not isinstance(content, str) or not content.strip():
        raise RunRejected("empty_message", "The message is empty.")
    if len(content) > MAX_MESSAGE_CHARS:
        raise RunRejected("message_too_long", f"The message is longer than {MAX_MESSAGE_CHARS} characters.", 413)
    with transaction.atomic():
        if Run.objects.filter(thread=thread, status__in=ACTIVE).exists():
            raise RunRejected("run_in_progress", "A reply is still being written in this thread.", 409)
        user_message = message_create(thread_id=thread.pk, role=Message.Role.USER, content=content)
        run = Run.objects.create(
            thread=thread,
            user=user,
            user_message=user_message,
            provider=thread.provider,
            model=thread.model,
            grounded=thread.grounded if grounded is None else bool(grounded),
            include_private=thread.include_private_in_ai if include_private is None else bool(include_private),
            ui_context=ui_context if ui_context is not None else thread.ui_context,
            env_id=env_id or "",
        )
        user_message.run = run
        user_message.save(update_fields=["run"])
        fields = ["updated_at"]
        if not thread.title:
            thread.title = title_from_message(content)
            fields.append("title")
        thread.save(update_fields=fields)
        transaction.on_commit(lambda: enqueue_run(run.pk))
    return RunCreated(run=run, user_message=user_message)


def run_cancel(*, run: Run, user) -> Run:
    """Cancel a queued, running or awaiting run.

    Only the run's user or an admin of its workspace may cancel (others: ``not_allowed``,
    403). A queued or awaiting run is ended here (``run.cancelled`` is published now); a
    running one is stopped by its worker within ``STREAM_PERSIST_INTERVAL_S`` (1 s), which
    keeps the partial text with status ``cancelled``. A terminal run → ``run_finished`` (409).
    """
    from django.utils import timezone

    from chat.selectors import membership_get

    from .events import RunEmitter

    if run.user_id != user.pk:
        membership = membership_get(user=user, workspace_id=run.thread.workspace_id)
        if membership is None or not membership.role.is_admin:
            raise RunRejected("not_allowed", "Only the person who started this run can cancel it.", 403)
    idle = Run.objects.filter(pk=run.pk, status__in=[Run.Status.QUEUED, Run.Status.AWAITING_APPROVAL]).update(
        status=Run.Status.CANCELLED, finished_at=timezone.now()
    )
    if idle:
        run.refresh_from_db()
        emitter = RunEmitter(run_id=run.pk, thread_id=run.thread_id, start_seq=run.last_event_seq)
        emitter.emit("run.cancelled", status=Run.Status.CANCELLED)
        emitter.close()
        Run.objects.filter(pk=run.pk).update(last_event_seq=emitter.seq)
        return run
    if not Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).update(status=Run.Status.CANCELLED):
        raise RunRejected("run_finished", "This run has already finished.", 409)
    run.status = Run.Status.CANCELLED
    return run
