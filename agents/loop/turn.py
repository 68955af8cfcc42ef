"""``run_turn(run_id)``: one agent turn, re-entrant (DESIGN §5).

State is rebuilt from the database (messages + the ToolCall ledger) every time, so the same
function starts a turn, continues it after a crash or task redelivery, and never executes a
finished tool call twice. The final assistant message is always persisted: ``complete``,
``truncated`` (cap, length, broken stream), ``error`` or ``cancelled``, with whatever text
arrived.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.events import RunEmitter
from agents.models import Run, ToolCall
from agents.pipeline import policy_views, tool_pipeline
from agents.providers import (
    ChatRequest,
    Finish,
    ProviderError,
    ReasoningDelta,
    StreamedToolCall,
    TextDelta,
    ToolDefinition,
    provider_for,
)
from agents.tools import ToolContext
from chat.models import Membership, Message
from chat.services import message_create
from knowledge.grounding import grounding_for_run

from .execute import execute_tool_call
from .lease import LeaseLost, RunLease, run_claim, worker_identity
from .prompt import system_prompt, thread_history
from .tiers import history_window, run_plan

logger = logging.getLogger(__name__)


class RunCancelled(Exception):
    """Raised inside the stream loop when the run was cancelled from outside."""


@dataclass
class Streamed:
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[StreamedToolCall] = field(default_factory=list)
    finish: Finish | None = None

    @property
    def content(self) -> str:
        return "".join(self.text)


def run_turn(*, run_id) -> None:
    """Start, continue or recover run ``run_id``. Returns when the run is terminal or waits
    for a person's decision. Never raises for provider or tool failures: they end the run as
    ``failed`` with an in-thread message. A run another live worker holds is left alone."""
    owner = worker_identity()
    if not run_claim(run_id=run_id, owner=owner):
        return
    run = Run.objects.select_related("thread__workspace", "provider", "user", "user_message").get(pk=run_id)
    emitter = RunEmitter.for_run(run)
    lease = RunLease(run_id=run.pk, owner=owner, seq_source=lambda: emitter.seq)
    try:
        _Turn(run, emitter, lease).execute()
    except LeaseLost:
        logger.warning("run %s: lease lost to another worker; stopping here", run.pk)
        emitter.close()
        return
    except Exception as exc:  # last line of defence: a bug still ends the run cleanly
        logger.exception("run %s crashed", run.pk)
        _fail_run(run, emitter, "internal_error", f"internal error: {type(exc).__name__}", retryable=False)
    emitter.close()
    Run.objects.filter(pk=run.pk).update(last_event_seq=emitter.seq)
    lease.release()


def fail_interrupted_run(*, run_id, expected_lease) -> bool:
    """Reaper's end for a run whose workers kept dying: mark it failed with a notice."""
    if not Run.objects.filter(pk=run_id, status=Run.Status.RUNNING, lease_expires_at=expected_lease).update(
        lease_owner="reaper"
    ):
        return False
    run = Run.objects.get(pk=run_id)
    emitter = RunEmitter.for_run(run)
    streaming = Message.objects.filter(run=run, status=Message.Status.STREAMING)
    for msg in streaming:
        msg.status = Message.Status.TRUNCATED
        msg.error = {"code": "interrupted", "message": "the worker stopped while writing this"}
        msg.save(update_fields=["status", "error", "updated_at"])
        emitter.emit("message.completed", message_id=str(msg.pk), status=msg.status)
    _fail_run(run, emitter, "interrupted", "The run was interrupted: its worker stopped repeatedly.")
    emitter.close()
    Run.objects.filter(pk=run.pk).update(last_event_seq=emitter.seq, lease_owner="", lease_expires_at=None)
    return True


