"""Executing one tool call the model made: ledger, guard, parsing, scope pinning,
validation, timeout/retry, events and the tool message. DESIGN §5 step 4.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
from django.conf import settings
from django.db import close_old_connections

from agents.audit import audit_record
from agents.events import RunEmitter
from agents.ledger import UNKNOWN_OUTCOME, tool_call_close
from agents.metering import meter
from agents.models import AuditEvent, ToolCall
from agents.pipeline import PolicyView, policy_defaults, tool_guard
from agents.presentation import arguments_summary, named_arguments
from agents.risk import resolve_env, risk_classify
from agents.runs import lifecycle
from agents.tools import ToolContext, ToolError, ToolOutput, ToolSpec, tool_sources
from agents.tools.api import PersonWait
from agents.tools.scope import RUN_SCOPE_ARGS, pin_scope
from chat.models import Message
from chat.services import message_create
from chatplatform.dbconn import release_db_connection
from chatplatform.safe_input import storable

from .cutoff import arguments_cut_off
from .results import to_text, truncate_for_model

logger = logging.getLogger(__name__)

RAW_ARGS_IN_ERROR = 200  # chars of the raw arguments quoted back to the model
READ_RETRY_DELAY_S = 1.0  # retry once after 1 s — read tools only; writes may not be idempotent

class ToolThreads:
    """The process's tool threads (``TOOL_THREADS``), of which one user's calls hold at most
    ``TOOL_CALLS_PER_USER`` at a time: one user's slow tools cannot starve everyone's.

    A call first takes one of its user's slots (waiting in the run's own thread, where the
    deadline and the cancel flag are watched), then a thread; the slot is given back when the
    call's body returns — or when the call is cancelled before it started."""

    def __init__(self, *, threads: int | None = None, per_user: int | None = None) -> None:
        self.threads = threads
        self.per_user = per_user
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: dict[object, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def slot(self, user_id) -> threading.BoundedSemaphore:
        with self._lock:
            if user_id not in self._slots:
                self._slots[user_id] = threading.BoundedSemaphore(self.per_user or settings.TOOL_CALLS_PER_USER)
            return self._slots[user_id]

    def submit(self, slot: threading.BoundedSemaphore, fn, *args) -> concurrent.futures.Future:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.threads or settings.TOOL_THREADS, thread_name_prefix="tool")
            pool = self._pool
        future = pool.submit(fn, *args)
        future.add_done_callback(lambda _f: slot.release())
        return future


tool_threads = ToolThreads()


@dataclass
class CallOutcome:
    """What the loop needs after a call: the tool message and citation data, or
    ``pending=True`` when the call waits for a person's decision (no message yet)."""

    message: Message | None
    citations: list[dict]
    pending: bool = False


def parse_arguments(raw: str | None) -> tuple[dict | None, str]:
    """Model arguments → ``(dict, "")`` or ``(None, actionable error)``.

    Empty or missing arguments are ``{}`` (no-parameter tools, shared/cases/openai/03); bad
    JSON or a non-object gets a retry message quoting the raw text (cases/openai/04).
    """
    if raw is None or not raw.strip():
        return {}, ""
    try:
        value = storable(json.loads(raw))  # a "\u0000" escape is a NUL once parsed
    except ValueError as exc:
        if arguments_cut_off(raw):
            return None, (
                f"The arguments were not valid JSON: they were cut off after {len(raw)} characters "
                "(your reply reached its output limit). Call the tool again with shorter arguments, "
                "or split the work."
            )
        quoted = raw[:RAW_ARGS_IN_ERROR] + ("…" if len(raw) > RAW_ARGS_IN_ERROR else "")
        return None, (
            f"The arguments were not valid JSON ({exc.msg}; char {exc.pos}). "
            f"Call the tool again with a single JSON object. You sent: {quoted}"
        )
    if not isinstance(value, dict):
        quoted = raw[:RAW_ARGS_IN_ERROR]
        return None, (
            f"The arguments must be a JSON object like {{\"name\": value}}, not {type(value).__name__}. "
            f"Call the tool again with an object. You sent: {quoted}"
        )
    return value, ""


