"""A run's tool calls as its messages record them: which are answered, closing the open ones
so the history stays valid for every provider (a tool result follows every call), and the one
way a call that ran (or was meant to) is finished: :func:`tool_call_close`."""

from __future__ import annotations

from agents.models import Run, ToolCall
from agents.runs import lifecycle
from chat.models import Message
from chat.services import message_create

CANCELLED_RESULT = "Not executed: the run was cancelled by the user."
"""The result an unanswered tool call of a cancelled run gets (the history stays valid for
every provider)."""
UNKNOWN_OUTCOME = "Outcome unknown: the worker stopped while this call was running. Check before retrying."
"""A call whose worker died while it ran (``status_unknown``): its summary and its result."""


def answered_ids(assistant: Message) -> set[str]:
    """Call ids of ``assistant``'s tool calls that have a tool message after it."""
    ids = {c["id"] for c in assistant.tool_calls}
    return set(
        Message.objects.filter(
            thread_id=assistant.thread_id, role=Message.Role.TOOL, tool_call_id__in=ids,
            position__gt=assistant.position,
        ).values_list("tool_call_id", flat=True)
    )


def all_answered(assistant: Message) -> bool:
    return answered_ids(assistant) >= {c["id"] for c in assistant.tool_calls}


def close_open_calls(*, run: Run, reason: str) -> list[str]:
    """Give every unanswered tool call of ``run`` an error result ``reason`` and expire its
    ledger row if it was still pending, waiting or approved (``lifecycle.tool_call_expire``).
    Returns the ledger ids expired (for ``approval.resolved`` events)."""
    closed = []
    for assistant in Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exclude(tool_calls=[]):
        answered = answered_ids(assistant)
        for call in assistant.tool_calls:
            if call["id"] in answered:
                continue
            ledger = ToolCall.objects.filter(message=assistant, call_id=call["id"]).first()
            if ledger is not None and lifecycle.tool_call_expire(ledger=ledger, reason=reason):
                closed.append(str(ledger.pk))
            message_create(thread_id=run.thread_id, run=run, role=Message.Role.TOOL, content=reason,
                           tool_call_id=call["id"], is_error=True)
    return closed


def tool_call_close(*, ledger: ToolCall, run: Run, emitter, status: str, summary: str, content: str | None = None,
                    result=None, is_error: bool = False, duration_ms: int | None = None,
                    tool_message: bool = True) -> Message | None:
    """Finish ``ledger`` with ``status`` (a ``ToolCall.Status``), publish ``tool.completed``
    carrying that status — ``succeeded``, ``failed``, ``timeout``, ``denied``,
    ``status_unknown`` … — and append the tool message (``content``, else ``summary``) that
    answers the call in the history.

    ``status_unknown`` of a ``running`` call (its worker died while it ran) goes through
    ``lifecycle.tool_call_mark_unknown``; anything else through ``lifecycle.tool_call_finish``
    with ``result`` (``{"error": summary}`` for an error when none is given) and
    ``duration_ms``. ``tool_message=False``: the caller writes the answer
    itself. Returns the tool message, or None when the ledger had moved on already (another
    attempt closed it): then nothing is published or written."""
    if status == ToolCall.Status.STATUS_UNKNOWN and ledger.status == ToolCall.Status.RUNNING:
        closed = lifecycle.tool_call_mark_unknown(ledger=ledger, summary=summary)
    else:
        if result is None and is_error:
            result = {"error": summary}
        closed = lifecycle.tool_call_finish(ledger=ledger, status=status, result=result, summary=summary,
                                            is_error=is_error, duration_ms=duration_ms)
    if not closed:
        return None
    is_error = ledger.is_error
    emitter.emit("tool.completed", tool_call_id=str(ledger.pk), name=ledger.tool_name, status=ledger.status,
                 summary=ledger.summary, is_error=is_error)
    if not tool_message:
        return None
    return message_create(thread_id=run.thread_id, run=run, role=Message.Role.TOOL,
                          content=summary if content is None else content, tool_call_id=ledger.call_id,
                          is_error=is_error)