class _Turn:
    def __init__(self, run: Run, emitter: RunEmitter, lease: RunLease) -> None:
        self.run = run
        self.thread = run.thread
        self.emitter = emitter
        self.lease = lease
        membership = Membership.objects.select_related("role").filter(
            user_id=run.user_id, workspace_id=self.thread.workspace_id
        ).first()
        self.role_name = membership.role.name if membership else ""
        self.ctx = ToolContext(
            workspace_id=self.thread.workspace_id,
            thread_id=str(self.thread.pk),
            user_id=run.user_id,
            run_id=str(run.pk),
            role=self.role_name,
            include_private=run.include_private,
            allow_model_save=self.thread.allow_model_save,
            env_id=run.env_id,
            ui_context=dict(run.ui_context or {}),
        )
        self.cap = settings.AGENT_MAX_ITERATIONS
        self.pending_citations: list[dict] = []

    # -- the loop ----------------------------------------------------------------------
    def execute(self) -> None:
        run = self.run
        if not membership_ok(self.role_name):
            _fail_run(run, self.emitter, "forbidden", "you are no longer a member of this workspace")
            return
        assistant = self._resume_point()
        if self.emitter.seq == 0:
            self.emitter.emit(
                "run.started",
                thread_id=str(self.thread.pk),
                user_message_id=str(run.user_message_id) if run.user_message_id else None,
                assistant_message_id=str(assistant.pk),
            )
        while True:
            if assistant.tool_calls:  # a resumed message whose calls still need results
                state = self._execute_calls(assistant)
                if state == "cancelled" or self._cancelled():
                    return self._cancel(None)
                if state == "awaiting_approval":
                    return self._await_approval()
                if run.iterations >= self.cap:
                    return self._hit_cap()
                assistant = self._new_assistant()
                continue
            try:
                streamed = self._stream(assistant)
            except RunCancelled:
                return self._cancel(assistant)
            except ProviderError as exc:
                return self._provider_failed(assistant, exc)
            run.iterations += 1
            Run.objects.filter(pk=run.pk).update(iterations=run.iterations)
            finish = streamed.finish or Finish("stop")
            if finish.reason == "length":
                # A half-built tool call is never executed (shared/cases, issue: providers).
                self._close_assistant(assistant, streamed, Message.Status.TRUNCATED)
                return self._complete()
            assistant.tool_calls = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in streamed.tool_calls
            ]
            self._close_assistant(assistant, streamed, Message.Status.COMPLETE)
            if not assistant.tool_calls:
                return self._complete()

    def _resume_point(self) -> Message:
        """The assistant message to continue with: a fresh one, or the unfinished one left by
        an earlier attempt (a streaming message is closed as truncated first)."""
        last = Message.objects.filter(run=self.run).order_by("-position").first()
        if last is not None and last.role == Message.Role.ASSISTANT:
            if last.status == Message.Status.STREAMING:
                last.status = Message.Status.TRUNCATED
                last.save(update_fields=["status", "updated_at"])
                if last.tool_calls:
                    return last
                return self._new_assistant()
            if last.tool_calls and not _all_answered(last):
                return last
        if last is not None and last.role == Message.Role.TOOL:
            parent = Message.objects.filter(run=self.run, role=Message.Role.ASSISTANT).order_by("-position").first()
            if parent is not None and not _all_answered(parent):
                return parent
        return self._new_assistant()

    def _new_assistant(self) -> Message:
        return message_create(
            thread_id=self.thread.pk,
            run=self.run,
            role=Message.Role.ASSISTANT,
            status=Message.Status.STREAMING,
            provider=self.run.provider.slug if self.run.provider else "",
            model=self.run.model,
        )

    def _grounding(self, tier: str):
        """The run's retrieved-context block (knowledge/grounding.py), once per turn; the
        sources it gave lead the final answer's citations."""
        if getattr(self, "grounding", None) is None:
            self.grounding = grounding_for_run(run=self.run, tier=tier)
            self.pending_citations[:0] = self.grounding.citations
        return self.grounding

    def _stream(self, assistant: Message) -> Streamed:
        adapter = provider_for(self.run.provider)
        policies = policy_views()
        offer = tool_pipeline(
            role_name=self.role_name,
            object_type=(self.run.ui_context or {}).get("objectType"),
            allow_model_save=self.thread.allow_model_save,
            policies=policies,
        )
        self.offered = offer.names
        self.policies = policies
        if getattr(self, "plan", None) is None:  # prompt tier and request options, once per turn
            self.plan = run_plan(thread=self.thread, provider=self.run.provider, model_name=self.run.model)
        plan = self.plan
        grounding = self._grounding(plan.tier.name)
        request = ChatRequest(
            model=self.run.model,
            system=system_prompt(
                workspace_name=self.thread.workspace.name,
                tier=plan.tier.name,
                ui_context=self.run.ui_context,
                extra_blocks=[grounding.block],
            ),
            messages=history_window(
                thread_history(thread_id=self.thread.pk, exclude_ids={assistant.pk}), plan.history_limit
            ),
            tools=[ToolDefinition(t.name, t.description, t.parameters) for t in offer.tools],
            max_output_tokens=plan.max_output_tokens,
            options=plan.options,
            echo_reasoning=plan.echo_reasoning,
        )
        streamed = Streamed()
        last_persist = time.monotonic()
        stream = adapter.stream(request)
        try:
            for event in stream:
                if isinstance(event, TextDelta):
                    streamed.text.append(event.text)
                    self.emitter.text(event.text)
                elif isinstance(event, ReasoningDelta):
                    streamed.reasoning.append(event.text)
                elif isinstance(event, StreamedToolCall):
                    streamed.tool_calls.append(event)
                elif isinstance(event, Finish):
                    streamed.finish = event
                now = time.monotonic()
                if now - last_persist >= settings.STREAM_PERSIST_INTERVAL_S:
                    # A crash loses at most the last second of text.
                    last_persist = now
                    assistant.content = streamed.content
                    assistant.save(update_fields=["content", "updated_at"])
                if self.lease.tick():
                    self._partial = streamed
                    raise RunCancelled
        except ProviderError as exc:
            exc.partial = streamed  # type: ignore[attr-defined]
            raise
        finally:
            close = getattr(stream, "close", None)
            if close:
                close()
        return streamed

    def _execute_calls(self, assistant: Message) -> None:
        if not hasattr(self, "offered"):
            policies = policy_views()
            self.policies = policies
            self.offered = tool_pipeline(
                role_name=self.role_name,
                object_type=(self.run.ui_context or {}).get("objectType"),
                allow_model_save=self.thread.allow_model_save,
                policies=policies,
            ).names
        answered = _answered_ids(assistant)
        for call in assistant.tool_calls:
            if call["id"] in answered:
                continue
            if self.lease.tick():
                return "cancelled"
            outcome = execute_tool_call(
                run=self.run, assistant=assistant, call=call, ctx=self.ctx,
                offered=self.offered, policies=self.policies, emitter=self.emitter, tick=self.lease.tick,
            )
            if outcome.pending:
                return "awaiting_approval"  # later calls wait until this one is decided
            self.pending_citations.extend(outcome.citations)
        return "done"

    # -- endings -------------------------------------------------------------------------
    def _close_assistant(self, assistant: Message, streamed: Streamed, status: str) -> None:
        assistant.content = streamed.content
        assistant.reasoning = "".join(streamed.reasoning)
        assistant.status = status
        if streamed.finish and streamed.finish.usage:
            assistant.usage = streamed.finish.usage.as_dict()
        if self.pending_citations and not assistant.tool_calls:
            assistant.citations = _dedupe(self.pending_citations)
        assistant.save()
        self.emitter.emit("message.completed", message_id=str(assistant.pk), status=status)

    def _complete(self) -> None:
        if _end_run(self.run, Run.Status.COMPLETED):
            self.emitter.emit("run.completed", status=Run.Status.COMPLETED)
        else:  # cancelled after the last check: the cancel wins
            self.emitter.emit("run.cancelled", status=Run.Status.CANCELLED)

    def _hit_cap(self) -> None:
        note = (
            f"I stopped after {self.cap} rounds of tool calls without reaching an answer "
            "(the iteration cap). Ask again, or narrow the question."
        )
        assistant = self._new_assistant()
        self._close_assistant(assistant, Streamed(text=[note]), Message.Status.TRUNCATED)
        self._complete()

    def _provider_failed(self, assistant: Message, exc: ProviderError) -> None:
        partial: Streamed = getattr(exc, "partial", None) or Streamed()
        status = Message.Status.TRUNCATED if partial.content else Message.Status.ERROR
        assistant.error = {"code": exc.code, "message": exc.message}
        self._close_assistant(assistant, partial, status)
        _fail_run(self.run, self.emitter, exc.code, exc.message, retryable=exc.retryable)

    def _await_approval(self) -> None:
        """Hand the run to a person: no worker waits. A decision re-queues it."""
        waiting = Run.objects.filter(pk=self.run.pk, status=Run.Status.RUNNING).update(
            status=Run.Status.AWAITING_APPROVAL, lease_owner="", lease_expires_at=None
        )
        if not waiting:  # cancelled meanwhile
            self._cancel(None)

    def _cancelled(self) -> bool:
        return Run.objects.filter(pk=self.run.pk, status=Run.Status.CANCELLED).exists()

    def _cancel(self, assistant: Message | None) -> None:
        """End a cancelled run: partial text kept as ``cancelled``; unanswered tool calls get a
        "cancelled by the user" result so the history stays valid for every provider."""
        close_open_calls(run=self.run, reason="Not executed: the run was cancelled by the user.")
        # The final assistant message is always persisted (DESIGN §5): the partial text, or
        # an empty one marked cancelled when the cancel came between model responses.
        final = assistant if assistant is not None else self._new_assistant()
        self._close_assistant(final, getattr(self, "_partial", Streamed()) if assistant is not None else Streamed(),
                              Message.Status.CANCELLED)
        Run.objects.filter(pk=self.run.pk).update(finished_at=timezone.now())
        self.emitter.emit("run.cancelled", status=Run.Status.CANCELLED)