def validate_arguments(spec: ToolSpec, args: dict) -> str:
    """"" when ``args`` match the tool's schema, else a message naming the field."""
    validator = jsonschema.Draft202012Validator(spec.parameters)
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.path))
    if not errors:
        return ""
    err = errors[0]
    where = ".".join(str(p) for p in err.path) or "(arguments)"
    return f"Invalid arguments for {spec.name}: {where}: {err.message}. Fix it and call the tool again."


def execute_tool_call(
    *,
    run,
    assistant: Message,
    call: dict,
    ctx: ToolContext,
    offered: list[str],
    policies: dict[str, PolicyView],
    emitter: RunEmitter,
    tick: Callable[[], bool] = lambda: False,
    only: frozenset[str] | None = None,
) -> CallOutcome:
    """Run one tool call at most once and persist its tool message.

    ``call`` is ``{"id", "name", "arguments"}`` from the assistant message. Steps: ledger
    row → invocation guard (unknown/disabled → error result; role lacks it →
    ``permission.denied``) → parse → scope pinning → schema validation → the tool's own
    ``precheck`` (a target outside the run's scope is refused here, never shown as an
    approval card) → risk → approval
    (returns ``CallOutcome(pending=True)`` after ``approval.requested``) → claim the call in
    one UPDATE → execute with the policy's timeout. ``tick()`` renews the run's lease and
    returns True when the run was cancelled (checked while the tool runs).

    A call the ledger shows as finished (succeeded, failed, timed out, status unknown,
    denied, expired) is never executed again: its stored outcome is replayed.
    """
    name = call["name"]
    ledger, created = lifecycle.tool_call_open(
        run=run, message=assistant, call_id=call["id"], tool_name=name, raw_arguments=call.get("arguments") or "",
    )
    if not created:
        replay = _replay(run, assistant, call, ledger, emitter)
        if replay is not None:
            return replay

    spec = tool_sources.get(name)
    args, error = parse_arguments(call.get("arguments"))
    if ledger.status == ToolCall.Status.PENDING:
        shown_args = {k: v for k, v in (args or {}).items()
                      if k not in RUN_SCOPE_ARGS and (spec is None or k not in spec.scope_args)}
        emitter.emit(
            "tool.started",
            tool_call_id=str(ledger.pk),
            name=name,
            arguments_summary=arguments_summary(named_arguments(spec, shown_args, user_id=ctx.user_id,
                                                                workspace_id=ctx.workspace_id))
            if args is not None else "(invalid arguments)",
        )

    # The invocation guard runs for every call, offered or not, and again after approval.
    guard = tool_guard(name=name, role_name=ctx.role, policies=policies, offered=offered, only=only)
    if guard.kind == "permission_denied":
        emitter.emit("permission.denied", tool=name, required_role=guard.required_role,
                     alternatives=list(guard.alternatives))
        audit_record(
            kind=AuditEvent.Kind.PERMISSION_DENIED, user_id=ctx.user_id, workspace_id=ctx.workspace_id,
            thread_id=ctx.thread_id, run=run, tool_name=name,
            detail={"role": ctx.role, "required_role": guard.required_role, "offered": name in offered},
        )
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.PERMISSION_DENIED,
                       error=guard.message)
    if not guard.allowed:
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED, error=guard.message)
    assert spec is not None
    policy = policies.get(name) or policy_defaults(spec)
    if spec.requires_model_save and not ctx.allow_model_save:
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED,
                       error=f"{name} is not available: model saves are off in this thread.")
    if args is None:
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED, error=error)

    # Scope pinning: whatever the model wrote, the call acts on the run's own scope — its
    # workspace, thread, user and environment (the environment picks the approval rule).
    env_name = spec.env_name or resolve_env(send_env_id=ctx.env_id, ui_context=ctx.ui_context)
    pinned = pin_scope(spec, args, ctx, env_name=env_name)
    model_args = pinned.tool_args
    if pinned.model_asked:
        logger.info("run %s: %s: scope arguments from the model ignored: %s", run.pk, name,
                    sorted(pinned.model_asked))
    problem = validate_arguments(spec, model_args)
    ledger.arguments = pinned.ledger_args
    assessment = risk_classify(
        risk=policy.risk,
        approval_mode=policy.approval_mode,
        env_name=env_name,
        permission_granted=True,
    )
    ledger.risk = assessment.risk
    ledger.risk_level = assessment.risk_level
    ledger.env_context = assessment.env_context or ""
    ledger.save(update_fields=["arguments", "risk", "risk_level", "env_context", "updated_at"])
    if problem:
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED, error=problem)
    refusal = _precheck(spec, ctx, model_args) if ledger.status != ToolCall.Status.APPROVED else ""
    if refusal:
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED, error=refusal)

    if ledger.status == ToolCall.Status.PENDING and spec.connect_check is not None:
        try:
            needed = spec.connect_check(ctx=ctx)
        except ToolError as exc:
            return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED,
                           error=f"{name} failed: {exc}")
        if needed is not None:  # the person must connect their own account first: a card, not an error
            return _request_connect(run, ledger, emitter, model_args, assessment, spec, needed)
    if assessment.needs_approval and ledger.status != ToolCall.Status.APPROVED:
        return _request_approval(run, ledger, emitter, model_args, assessment, spec)
    over_limit = meter().tool_over_limit(run=run, tool_name=name) if ledger.status != ToolCall.Status.APPROVED else None
    if over_limit:  # a per-tool call limit: a person decides instead of the limit refusing
        return _request_approval(run, ledger, emitter, model_args, assessment, spec, reason=over_limit)
    if not lifecycle.tool_call_claim(ledger=ledger):
        ledger.refresh_from_db()  # claimed elsewhere meanwhile: never run twice
        return _replay(run, assistant, call, ledger, emitter) or CallOutcome(None, [], pending=True)
    return _run(run, assistant, call, ledger, emitter, spec=spec, policy=policy, ctx=ctx, args=model_args, tick=tick)


