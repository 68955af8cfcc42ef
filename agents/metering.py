"""The metering plug-in point: usage, budgets and per-tool limits plug in here at ``ready()``
(the ``usage`` app), so ``agents`` never imports them.

The run path calls the installed :class:`Meter` at six moments:

* ``before_run(user, thread)`` — in ``run_create``, before anything is written; raise
  :class:`DispatchRefused` (→ 429 ``budget_exceeded`` + ``Retry-After``) to refuse the send;
* ``before_round(run, cost)`` — before every model request of a run (the first and each one
  after a tool round); ``cost``: the request's :class:`agents.round_cost.RoundCost` (its input
  estimate and the output cap it would send; None when not known ahead, an agent backend's
  run). Raise :class:`DispatchRefused` and the provider is not called. Returns a *hold* that
  the round's end settles or gives back; its ``max_output_tokens`` (int or None) is the output
  cap the round was granted, which the request then sends as ``max_tokens``
  (:func:`granted_output_tokens`);
* ``after_round(run, message, usage, hold, emitter)`` — when the response's usage is known
  (``usage`` None: the provider reported none). Returns the dict stored as the message's
  ``usage`` (token counts, cost); ``emitter`` is the run's ``RunEmitter`` (for ``budget.warning``);
* ``release(hold)`` — the round ended without a response (provider error, cancel);
* ``recover(run_id)`` — a run whose earlier attempt's worker died mid-round is claimed again,
  or failed by the reaper: give back what that round still held;
* ``tool_over_limit(run, tool_name)`` — before a tool call executes: a reason string sends
  the call to approval instead of running it; None lets it run;
* ``run_scope(run)`` — a context manager around a whole turn (log context, the ``run``
  trace span); ``span(name, **attributes)`` — one around each model request
  (``model.request``) and tool call (``tool.call``).

Without a meter installed (tests of the loop alone) nothing is metered.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager
from typing import Any, Protocol

from chatplatform.errors import ServiceError


class DispatchRefused(ServiceError):
    """A run or round refused by a budget: a 429 service error. ``retry_after``: seconds
    until it may succeed (the budget window's reset, or a short wait when another run holds
    the rest); ``resets_at``: ISO time of the reset (also on the websocket ``error`` event)."""

    def __init__(self, code: str, message: str, *, retry_after: float, resets_at: str = "") -> None:
        super().__init__(code, message, 429, retry_after=retry_after, resets_at=resets_at)
        self.resets_at = resets_at


class Meter(Protocol):
    def before_run(self, *, user, thread) -> None: ...

    def before_round(self, *, run, cost=None) -> Any: ...

    def after_round(self, *, run, message, usage, hold: Any, emitter) -> dict: ...

    def release(self, hold: Any) -> None: ...

    def recover(self, *, run_id) -> None: ...

    def tool_over_limit(self, *, run, tool_name: str) -> str | None: ...

    def run_scope(self, *, run) -> ContextManager: ...

    def span(self, name: str, **attributes) -> ContextManager: ...


class _NoMeter:
    def before_run(self, *, user, thread) -> None:
        return None

    def before_round(self, *, run, cost=None) -> Any:
        return None

    def after_round(self, *, run, message, usage, hold: Any, emitter) -> dict:
        return usage.as_dict() if usage is not None else {}

    def release(self, hold: Any) -> None:
        return None

    def recover(self, *, run_id) -> None:
        pass

    def tool_over_limit(self, *, run, tool_name: str) -> str | None:
        return None

    def run_scope(self, *, run) -> ContextManager:
        return contextlib.nullcontext()

    def span(self, name: str, **attributes) -> ContextManager:
        return contextlib.nullcontext()


_meter: Meter = _NoMeter()


def granted_output_tokens(hold: Any) -> int | None:
    """The output cap a hold grants its round (None: none, the request's own stands)."""
    return getattr(hold, "max_output_tokens", None)


def install_meter(meter: Meter) -> None:
    """Called once from an app's ``ready()``."""
    global _meter
    _meter = meter


def meter() -> Meter:
    return _meter
