"""Executing one tool call the model made: ledger, guard, parsing, scope pinning,
validation, timeout/retry, events and the tool message. DESIGN §5 step 4.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import jsonschema
from django.conf import settings
from django.db import close_old_connections

from agents.events import RunEmitter
from agents.models import ToolCall
from agents.pipeline import PolicyView, policy_defaults, tool_guard
from agents.tools import ToolContext, ToolOutput, ToolSpec, registry
from chat.models import Message

from .results import to_text, truncate_for_model

logger = logging.getLogger(__name__)

RAW_ARGS_IN_ERROR = 200  # chars of the raw arguments quoted back to the model
READ_RETRY_DELAY_S = 1.0  # retry once after 1 s — read tools only; writes may not be idempotent

_tool_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _tool_pool
    if _tool_pool is None:
        _tool_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.EMBEDDED_EXECUTOR_THREADS, thread_name_prefix="tool"
        )
    return _tool_pool


class ToolError(Exception):
    """Raised by a tool for an expected failure. ``retryable``: a 5xx or connection error
    of a read tool (retried once after 1 s); never honoured for write tools."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass
class CallOutcome:
    """What the loop needs after a call: the tool message and citation data."""

    message: Message
    citations: list[dict]


def arguments_summary(args: dict, limit: int = 120) -> str:
    """``query='vpn', top_k=3`` — short, for the UI and events."""
    parts = []
    for key, value in args.items():
        text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={text if len(text) <= 60 else text[:57] + '…'}")
    out = ", ".join(parts)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def parse_arguments(raw: str | None) -> tuple[dict | None, str]:
    """Model arguments → ``(dict, "")`` or ``(None, actionable error)``.

    Empty or missing arguments are ``{}`` (no-parameter tools, shared/cases/openai/03); bad
    JSON or a non-object gets a retry message quoting the raw text (cases/openai/04).
    """
    if raw is None or not raw.strip():
        return {}, ""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        quoted = raw[:RAW_ARGS_IN_ERROR] + ("…" if len(raw) > RAW_ARGS_IN_ERROR else "")
        return None, (
            f"The arguments were not valid JSON ({exc.msg} at char {exc.pos}). "
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
) -> CallOutcome:
    """Run one tool call exactly once and persist its tool message.

    ``call`` is ``{"id", "name", "arguments"}`` from the assistant message. A call found in
    the ledger as succeeded / status unknown is not executed again: its stored result is
    reused (re-entrant after a crash or task redelivery).
    """
    name = call["name"]
    ledger, created = ToolCall.objects.get_or_create(
        message=assistant,
        call_id=call["id"],
        defaults={"run": run, "tool_name": name, "raw_arguments": call.get("arguments") or ""},
    )
    if not created and ledger.status in (
        ToolCall.Status.SUCCEEDED, ToolCall.Status.FAILED, ToolCall.Status.TIMEOUT,
        ToolCall.Status.STATUS_UNKNOWN, ToolCall.Status.RUNNING, ToolCall.Status.PERMISSION_DENIED,
    ):
        if ledger.status == ToolCall.Status.RUNNING:
            # The worker died while the tool ran: we cannot know whether it took effect.
            ledger.status = ToolCall.Status.STATUS_UNKNOWN
            ledger.is_error = True
            ledger.summary = "status unknown: the worker stopped while this call was running"
            ledger.save(update_fields=["status", "is_error", "summary", "updated_at"])
        content = ledger.summary if ledger.is_error else truncate_for_model(ledger.result)
        return CallOutcome(_tool_message(run, assistant, call, content, ledger.is_error), [])

    spec = registry.get(name)
    args, error = parse_arguments(call.get("arguments"))
    shown_args = {k: v for k, v in (args or {}).items() if spec is None or k not in spec.scope_args}
    emitter.emit(
        "tool.started",
        tool_call_id=str(ledger.pk),
        name=name,
        arguments_summary=arguments_summary(shown_args) if args is not None else "(invalid arguments)",
    )

    guard = tool_guard(name=name, role_name=ctx.role, policies=policies, offered=offered)
    if guard.kind == "permission_denied":
        emitter.emit("permission.denied", tool=name, required_role=guard.required_role,
                     alternatives=list(guard.alternatives))
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

    # Scope pinning: whatever the model wrote, the call acts on the run's own scope.
    model_args = {k: v for k, v in args.items() if k not in spec.scope_args}
    ledger.arguments = {**model_args, **ctx.scope_values()}
    ledger.risk = policy.risk
    ledger.save(update_fields=["arguments", "risk", "updated_at"])
    problem = validate_arguments(spec, model_args)
    if problem:
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED, error=problem)
    if policy.approval_mode == "always" or (policy.approval_mode == "writes_in_prod" and ctx.env_id and "prod" in ctx.env_id.lower()):
        return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.DENIED,
                       error=f"{name} needs a person's approval, and approvals are not enabled on this server yet.")
    return _run(run, assistant, call, ledger, emitter, spec=spec, policy=policy, ctx=ctx, args=model_args)


