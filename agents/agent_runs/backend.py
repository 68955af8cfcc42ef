"""The ``agent_runs`` backend: a remote agent (the Hermes agent gateway) does the turn.

One ``advance`` starts the remote run (or re-attaches to it), reads its events and maps them
onto the platform's vocabulary (``agents/event_types.py``)::

    remote event            ours
    message.delta           text.delta (coalesced by the emitter like any text)
    reasoning.available     kept in the message's ``reasoning``; never shown as the answer
    tool.started            tool.started + a ToolCall ledger row (preview = argument summary)
    tool.completed          tool.completed (duration, error) + a tool message
    approval.request        approval.requested (our ledger row parks; the run parks)
    approval.responded      — (our own approval.resolved was published by the decision)
    run.completed           the assistant message ``complete`` with the remote output and usage
    run.failed              the message ``error`` (or ``truncated`` with partial text), run failed
    run.cancelled           closed ``cancelled`` when we stopped it, else a failure

State kept on the run (``Run.backend_state``, via ``lifecycle.run_backend_state_save``)::

    {"phase": "starting" | "attached", "remote_run_id": "run_…", "events_read": int,
     "pending_approval": {"ledger_id", "choices"} | absent}

``remote_run_id`` is saved before any event is read, so a recovered run re-attaches and never
starts the remote run twice (a crash between the POST and that save leaves ``phase``
"starting": the run fails with a notice rather than risk a second remote run).

Re-attaching: the Hermes event stream has no event ids and is one queue that the gateway
drops when its reader goes away, so the events of a re-attached run may be gone. The run's
status (``GET /v1/runs/{id}``, polled every ``AGENT_RUNS_POLL_S``) is the source of truth:
a completed run ends with the remote ``output`` as the message text (what was not streamed is
sent as one last ``text.delta``), a failed one with its error, a run waiting for approval
without its event gets an approval card whose command is unknown.

Metering (``agents.metering``, the same meter as the model backend's rounds): the whole
remote run is one round. Before the remote run is started, and before an approval is
forwarded (the agent then goes on calling its model), the run takes the meter's hold
(``before_round``): a budget's hard limit refuses it — the agent is never started, or the
approved call is denied and the remote run stopped — and the run fails ``budget_exceeded``
with the reset time as the message. ``run.completed``'s usage (input/output tokens; Hermes
gives no cached or reasoning counts: null) is stored through ``after_round``: a usage record
with its cost at the model row's price, the message's ``usage``, budget warnings. A remote
run that ends otherwise, or parks for a decision, gives its hold back.

Approvals go through the platform's own flow (DESIGN §5): the ledger row of the remote tool
call parks ``awaiting_approval`` with risk ``dangerous`` (the agent flagged the command) in
the environment the provider is bound to, ``approval.requested`` is published, and the run
parks without a worker. The next ``advance`` forwards the decision: ``deny`` for a denial,
the provider's ``agent_approve_as`` (``once`` unless an admin allowed ``session``/``always``)
for an approval. A decision the agent no longer waits for (409: it timed out or moved on) is
reported on the ledger row and in the tool card, not lost.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time

from django.conf import settings

from agents.approvals.requests import approval_request
from agents.backends import Outcome, Turn
from agents.ledger import tool_call_close
from agents.metering import DispatchRefused, meter
from agents.models import Role, Run, ToolCall
from agents.provider_keys import key_status, provider_api_key
from agents.risk import resolve_env, risk_classify
from agents.runs import lifecycle
from chat.models import Message
from chat.services import message_create
from llm import Usage
from llm.agent_runs import SSE_COMMENT, AgentRunsClient, AgentRunsError

logger = logging.getLogger(__name__)

TICK_S = 0.25  # how often the loop looks at the lease, the cancel flag and the clock
HISTORY_LIMIT = 50  # earlier messages sent as conversation_history
OPEN = (ToolCall.Status.PENDING, ToolCall.Status.APPROVED, ToolCall.Status.RUNNING)
TERMINAL_REMOTE = ("completed", "failed", "cancelled")


def client_for(provider, **overrides) -> AgentRunsClient:
    """The Runs API client for an ``agent_runs`` provider row (its key never leaves it)."""
    return AgentRunsClient(
        base_url=provider.base_url or settings.HERMES_API_BASE,
        api_key=provider_api_key(provider),
        connect_s=overrides.get("connect_s", settings.AGENT_RUNS_CONNECT_TIMEOUT_S),
        read_s=overrides.get("read_s", settings.AGENT_RUNS_READ_TIMEOUT_S),
    )


class AgentRunsBackend:
    """``advance(turn)``: start / re-attach / forward a decision; ``cancel(turn)``: stop the
    remote run (a cancel while the backend asked for a decision); ``abandon(run)``: a waiting
    run was cancelled or superseded without a worker — deny and stop remotely."""

    def advance(self, turn: Turn) -> Outcome:
        return _Attempt(turn).advance()

    def cancel(self, turn: Turn) -> None:
        drop_parked_stream(str((turn.run.backend_state or {}).get("remote_run_id") or ""))
        attempt = _Attempt(turn)
        attempt._close_cancelled(confirmed=attempt.stop_remote())

    def abandon(self, run: Run) -> None:
        state = dict(run.backend_state or {})
        remote = state.get("remote_run_id")
        if not remote or run.provider is None:
            return
        drop_parked_stream(remote)
        client = client_for(run.provider, connect_s=2.0, read_s=3.0)
        for call in (lambda: client.approve(remote, "deny"), lambda: client.stop(remote)):
            try:
                call()
            except AgentRunsError as exc:
                logger.info("run %s: abandoning remote run %s: %s", run.pk, remote, exc.message)


class _Attempt:
    """One ``advance`` over a claimed run; everything it needs again is in the database."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.run = turn.run
        self.provider = turn.run.provider
        self.emitter = turn.emitter
        self.state: dict = dict(self.run.backend_state or {})
        self.client = client_for(self.provider)
        self.assistant = self._assistant()
        self.streamed: list[str] = [self._published_text()]
        self.reasoning: list[str] = [self.assistant.reasoning] if self.assistant.reasoning else []
        self.last_persist = time.monotonic()
        self.stream = None
        self.parking = False  # True once the run waits for a decision: keep the stream open
        self.hold = None  # the meter's hold for the remote run's work (agents.metering)

    # -- the turn ---------------------------------------------------------------------------
    def advance(self) -> Outcome:
        try:  # the trace's span for the remote agent's work (its HTTP calls are httpx spans inside)
            with meter().span("agent.run", provider=self.provider.slug, model=self.run.model):
                return self._advance()
        finally:
            if self.hold is not None:  # parked, failed, cancelled or crashed: no usage to record
                meter().release(self.hold)
                self.hold = None

    def _advance(self) -> Outcome:
        self.turn.started(assistant_message_id=self.assistant.pk)
        if not Role.objects.filter(name=self.turn.role, is_admin=True).exists():
            return self.fail("forbidden", f"Only workspace admins may use {self.provider.name}: the agent runs "
                             "commands on the servers it administers.")
        remote = self.state.get("remote_run_id")
        if not remote and (not self.provider.enabled or key_status(self.provider)):
            why = "is disabled" if not self.provider.enabled else f"is not configured: {key_status(self.provider)}"
            return self.fail("not_configured", f"{self.provider.name} {why}.")
        if not remote:
            if self.state.get("phase") == "starting":
                return self.fail("interrupted", "The worker stopped while starting the agent's run; it may have "
                                 "started. It was not started again — ask again to retry.")
            try:
                self.hold = meter().before_round(run=self.run)
            except DispatchRefused as exc:  # a budget's hard limit: the agent is not started
                return self.refused(exc)
            try:
                remote = self._start()
            except AgentRunsError as exc:
                return self.fail(f"agent_{exc.code}", f"{self.provider.name}: {exc.message}",
                                 retryable=exc.code in ("unreachable", "timeout"))
        if self.state.get("pending_approval"):
            outcome = self._forward_decision(remote)
            if outcome is not None:
                return outcome
        return self._follow(remote)

    def _start(self) -> str:
        self._save_state(phase="starting")
        user_message = self.run.user_message
        remote = self.client.start_run(
            input=user_message.content if user_message else "",
            conversation_history=self._history(),
            session_id=f"chatplatform-{self.run.thread_id}",
        )
        self._save_state(phase="attached", remote_run_id=remote, events_read=0)
        return remote

    def _history(self) -> list[dict]:
        rows = (Message.objects.filter(thread_id=self.run.thread_id, role__in=[Message.Role.USER, Message.Role.ASSISTANT])
                .exclude(run=self.run).exclude(content="").order_by("-position")[:HISTORY_LIMIT])
        return [{"role": m.role, "content": m.content} for m in reversed(rows)]

    # -- following the remote run ---------------------------------------------------------
    def _follow(self, remote: str) -> Outcome:
        events = self._open_stream(remote)
        self.turn.dispatched()  # the agent works remotely now: the next turn's set-up may start
        poll_every = settings.AGENT_RUNS_POLL_S
        next_poll = time.monotonic() + poll_every
        terminal_seen_at: float | None = None
        last_event_at = 0.0
        unreachable_since: float | None = None
        last_status: dict = {}
        try:
            while True:
                try:
                    kind, item = events.get(timeout=TICK_S)
                except queue.Empty:
                    kind, item = "idle", None
                if kind == "event":
                    if item.get("event") != SSE_COMMENT:
                        last_event_at = time.monotonic()
                    outcome = self._on_event(item)
                    if outcome is not None:
                        return outcome
                elif kind in ("eof", "error"):
                    self._close_stream()
                    next_poll = 0.0  # the stream ended without a terminal event: ask for the status now
                if self.turn.cancelled():
                    return self._stopped()
                self._persist()
                now = time.monotonic()
                if now < next_poll or (self.stream is not None and now - last_event_at < poll_every):
                    continue  # a live stream that is talking needs no status poll (it would delay deltas)
                next_poll = now + poll_every
                try:
                    last_status = self.client.get_run(remote)
                    unreachable_since = None
                except AgentRunsError as exc:
                    if exc.code == "not_found":
                        return self.fail("agent_run_lost", f"{self.provider.name} no longer knows this run (it was "
                                         "restarted or forgot it); the partial answer is kept.", retryable=True)
                    if exc.code == "auth":
                        return self.fail("agent_auth", f"{self.provider.name}: {exc.message}")
                    unreachable_since = unreachable_since or now
                    if now - unreachable_since >= settings.AGENT_RUNS_UNREACHABLE_S:
                        return self.fail("agent_unreachable", f"Lost the connection to {self.provider.name} "
                                         f"({exc.message}); the partial answer is kept.", retryable=True)
                    continue
                status = last_status.get("status")
                if status in TERMINAL_REMOTE:
                    # The terminal event normally arrives first; without a live stream (or after a
                    # short grace) the status decides.
                    terminal_seen_at = terminal_seen_at or now
                    if self.stream is None or now - terminal_seen_at >= settings.AGENT_RUNS_POLL_S * 2:
                        return self._finish_from_status(last_status)
                elif status == "waiting_for_approval" and self.stream is None:
                    return self._approval({"command": "", "description": "the agent asked for approval; its event "
                                           "stream was lost, so the command is not known here", "choices": []})
        finally:
            if self.parking and self.stream is not None:
                _park_stream(remote, self.stream, events)  # kept for the decision's advance
                self.stream = None
            self._close_stream()

    def _open_stream(self, remote: str) -> queue.Queue:
        """The run's event queue, filled by a reader thread: the stream this process kept while
        the run waited for a decision (the gateway would have dropped the run's events had it
        been closed), or a new subscription. Without a stream the queue stays empty and the
        run's status is followed."""
        parked = _unpark_stream(remote)
        if parked is not None:
            self.stream, events = parked
            return events
        events: queue.Queue = queue.Queue()
        try:
            stream = self.client.open_events(remote)
        except AgentRunsError as exc:
            logger.info("run %s: no event stream for %s (%s); following its status", self.run.pk, remote, exc.message)
            return events
        self.stream = stream

        def read() -> None:
            try:
                for event in stream:
                    events.put(("event", event))
                events.put(("eof", None))
            except AgentRunsError as exc:
                events.put(("error", exc))
            except Exception as exc:  # noqa: BLE001 - closed from the other thread
                events.put(("error", exc))

        threading.Thread(target=read, name=f"agent-events-{remote[-8:]}", daemon=True).start()
        return events

    def _close_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def _on_event(self, event: dict) -> Outcome | None:
        name = event.get("event")
        if name == SSE_COMMENT:
            return None
        self.state["events_read"] = int(self.state.get("events_read") or 0) + 1
        if name == "message.delta":
            delta = event.get("delta")
            if isinstance(delta, str) and delta:
                self.streamed.append(delta)
                self.emitter.text(delta)
        elif name == "reasoning.available":
            text = event.get("text")
            if isinstance(text, str) and text:
                self.reasoning.append(text)
        elif name == "tool.started":
            self._tool_started(str(event.get("tool") or "tool"), str(event.get("preview") or ""))
        elif name == "tool.completed":
            self._tool_completed(str(event.get("tool") or "tool"), event.get("duration"), bool(event.get("error")))
        elif name == "approval.request":
            return self._approval(event)
        elif name == "run.completed":
            return self._completed(event.get("output"), event.get("usage"))
        elif name == "run.failed":
            return self._remote_failed(event.get("error"))
        elif name == "run.cancelled":
            return self._remote_cancelled()
        elif name == "malformed":
            logger.warning("run %s: ignoring a malformed agent event: %r", self.run.pk, event.get("raw"))
        # approval.responded and unknown events carry nothing to show
        return None

    # -- tools ------------------------------------------------------------------------------
    def _tool_started(self, tool: str, preview: str) -> ToolCall:
        assistant = self.assistant
        call_id = f"agent-{len(assistant.tool_calls or []) + 1}"
        arguments = json.dumps({"command": preview}) if preview else "{}"
        assistant.tool_calls = [*(assistant.tool_calls or []), {"id": call_id, "name": tool, "arguments": arguments}]
        assistant.content = self._text()
        assistant.save(update_fields=["tool_calls", "content", "updated_at"])
        ledger, _ = lifecycle.tool_call_open(run=self.run, message=assistant, call_id=call_id, tool_name=tool,
                                             raw_arguments=arguments)
        ledger.arguments = {"command": preview} if preview else {}
        ledger.save(update_fields=["arguments", "updated_at"])
        self.emitter.emit("tool.started", tool_call_id=str(ledger.pk), name=tool,
                          arguments_summary=_clip(preview, 200) or "(no arguments shown)")
        return ledger

    def _open_call(self, tool: str | None = None) -> ToolCall | None:
        calls = ToolCall.objects.filter(run=self.run, status__in=OPEN)
        if tool:
            calls = calls.filter(tool_name=tool)
        return calls.order_by("created_at").first()

    def _tool_completed(self, tool: str, duration, error: bool) -> None:
        ledger = self._open_call(tool) or self._open_call()
        if ledger is None:
            last = ToolCall.objects.filter(run=self.run).order_by("-created_at").first()
            if last is not None and last.decision and last.status in (ToolCall.Status.DENIED,
                                                                       ToolCall.Status.STATUS_UNKNOWN):
                return  # the agent closing a call our decision already closed (denied, or decided too late)
            ledger = self._tool_started(tool, "")  # a completion whose start was lost: record it anyway
        seconds = float(duration) if isinstance(duration, int | float) else None
        took = f" in {seconds:.2f} s" if seconds is not None else ""
        summary = f"{tool} reported an error{took}" if error else f"{tool} completed{took}"
        status = ToolCall.Status.FAILED if error else ToolCall.Status.SUCCEEDED
        self._finish_call(ledger, status, summary, is_error=error,
                          duration_ms=int(seconds * 1000) if seconds is not None else None)

    def _finish_call(self, ledger: ToolCall, status: str, summary: str, *, is_error: bool,
                     duration_ms: int | None = None) -> None:
        tool_call_close(ledger=ledger, run=self.run, emitter=self.emitter, status=status, summary=summary,
                        result={"summary": summary}, is_error=is_error, duration_ms=duration_ms)

    # -- approvals --------------------------------------------------------------------------
    def _approval(self, event: dict) -> Outcome:
        command = str(event.get("command") or "")
        description = str(event.get("description") or event.get("pattern_key") or "")
        ledger = self._open_call()
        if ledger is None or ledger.status != ToolCall.Status.PENDING:
            ledger = self._tool_started("terminal", command)
        arguments = {"command": command or ledger.arguments.get("command", ""), "description": description}
        assessment = risk_classify(
            risk="dangerous", approval_mode="always",
            env_name=(self.provider.environment.name if self.provider.environment_id else "")
            or resolve_env(send_env_id=self.run.env_id, ui_context=self.run.ui_context),
            permission_granted=True,
        )
        ledger.arguments = arguments
        ledger.risk, ledger.risk_level = assessment.risk, assessment.risk_level
        ledger.env_context = assessment.env_context or ""
        ledger.save(update_fields=["arguments", "risk", "risk_level", "env_context", "updated_at"])
        choices = [c for c in event.get("choices") or [] if isinstance(c, str)]
        self.state["pending_approval"] = {"ledger_id": str(ledger.pk), "choices": choices}
        self._persist(force=True)
        self.parking = True
        approval_request(
            ledger=ledger, run=self.run, emitter=self.emitter, risk=assessment.risk, tier=assessment.env_context,
            arguments_summary=_clip(arguments["command"], 200) or "(command not known)", assessment=assessment,
            provider_id=self.provider.pk, description=description,
        )
        return Outcome.awaiting_approval()

    def _forward_decision(self, remote: str) -> Outcome | None:
        pending = self.state["pending_approval"]
        ledger = ToolCall.objects.select_related("decided_by").filter(pk=pending.get("ledger_id"), run=self.run).first()
        if ledger is None:
            self.state.pop("pending_approval", None)
            return None
        if ledger.status == ToolCall.Status.AWAITING_APPROVAL:
            return Outcome.awaiting_approval()  # not decided yet (a redelivered turn)
        who = ledger.decided_by.get_username() if ledger.decided_by else "the user"
        approved = ledger.status == ToolCall.Status.APPROVED
        allowed = pending.get("choices") or ["once", "deny"]
        choice = "deny"
        if approved:
            choice = self.provider.agent_approve_as if self.provider.agent_approve_as in allowed else "once"
            try:
                self.hold = meter().before_round(run=self.run)
            except DispatchRefused as exc:  # over budget: the agent must not go on calling its model
                return self._refuse_decision(remote, ledger, exc)
        try:
            self.client.approve(remote, choice)
        except AgentRunsError as exc:
            if exc.code not in ("conflict", "not_found"):
                return self.fail(f"agent_{exc.code}", f"{self.provider.name}: the decision could not be forwarded "
                                 f"({exc.message}).", retryable=exc.code in ("unreachable", "timeout"))
            late = (f"{'Approved' if approved else 'Denied'} by {who}, but {self.provider.name} was no longer "
                    "waiting for this decision (it timed out or moved on): the decision was not applied.")
            self._finish_call(ledger, ToolCall.Status.DENIED if not approved else ToolCall.Status.STATUS_UNKNOWN,
                              late, is_error=True)
        else:
            if approved:
                lifecycle.tool_call_claim(ledger=ledger)  # approved → running until tool.completed
            else:
                self._finish_call(ledger, ToolCall.Status.DENIED,
                                  f"{ledger.summary} {self.provider.name} did not run it." if ledger.decision == "expired"
                                  else f"Denied by {who}: {self.provider.name} did not run it.", is_error=True)
        self.state.pop("pending_approval", None)
        self._persist(force=True)
        return None

    def _refuse_decision(self, remote: str, ledger: ToolCall, exc: DispatchRefused) -> Outcome:
        """An approval a budget stops: the agent is told ``deny`` and stopped, the call is
        closed denied with the reason, and the run fails ``budget_exceeded``."""
        try:
            self.client.approve(remote, "deny")
        except AgentRunsError as err:
            logger.info("run %s: denying %s after a budget refusal: %s", self.run.pk, remote, err.message)
        self.stop_remote()
        self._finish_call(ledger, ToolCall.Status.DENIED, f"Not applied: {exc.message}", is_error=True)
        self.state.pop("pending_approval", None)
        self._persist(force=True)
        return self.refused(exc)

    # -- endings ----------------------------------------------------------------------------
    def _close_unreported_calls(self, *, run_completed: bool) -> None:
        """Calls whose completion event never came (the stream was lost on a re-attach)."""
        for ledger in ToolCall.objects.filter(run=self.run, status__in=OPEN).order_by("created_at"):
            if run_completed:
                self._finish_call(ledger, ToolCall.Status.SUCCEEDED, f"{ledger.tool_name} finished; its details "
                                  "were not received (the agent's event stream was lost) — see the answer.",
                                  is_error=False)
            else:
                self._finish_call(ledger, ToolCall.Status.STATUS_UNKNOWN, f"Outcome unknown: {self.provider.name} "
                                  "ended without reporting this call.", is_error=True)

    def _completed(self, output, usage) -> Outcome:
        self._close_unreported_calls(run_completed=True)
        final = output if isinstance(output, str) and output.strip() else self._text()
        self._catch_up(final)
        hold, self.hold = self.hold, None
        self.assistant.usage = meter().after_round(run=self.run, message=self.assistant, usage=_usage(usage),
                                                   hold=hold, emitter=self.emitter)
        self.close_message(Message.Status.COMPLETE, content=final)
        return Outcome.completed()

    def _finish_from_status(self, status: dict) -> Outcome:
        kind = status.get("status")
        if kind == "completed":
            return self._completed(status.get("output"), status.get("usage"))
        if kind == "failed":
            return self._remote_failed(status.get("error"))
        return self._remote_cancelled()

    def _remote_failed(self, error) -> Outcome:
        cause = str(error or "no reason given")[:500]
        return self.fail("agent_failed", f"{self.provider.name} failed: {cause}")

    def _remote_cancelled(self) -> Outcome:
        if lifecycle.run_is_cancelled(run_id=self.run.pk):
            return self._close_cancelled(confirmed=True)
        return self.fail("agent_cancelled", f"{self.provider.name} stopped this run on its side.")

    def _stopped(self) -> Outcome:
        """Our run was cancelled: stop the remote run and wait (bounded) for it to confirm."""
        confirmed = self.stop_remote()
        return self._close_cancelled(confirmed=confirmed)

    def stop_remote(self) -> bool:
        """POST stop, then wait up to ``AGENT_RUNS_STOP_WAIT_S`` for the remote run to end.
        True when it confirmed."""
        remote = self.state.get("remote_run_id")
        if not remote:
            return True
        try:
            self.client.stop(remote)
        except AgentRunsError as exc:
            if exc.code == "not_found":  # no longer active there
                return True
            logger.info("run %s: stop of %s failed: %s", self.run.pk, remote, exc.message)
            return False
        deadline = time.monotonic() + settings.AGENT_RUNS_STOP_WAIT_S
        while time.monotonic() < deadline:
            try:
                if self.client.get_run(remote).get("status") in TERMINAL_REMOTE:
                    return True
            except AgentRunsError as exc:
                if exc.code == "not_found":
                    return True
            time.sleep(min(0.2, settings.AGENT_RUNS_POLL_S))
        return False

    def _close_cancelled(self, *, confirmed: bool) -> Outcome:
        from agents.ledger import close_open_calls

        close_open_calls(run=self.run, reason=f"Stopped: the run was cancelled; {self.provider.name} was asked to stop.")
        if not confirmed:
            self.assistant.error = {"code": "stop_unconfirmed", "message": (
                f"{self.provider.name} did not confirm the stop within {settings.AGENT_RUNS_STOP_WAIT_S:.0f} s; "
                "it may still finish what it was doing.")}
        self.close_message(Message.Status.CANCELLED)
        return Outcome.cancelled()

    def fail(self, code: str, message: str, *, retryable: bool = False) -> Outcome:
        self._close_unreported_calls(run_completed=False)
        self.assistant.error = {"code": code, "message": message}
        self.close_message(Message.Status.TRUNCATED if self._text().strip() else Message.Status.ERROR)
        return Outcome.failed(code, message, retryable=retryable)

    def refused(self, exc: DispatchRefused) -> Outcome:
        """A budget refused the agent's work: the reason (with the reset time) is the answer."""
        self.streamed = [exc.message]
        self.assistant.error = {"code": exc.code, "message": exc.message}
        self.close_message(Message.Status.ERROR)
        return Outcome.failed(exc.code, exc.message)

    def close_message(self, status: str, *, content: str | None = None) -> None:
        assistant = self.assistant
        assistant.content = self._text() if content is None else content
        assistant.reasoning = "".join(self.reasoning)
        assistant.status = status
        assistant.save()
        self._persist(force=True)
        self.emitter.emit("message.completed", message_id=str(assistant.pk), status=status)

    # -- helpers ----------------------------------------------------------------------------
    def _assistant(self) -> Message:
        """This run's assistant message: the one an earlier attempt left open, or a new one."""
        last = Message.objects.filter(run=self.run, role=Message.Role.ASSISTANT).order_by("-position").first()
        if last is not None and last.status == Message.Status.STREAMING:
            return last
        return message_create(thread_id=self.run.thread_id, run=self.run, role=Message.Role.ASSISTANT,
                              status=Message.Status.STREAMING, provider=self.provider.slug, model=self.run.model)

    def _text(self) -> str:
        return "".join(self.streamed)

    def _published_text(self) -> str:
        """The text this message already had: what is stored, or — for a run recovered from a
        dead worker, which may have published text it had not stored yet — what its
        ``text.delta`` events carried (the run's event log), so nothing is sent twice."""
        stored = self.assistant.content or ""
        if not self.run.attempts or self.assistant.status != Message.Status.STREAMING:
            return stored
        from chatplatform.event_log import event_log
        from chatplatform.loops import run_coroutine

        try:
            events = run_coroutine(event_log().read(str(self.run.pk)), timeout=5)
        except Exception:  # noqa: BLE001 - the stored text is still right, only possibly shorter
            logger.exception("run %s: could not read the event log", self.run.pk)
            return stored
        published = "".join(e.get("delta", "") for e in events if e.get("type") == "text.delta")
        return published if published.startswith(stored) else stored

    def _catch_up(self, final: str) -> None:
        """Send what the remote output has beyond the streamed text (events lost on a
        re-attach) as one delta, so the websocket's text ends as the stored answer."""
        streamed = self._text()
        if final.startswith(streamed):
            rest = final[len(streamed):]
        elif final.startswith(streamed.lstrip()):
            rest = final[len(streamed.lstrip()):]
        elif not streamed.strip():
            rest = final
        else:
            rest = ""  # the agent streamed intermediate narration; the stored answer is its output
        if rest:
            self.streamed.append(rest)
            self.emitter.text(rest)

    def _save_state(self, **changes) -> None:
        self.state.update(changes)
        lifecycle.run_backend_state_save(run_id=self.run.pk, state=self.state)

    def _persist(self, *, force: bool = False) -> None:
        """Keep the partial text and the backend state at most ``STREAM_PERSIST_INTERVAL_S`` old."""
        now = time.monotonic()
        if not force and now - self.last_persist < settings.STREAM_PERSIST_INTERVAL_S:
            return
        self.last_persist = now
        if self.assistant.status == Message.Status.STREAMING:
            self.assistant.content = self._text()
            self.assistant.reasoning = "".join(self.reasoning)
            self.assistant.save(update_fields=["content", "reasoning", "updated_at"])
        lifecycle.run_backend_state_save(run_id=self.run.pk, state=self.state)


