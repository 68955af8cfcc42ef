"""The model backend: the platform's own tool loop over an LLM provider (DESIGN §5).

One ``advance`` streams from the provider, runs the tools it calls (``agents.loop.execute``:
guard, pinning, validation, risk, approval, timeout/retry, ledger), and repeats until the
model answers without tool calls, the iteration cap is hit, a call waits for a person, the
run is cancelled or the provider fails.

Re-entrant: state is rebuilt from the database (messages + the ToolCall ledger) every time,
so the same code starts a turn, continues it after a crash or an approval decision, and never
executes a finished tool call twice. The final assistant message is always persisted:
``complete``, ``truncated`` (cap, length, broken stream), ``error`` or ``cancelled``, with
whatever text arrived.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.conf import settings

from agents import metrics
from agents.client_tools import client_tools_for
from agents.grounding import grounding_for
from agents.ledger import CANCELLED_RESULT, all_answered, answered_ids, close_open_calls
from agents.loop.cutoff import OUTPUT_LIMIT_REASON, arguments_cut_off
from agents.loop.execute import execute_tool_call
from agents.loop.prompt import system_prompt, thread_history
from agents.loop.tiers import history_window, run_plan
from agents.metering import DispatchRefused, granted_output_tokens, meter
from agents.models import Run
from agents.pipeline import policy_views, tool_pipeline
from agents.presets import PresetRefused, preset_block, preset_for_thread
from agents.provider_keys import provider_for
from agents.replay import fill_from_log
from agents.round_cost import round_cost
from agents.selectors import model_takes_images
from chat.models import Message
from chat.selectors import instruction_blocks
from chat.services import message_create
from chatplatform.db import retry_transient
from chatplatform.dbconn import release_db_connection
from chatplatform.loops import LoopStopped, run_on_loop
from llm import (
    ChatRequest,
    Finish,
    ProviderError,
    ReasoningDelta,
    StreamedToolCall,
    StreamEvent,
    TextDelta,
    ToolDefinition,
)
from llm.wire import arelay

from .base import Outcome, Turn

CLOSE_FIELDS = ["content", "reasoning", "status", "usage", "citations", "error", "tool_calls", "updated_at"]


class RunCancelled(Exception):
    """Raised inside the stream loop when the run was cancelled from outside."""


@dataclass
class Streamed:
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[StreamedToolCall] = field(default_factory=list)
    finish: Finish | None = None
    # The response's usage as stored on the message (agents.metering: counts, cost).
    usage: dict | None = None

    @property
    def content(self) -> str:
        return "".join(self.text)


class ModelBackend:
    """``advance(turn)`` runs the loop; ``cancel(turn)`` closes a run cancelled while it
    asked for a decision."""

    def advance(self, turn: Turn) -> Outcome:
        return _Loop(turn).advance()

    def cancel(self, turn: Turn) -> None:
        _Loop(turn).close_cancelled(None)


class _Loop:
    """One ``advance`` of the model loop over a claimed run (state lives in the database)."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.run = turn.run
        self.thread = turn.run.thread
        self.emitter = turn.emitter
        self.role_name = turn.role
        self.ctx = turn.tools
        self.cap = settings.AGENT_MAX_ITERATIONS
        self.pending_citations: list[dict] = []
        self.client_tools = client_tools_for(self.run)  # declared by an API client: never run here
        self.client_names = {t.name for t in self.client_tools}
        self.cut_off_retried = False  # a cut-off tool call was already retried once this turn

    def advance(self) -> Outcome:
        run = self.run
        assistant = self._resume_point()
        self.turn.started(assistant_message_id=assistant.pk)
        if assistant.status != Message.Status.STREAMING and not assistant.tool_calls:
            # An earlier attempt stored the whole answer, then lost the run before ending it
            # (fenced: its lease could not be renewed): the run ends with it, nobody asks again.
            if self.emitter.seq > 0:
                self.emitter.emit("message.completed", message_id=str(assistant.pk), status=assistant.status)
            cut = assistant.status == Message.Status.TRUNCATED and assistant.error
            return Outcome.completed(truncated=dict(assistant.error) if cut else None)
        while True:
            if assistant.tool_calls:  # a resumed message whose calls still need results
                state = self._execute_calls(assistant)
                if state == "cancelled" or self.turn.cancelled():
                    return self.close_cancelled(None)
                if state == "awaiting_approval":
                    return Outcome.awaiting_approval()
                if any(c["name"] in self.client_names for c in assistant.tool_calls):
                    return Outcome.completed()  # the API client runs its own tools (agents/client_tools.py)
                if run.iterations >= self.cap:
                    return self._hit_cap()
                assistant = self._new_assistant()
                continue
            try:
                streamed = self._stream(assistant)
            except RunCancelled:
                return self.close_cancelled(assistant)
            except ProviderError as exc:
                return self._provider_failed(assistant, exc)
            except DispatchRefused as exc:  # a budget's hard limit: the provider is not called
                return self._refused(assistant, exc)
            run.iterations += 1
            if streamed.tool_calls:  # the loop goes on; a last round's count is saved with the run's end
                _save_iterations(run)
            finish = streamed.finish or Finish("stop")
            cut_off = any(arguments_cut_off(c.arguments) for c in streamed.tool_calls)
            if cut_off and finish.reason != "length" and not self.cut_off_retried:
                # Reported as "tool_calls" but cut off by the output limit: one retry (the
                # call gets a "cut off, send it shorter" error result), never a loop to the cap.
                self.cut_off_retried = True
            elif finish.reason == "length" or cut_off:
                # A half-built tool call is never executed (shared/cases, issue: providers).
                assistant.error = {"code": "output_limit", "message": OUTPUT_LIMIT_REASON}
                self._close_assistant(assistant, streamed, Message.Status.TRUNCATED)
                return Outcome.completed(truncated=dict(assistant.error))
            assistant.tool_calls = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in streamed.tool_calls
            ]
            self._close_assistant(assistant, streamed, Message.Status.COMPLETE)
            if not assistant.tool_calls:
                return Outcome.completed()

    def _resume_point(self) -> Message:
        """The assistant message to continue with: a fresh one, or the unfinished one left by
        an earlier attempt (a streaming message is closed as truncated first, and when the
        run's events had begun, ``message.completed`` ``truncated`` tells live clients that
        its text ended: the next ``text.delta`` starts the round asked again; its text is what
        those clients were shown, ``agents.replay.fill_from_log``), or the answer an
        earlier attempt finished (complete, or cut by the output limit, with no tool calls)
        before it lost the run. On the run's first claim (``run.first_claim``,
        agents.runs.driver) there is none to look for."""
        if getattr(self.run, "first_claim", False):
            return self._new_assistant()
        last = Message.objects.filter(run=self.run).order_by("-position").first()
        if last is not None and last.role == Message.Role.ASSISTANT:
            if not last.tool_calls and (last.status == Message.Status.COMPLETE or (
                    last.status == Message.Status.TRUNCATED and (last.error or {}).get("code") == "output_limit")):
                return last  # the answer is whole: advance() ends the run with it
            if last.status == Message.Status.STREAMING:
                last.status = Message.Status.TRUNCATED
                # All the text live clients were shown (the event log), not only the lost
                # worker's last save: it may have streamed on while the database was away.
                last.content = fill_from_log(self.run.pk, last.content)
                last.save(update_fields=["status", "content", "updated_at"])
                if self.emitter.seq > 0:  # else nobody was told of it: run.started comes next
                    self.emitter.emit("message.completed", message_id=str(last.pk), status=last.status)
                if last.tool_calls:
                    return last
                return self._new_assistant()
            if last.tool_calls and not all_answered(last):
                return last
        if last is not None and last.role == Message.Role.TOOL:
            parent = Message.objects.filter(run=self.run, role=Message.Role.ASSISTANT).order_by("-position").first()
            if parent is not None and not all_answered(parent):
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
        """The run's retrieved context (``agents.grounding``: the knowledge app's), once per turn; the
        sources it gave lead the final answer's citations."""
        if getattr(self, "grounding", None) is None:
            self.grounding = grounding_for(run=self.run, tier=tier)
            self.pending_citations[:0] = self.grounding.citations
        return self.grounding

    def _preset(self):
        """The thread's preset (``agents.presets``: a workspace assistant) for the run's caller,
        read afresh for every model request like the policies: disabling an assistant, or its
        creator losing a tool's role, applies to the next round. Raises ``ProviderError``
        (the preset's refusal code) when it may not be used now."""
        try:
            self.preset = preset_for_thread(thread=self.thread, user=self.run.user)
        except PresetRefused as exc:
            raise ProviderError(exc.code, exc.message) from exc
        return self.preset

    def _offer(self):
        """The tools offered now (policies are read afresh for every model request)."""
        self.policies = policy_views()
        preset = self._preset()
        self.only = preset.tools if preset is not None else None
        offer = tool_pipeline(
            role_name=self.role_name,
            object_type=(self.run.ui_context or {}).get("objectType"),
            allow_model_save=self.thread.allow_model_save,
            policies=self.policies,
            only=self.only,
        )
        self.offered = offer.names
        return offer

    def _stream(self, assistant: Message) -> Streamed:
        adapter = provider_for(self.run.provider)
        offer = self._offer()  # may raise ProviderError: the thread's assistant was disabled
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
                extra_blocks=[*instruction_blocks(user_id=self.run.user_id, workspace_id=self.thread.workspace_id,
                                                  workspace=self.thread.workspace),
                              preset_block(self.preset), grounding.block],
            ),
            # The branch up to this (new, so leaf) assistant message, without it.
            messages=history_window(
                thread_history(thread_id=self.thread.pk, leaf_id=assistant.pk, exclude_ids={assistant.pk},
                               images=model_takes_images(provider=self.run.provider, model=self.run.model,
                                                         memo=self.thread)),
                plan.history_limit,
            ),
            tools=[ToolDefinition(t.name, t.description, t.parameters) for t in offer.tools] + self.client_tools,
            max_output_tokens=plan.max_output_tokens,
            options=plan.options,
            echo_reasoning=plan.echo_reasoning,
            grounding=grounding.sources,
        )
        # May raise DispatchRefused. The budget reserves what the round can cost and may lower
        # its output cap to what is left (usage.services.budget_admit): the request sends it.
        hold = meter().before_round(run=self.run, cost=round_cost(request))
        if (granted := granted_output_tokens(hold)) is not None:
            request.max_output_tokens = granted
        streamed = Streamed()
        started = time.monotonic()
        first_text: float | None = None
        provider = self.run.provider.slug if self.run.provider else ""
        span = meter().span("model.request", provider=provider, model=self.run.model)
        span.__enter__()

        def take(event: StreamEvent) -> None:
            """One event of the response (on this thread, or on the event loop)."""
            nonlocal first_text
            # First: a worker that lost its lease writes nothing more (LeaseLost), and a
            # cancelled run keeps only what arrived before the cancel.
            if self.turn.cancelled():
                self._partial = streamed
                raise RunCancelled
            if isinstance(event, TextDelta):
                if first_text is None:
                    first_text = time.monotonic() - started
                streamed.text.append(event.text)
                self.emitter.text(event.text)
            elif isinstance(event, ReasoningDelta):
                streamed.reasoning.append(event.text)
            elif isinstance(event, StreamedToolCall):
                streamed.tool_calls.append(event)
            elif isinstance(event, Finish):
                streamed.finish = event

        on_loop = settings.PROVIDER_STREAM_ON_LOOP and hasattr(adapter, "aopen")
        stream = None if on_loop else adapter.stream(request)
        self.turn.dispatched()  # the next turn's set-up may start (agents.runs.gate)
        release_db_connection()  # the pool gets it back while the model streams
        # The heartbeat saves the text so far with each renewal: a crash loses at most one
        # interval (STREAM_PERSIST_INTERVAL_S) of it; this thread makes no query while it streams.
        self.turn.lease.persist_stream(assistant.pk, lambda: {"content": streamed.content})
        try:
            if stream is None:
                self._read_on_loop(adapter, request, take, streamed)
            else:
                for event in stream:
                    take(event)
        except BaseException as exc:
            if isinstance(exc, ProviderError):
                exc.partial = streamed  # type: ignore[attr-defined]
                metrics.PROVIDER_ERRORS.labels(exc.code).inc()
            meter().release(hold)
            raise
        finally:
            self.turn.lease.persist_stream()  # the message's own save (closing it) comes next
            close = getattr(stream, "close", None)
            if close:
                close()
            span.__exit__(None, None, None)
        # The writes below need the database: with the lease suspended or the heartbeat failing
        # (a PostgreSQL restart under the stream), wait for a renewal rather than fail them.
        self.turn.lease.wait_owned()
        usage = streamed.finish.usage if streamed.finish else None
        metrics.record_round(provider=provider, first_token_s=first_text, duration_s=time.monotonic() - started,
                             output_tokens=usage.output_tokens if usage else None)
        streamed.usage = meter().after_round(run=self.run, message=assistant, usage=usage, hold=hold,
                                             emitter=self.emitter)
        return streamed

    def _read_on_loop(self, adapter, request: ChatRequest, take, streamed: Streamed) -> None:
        """Read the response on the process's event loop (``wire.arelay``): ``take`` runs
        there for every event, so a token goes to the emitter without waking this thread —
        the web server's loop in embedded mode, where the emitter delivers, and the
        publisher loop thread in a worker. This thread waits, and checks the cancel flag and
        the lease every ``PROVIDER_STREAM_POLL_S`` seconds, so a cancel (or a lost lease)
        also stops a model that sends nothing."""

        def stop() -> BaseException | None:
            if self.turn.cancelled():  # raises LeaseLost: the same, raised once the read ended
                self._partial = streamed
                return RunCancelled()
            return None

        try:
            run_on_loop(lambda: arelay(adapter, request, take), poll_s=settings.PROVIDER_STREAM_POLL_S, stop=stop)
        except LoopStopped as exc:  # the server is shutting down: the text so far is kept
            raise ProviderError("stream_interrupted", "the server stopped while the model was answering",
                                retryable=True) from exc

    def _execute_calls(self, assistant: Message) -> str:
        if not hasattr(self, "offered"):
            try:
                self._offer()
            except ProviderError:  # the assistant may not be used now: no call of its runs; the
                self.policies, self.offered, self.only = policy_views(), [], frozenset()  # next round fails
        answered = answered_ids(assistant)
        for call in assistant.tool_calls:
            if call["id"] in answered or call["name"] in self.client_names:
                continue
            if self.turn.cancelled():
                return "cancelled"
            with meter().span("tool.call", tool=call["name"]):
                outcome = execute_tool_call(
                    run=self.run, assistant=assistant, call=call, ctx=self.ctx,
                    offered=self.offered, policies=self.policies, emitter=self.emitter, tick=self.turn.cancelled,
                    only=self.only,
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
        if streamed.usage is not None:
            assistant.usage = streamed.usage
        if self.pending_citations and not assistant.tool_calls:
            assistant.citations = _dedupe(self.pending_citations)
        # Only what the loop sets: a full save would also write the tree links others keep.
        retry_transient(assistant.save)(update_fields=CLOSE_FIELDS)
        self.emitter.emit("message.completed", message_id=str(assistant.pk), status=status)

    def _hit_cap(self) -> Outcome:
        note = (
            f"I stopped after {self.cap} rounds of tool calls without reaching an answer "
            "(the iteration cap). Ask again, or narrow the question."
        )
        assistant = self._new_assistant()
        self._close_assistant(assistant, Streamed(text=[note]), Message.Status.TRUNCATED)
        return Outcome.completed()

    def _provider_failed(self, assistant: Message, exc: ProviderError) -> Outcome:
        partial: Streamed = getattr(exc, "partial", None) or Streamed()
        status = Message.Status.TRUNCATED if partial.content else Message.Status.ERROR
        assistant.error = {"code": exc.code, "message": exc.message}
        self._close_assistant(assistant, partial, status)
        return Outcome.failed(exc.code, exc.message, retryable=exc.retryable)

    def _refused(self, assistant: Message, exc: DispatchRefused) -> Outcome:
        """A budget refused the next model request: the reason (with the reset time) is the
        assistant's message, and the run fails with ``budget_exceeded``."""
        assistant.error = {"code": exc.code, "message": exc.message}
        self._close_assistant(assistant, Streamed(text=[exc.message]), Message.Status.ERROR)
        return Outcome.failed(exc.code, exc.message)

    def close_cancelled(self, assistant: Message | None) -> Outcome:
        """End a cancelled run's work: partial text kept as ``cancelled``; unanswered tool
        calls get a "cancelled by the user" result so the history stays valid for every
        provider. The final assistant message is always persisted (DESIGN §5): the partial
        text, or an empty one marked cancelled when the cancel came between model responses."""
        close_open_calls(run=self.run, reason=CANCELLED_RESULT)
        final = assistant if assistant is not None else self._new_assistant()
        partial = getattr(self, "_partial", Streamed()) if assistant is not None else Streamed()
        self._close_assistant(final, partial, Message.Status.CANCELLED)
        return Outcome.cancelled()


def _dedupe(citations: list[dict]) -> list[dict]:
    seen, out = set(), []
    for c in citations:
        key = (c.get("item_id"), c.get("chunk_id"))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


@retry_transient
def _save_iterations(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(iterations=run.iterations)