def _run(run, assistant, call, ledger, emitter, *, spec, policy, ctx, args) -> CallOutcome:
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        ledger.status = ToolCall.Status.RUNNING
        ledger.attempts = attempts
        ledger.save(update_fields=["status", "attempts", "updated_at"])
        future = _pool().submit(_call_in_thread, spec, ctx, args)
        try:
            output = future.result(timeout=policy.timeout_s)
        except concurrent.futures.TimeoutError:
            retryable = spec.risk == "read"
            emitter.emit("tool.timeout", tool_call_id=str(ledger.pk), retryable=retryable, status_unknown=not retryable)
            status = ToolCall.Status.TIMEOUT if retryable else ToolCall.Status.STATUS_UNKNOWN
            message = (
                f"{spec.name} timed out after {policy.timeout_s} s."
                if retryable else
                f"{spec.name} timed out after {policy.timeout_s} s; its outcome is unknown — check before retrying."
            )
            return _finish(run, assistant, call, ledger, emitter, status=status, error=message, started=started)
        except ToolError as exc:
            if exc.retryable and spec.risk == "read" and attempts == 1:
                emitter.emit("tool.retry", tool_call_id=str(ledger.pk), attempt=attempts + 1)
                time.sleep(READ_RETRY_DELAY_S)
                continue
            return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED,
                           error=f"{spec.name} failed: {exc}", started=started)
        except Exception as exc:  # a bug in a tool must not kill the run
            logger.exception("tool %s crashed", spec.name)
            return _finish(run, assistant, call, ledger, emitter, status=ToolCall.Status.FAILED,
                           error=f"{spec.name} failed: {type(exc).__name__}: {exc}", started=started)
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


def _call_in_thread(spec: ToolSpec, ctx: ToolContext, args: dict) -> Any:
    close_old_connections()
    try:
        return spec.func(ctx=ctx, **args)
    finally:
        close_old_connections()


def _finish(run, assistant, call, ledger, emitter, *, status, error: str = "", result: Any = None,
            started: float | None = None) -> CallOutcome:
    is_error = bool(error)
    ledger.status = status
    ledger.is_error = is_error
    ledger.result = result if not is_error else {"error": error}
    ledger.summary = error if is_error else _summary(result)
    if started is not None:
        ledger.duration_ms = int((time.monotonic() - started) * 1000)
    ledger.save()
    content = error if is_error else truncate_for_model(result)
    emitter.emit(
        "tool.completed",
        tool_call_id=str(ledger.pk),
        name=ledger.tool_name,
        status="failed" if is_error else "succeeded",
        summary=ledger.summary,
        is_error=is_error,
    )
    return CallOutcome(_tool_message(run, assistant, call, content, is_error), [])


def _summary(result: Any) -> str:
    if isinstance(result, dict) and isinstance(result.get("summary"), str):
        return result["summary"][:300]
    text = to_text(result)
    return text if len(text) <= 200 else text[:199] + "…"


def _tool_message(run, assistant: Message, call: dict, content: str, is_error: bool) -> Message:
    from chat.services import message_create

    return message_create(
        thread_id=assistant.thread_id,
        run=run,
        role=Message.Role.TOOL,
        content=content,
        tool_call_id=call["id"],
        is_error=is_error,
    )