def _precheck(spec: ToolSpec, ctx: ToolContext, args: dict) -> str:
    """"" when the tool has no precheck or it passes; else the refusal for the model."""
    if spec.precheck is None:
        return ""
    try:
        spec.precheck(ctx=ctx, **args)
    except ToolError as exc:
        return f"{spec.name} refused: {exc}"
    except Exception as exc:  # a broken precheck refuses: it never lets an unchecked call through
        logger.error("precheck of %s crashed", spec.name, exc_info=exc)
        return f"{spec.name} refused: its pre-check failed ({type(exc).__name__})."
    return ""


def _replay(run, assistant, call, ledger, emitter) -> CallOutcome | None:
    """The outcome of a call the ledger already knows, or None when it must still run."""
    status = ledger.status
    if status in (ToolCall.Status.PENDING, ToolCall.Status.APPROVED):
        return None
    if status == ToolCall.Status.AWAITING_APPROVAL:
        return CallOutcome(None, [], pending=True)
    if status == ToolCall.Status.RUNNING:
        # The worker died while the tool ran: we cannot know whether it took effect.
        tool_call_close(ledger=ledger, run=run, emitter=emitter, status=ToolCall.Status.STATUS_UNKNOWN,
                        summary=UNKNOWN_OUTCOME, tool_message=False)  # answered below, as any known outcome
    if status == ToolCall.Status.DENIED:
        who = ledger.decided_by.get_username() if ledger.decided_by else "the user"
        error = (ledger.summary if ledger.decision == "expired" or (ledger.summary and ledger.decision == "deny"
                                                                      and (ledger.approval or {}).get("rule") == "connect")
                 else f"Denied by {who}: the operation was cancelled and nothing was changed.")
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.DENIED, error=error)
    content = ledger.summary if ledger.is_error else truncate_for_model(ledger.result)
    return CallOutcome(_tool_message(run, assistant, call, content, ledger.is_error), [])