def close_open_calls(*, run: Run, reason: str) -> list[str]:
    """Give every unanswered tool call of ``run`` an error result ``reason`` and expire its
    ledger row if it was still waiting. Returns the ledger ids closed (for events)."""
    closed = []
    for assistant in Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exclude(tool_calls=[]):
        answered = _answered_ids(assistant)
        for call in assistant.tool_calls:
            if call["id"] in answered:
                continue
            ledger = ToolCall.objects.filter(message=assistant, call_id=call["id"]).first()
            if ledger is not None and ledger.status in (
                ToolCall.Status.PENDING, ToolCall.Status.AWAITING_APPROVAL, ToolCall.Status.APPROVED
            ):
                ToolCall.objects.filter(pk=ledger.pk, status=ledger.status).update(
                    status=ToolCall.Status.EXPIRED, is_error=True, summary=reason
                )
                closed.append(str(ledger.pk))
            message_create(thread_id=run.thread_id, run=run, role=Message.Role.TOOL, content=reason,
                           tool_call_id=call["id"], is_error=True)
    return closed


def membership_ok(role_name: str) -> bool:
    return bool(role_name)


def _answered_ids(assistant: Message) -> set[str]:
    ids = {c["id"] for c in assistant.tool_calls}
    return set(
        Message.objects.filter(
            thread_id=assistant.thread_id, role=Message.Role.TOOL, tool_call_id__in=ids,
            position__gt=assistant.position,
        ).values_list("tool_call_id", flat=True)
    )


def _all_answered(assistant: Message) -> bool:
    return _answered_ids(assistant) >= {c["id"] for c in assistant.tool_calls}


def _dedupe(citations: list[dict]) -> list[dict]:
    seen, out = set(), []
    for c in citations:
        key = (c.get("item_id"), c.get("chunk_id"))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _end_run(run: Run, status: str, error: dict | None = None) -> bool:
    """Set the terminal status unless the run was cancelled meanwhile; True if set."""
    with transaction.atomic():
        updated = Run.objects.filter(pk=run.pk).exclude(status=Run.Status.CANCELLED).update(
            status=status, error=error or {}, finished_at=timezone.now()
        )
    if updated:
        run.status = status
    return bool(updated)


def _fail_run(run: Run, emitter: RunEmitter, code: str, message: str, *, retryable: bool = False) -> None:
    _end_run(run, Run.Status.FAILED, {"code": code, "message": message})
    emitter.emit("run.failed", status=Run.Status.FAILED, error={"code": code, "message": message}, retryable=retryable)