# Event streams kept open while their run waits for a decision, by remote run id. The
# gateway drops a run's queued events once its reader disconnects, so this process keeps
# reading (into the queue) until the decision's advance takes the stream back. Another
# process (a different Celery worker) cannot: it follows the run's status instead.
PARKED_STREAM_MAX_AGE_S = 3600.0
_parked: dict[str, tuple] = {}
_parked_lock = threading.Lock()


def _park_stream(remote: str, stream, events: queue.Queue) -> None:
    now = time.monotonic()
    with _parked_lock:
        for key, (old_stream, _events, since) in list(_parked.items()):
            if now - since > PARKED_STREAM_MAX_AGE_S:
                old_stream.close()
                del _parked[key]
        _parked[remote] = (stream, events, now)


def _unpark_stream(remote: str) -> tuple | None:
    with _parked_lock:
        entry = _parked.pop(remote, None)
    return (entry[0], entry[1]) if entry else None


def drop_parked_stream(remote: str) -> None:
    """Close the stream kept for ``remote`` (its run was cancelled while waiting)."""
    entry = _unpark_stream(remote)
    if entry is not None:
        entry[0].close()


def _clip(text: str, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _usage(usage) -> Usage | None:
    """The remote run's token counts (Hermes: ``{input_tokens, output_tokens, total_tokens}``,
    summed over the agent's model calls) as a :class:`Usage`; None when it reported none."""
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int | None:
        value = usage.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None

    found = Usage(input_tokens=count("input_tokens"), output_tokens=count("output_tokens"))
    return found if found.input_tokens is not None or found.output_tokens is not None else None


__all__ = ["AgentRunsBackend", "client_for"]