def _request_approval(run, ledger, emitter, model_args: dict, assessment, spec, *, reason: str = "") -> CallOutcome:
    from agents.approvals.requests import approval_request

    extra = {"reason": reason} if reason else {}
    approval_request(
        ledger=ledger, run=run, emitter=emitter, risk=assessment.risk, tier=assessment.env_context,
        arguments_summary=arguments_summary(named_arguments(spec, model_args, user_id=run.user_id,
                                                            workspace_id=run.thread.workspace_id)),
        assessment=assessment,
        mcp_server_slug=spec.source[4:] if spec.source.startswith("mcp:") else "", **extra,
    )
    return CallOutcome(None, [], pending=True)  # parked now, or by another attempt


def _request_connect(run, ledger, emitter, model_args: dict, assessment, spec, needed) -> CallOutcome:
    from agents.approvals.requests import connect_request

    connect_request(ledger=ledger, run=run, emitter=emitter, assessment=assessment, needed=needed,
                    arguments_summary=arguments_summary(named_arguments(spec, model_args, user_id=run.user_id,
                                                                        workspace_id=run.thread.workspace_id)))
    return CallOutcome(None, [], pending=True)


# The events a running tool may publish for its person (ToolContext.emit): an MCP server's question.
PERSON_EVENTS = frozenset({"elicitation.requested", "elicitation.resolved", "resource.linked"})
TICK_S = 0.25  # how often a waiting loop looks at the clock, the lease and the cancel flag


def _run(run, assistant, call, ledger, emitter, *, spec, policy, ctx, args, tick) -> CallOutcome:
    started = time.monotonic()

    def progress(label: str, status: str = "running") -> None:
        emitter.emit("tool.progress", tool_call_id=str(ledger.pk), label=str(label)[:200], status=status)

    def emit(type_: str, **fields) -> None:
        if type_ in PERSON_EVENTS:
            emitter.emit(type_, tool_call_id=str(ledger.pk), **fields)

    ctx = dataclasses.replace(ctx, progress=progress, cancelled=threading.Event(), tool_call_id=str(ledger.pk),
                              emit=emit, person_wait=PersonWait())
    attempts = 0
    while True:
        attempts += 1
        ledger.attempts = attempts
        ledger.save(update_fields=["attempts", "updated_at"])
        deadline = time.monotonic() + policy.timeout_s
        release_db_connection()  # the tool thread may need one from the pool while this one waits
        slot = tool_threads.slot(ctx.user_id)
        while not slot.acquire(timeout=min(TICK_S, max(0.01, deadline - time.monotonic()))):
            if tick():
                return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED, started=started,
                               error=f"{spec.name} was cancelled by the user before it started; nothing was done.")
            if time.monotonic() >= deadline:
                return _not_started(run, assistant, call, ledger, emitter, spec=spec, policy=policy, started=started)
        future = tool_threads.submit(slot, _call_in_thread, spec, ctx, args)
        output = _NOTHING
        failure: BaseException | None = None
        while True:
            # the call's own time: a wait for the person (ctx.person_wait, an elicitation) is not counted
            limit = deadline + ctx.person_wait.seconds()
            try:
                output = future.result(timeout=min(TICK_S, max(0.0, limit - time.monotonic())))
                break
            except concurrent.futures.TimeoutError:
                if tick():
                    # Cancelled: the tool is told (ctx.cancelled); a late result is discarded.
                    ctx.cancelled.set()
                    if future.cancel():  # still waiting for a thread: it never starts
                        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED,
                                       started=started,
                                       error=f"{spec.name} was cancelled by the user before it started; "
                                             "nothing was done.")
                    status = ToolCall.Status.FAILED if spec.risk == "read" else ToolCall.Status.STATUS_UNKNOWN
                    return _finish(run, assistant, call, ledger, emitter, status=status, started=started,
                                   error=f"{spec.name} was cancelled by the user" +
                                   ("." if spec.risk == "read" else "; its outcome is unknown."))
                if time.monotonic() >= deadline + ctx.person_wait.seconds():
                    break
            except concurrent.futures.CancelledError:
                return _not_started(run, assistant, call, ledger, emitter, spec=spec, policy=policy, started=started)
            except BaseException as exc:  # raised by the tool
                failure = exc
                break
        if output is _NOTHING and failure is None:
            ctx.cancelled.set()
            if future.cancel():  # it never got a thread: certainly not executed
                return _not_started(run, assistant, call, ledger, emitter, spec=spec, policy=policy, started=started)
            retryable = spec.risk == "read"
            emitter.emit("tool.timeout", tool_call_id=str(ledger.pk), retryable=retryable, status_unknown=not retryable)
            status = ToolCall.Status.TIMEOUT if retryable else ToolCall.Status.STATUS_UNKNOWN
            message = (
                f"{spec.name} timed out after {policy.timeout_s} s."
                if retryable else
                f"{spec.name} timed out after {policy.timeout_s} s; its outcome is unknown (it may or may "
                "not have taken effect) — check before retrying."
            )
            return _finish(run, assistant, call, ledger, emitter, status=status, error=message, started=started)
        if failure is not None:
            transient = isinstance(failure, ToolError) and failure.retryable or isinstance(failure, ConnectionError)
            if transient and spec.risk == "read" and attempts == 1:
                emitter.emit("tool.retry", tool_call_id=str(ledger.pk), attempt=attempts + 1)
                time.sleep(READ_RETRY_DELAY_S)
                continue
            if not isinstance(failure, ToolError | ConnectionError):
                logger.error("tool %s crashed", spec.name, exc_info=failure)
            detail = str(failure) if isinstance(failure, ToolError) else f"{type(failure).__name__}: {failure}"
            unknown = isinstance(failure, ToolError) and failure.outcome_unknown and spec.risk != "read"
            return _finish(run, assistant, call, ledger, emitter,
                           status=ToolCall.Status.STATUS_UNKNOWN if unknown else ToolCall.Status.FAILED,
                           error=f"{spec.name} failed: {detail}", started=started)
        break
    if not isinstance(output, ToolOutput):
        output = ToolOutput(result=output)
    outcome = _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.SUCCEEDED,
                      result=output.result, started=started)
    for item_id, title in output.knowledge_saved:
        emitter.emit("knowledge.saved", item_id=str(item_id), title=title)
    changed = [str(i) for i in output.changed_item_ids]
    if spec.mutates_knowledge and changed:
        emitter.emit("knowledge.changed", item_ids=changed)
    outcome.citations = output.citations
    return outcome


_NOTHING = object()


def _not_started(run, assistant, call, ledger, emitter, *, spec, policy, started) -> CallOutcome:
    """The call's time ran out before a tool thread was free: it never ran, whatever its risk."""
    emitter.emit("tool.timeout", tool_call_id=str(ledger.pk), retryable=True, status_unknown=False)
    return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.TIMEOUT, started=started,
                   error=f"{spec.name} did not start within {policy.timeout_s} s (the tool threads were busy); "
                         "it was not executed — nothing was changed. Try again.")


def _call_in_thread(spec: ToolSpec, ctx: ToolContext, args: dict) -> Any:
    if ctx.cancelled.is_set():  # the run gave up on this call before a thread was free
        return _NOTHING
    close_old_connections()
    try:
        return spec.func(ctx=ctx, **args)
    finally:
        close_old_connections()


def _finish(run, assistant, call, ledger, emitter, *, status, error: str = "", result: Any = None,
            started: float | None = None) -> CallOutcome:
    is_error = bool(error)
    result, error = storable(result), storable(error)  # a tool source's text may carry NUL
    message = tool_call_close(
        ledger=ledger, run=run, emitter=emitter, status=status, is_error=is_error,
        result=result if not is_error else {"error": error}, summary=error if is_error else _summary(result),
        content=error if is_error else truncate_for_model(result),
        duration_ms=int((time.monotonic() - started) * 1000) if started is not None else None,
    )
    return CallOutcome(message, [])


def _summary(result: Any) -> str:
    if isinstance(result, dict) and isinstance(result.get("summary"), str):
        return result["summary"][:300]
    text = to_text(result)
    return text if len(text) <= 200 else text[:199] + "…"


def _tool_message(run, assistant: Message, call: dict, content: str, is_error: bool) -> Message:
    return message_create(
        thread_id=assistant.thread_id,
        run=run,
        role=Message.Role.TOOL,
        content=content,
        tool_call_id=call["id"],
        is_error=is_error,
    )
