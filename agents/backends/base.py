"""The agent-backend seam: what the run driver hands a backend, and what it gets back.

A backend does the work of one turn — call a model and run tools, or drive a remote agent —
and persists what it produces (assistant messages, tool messages, ledger rows through
:mod:`agents.runs.lifecycle`). It never changes the run's status: it returns an
:class:`Outcome`, and the driver (``agents.runs.driver.run_turn``) applies it — finish,
park for approval, or close a cancel — and publishes the terminal event.

A new backend implements::

    class MyBackend:
        def advance(self, turn: Turn) -> Outcome: ...   # start, continue or recover the turn
        def cancel(self, turn: Turn) -> None: ...       # the run was cancelled: stop remote
                                                        # work, keep partial output "cancelled"

and is registered for a provider kind with ``agents.backends.register_backend(kind, factory)``.
``advance`` must be re-entrant: it is called again after a crash (the lease expired) and after
each approval decision, and rebuilds its state from the database (messages, the ToolCall
ledger, ``run.backend_state`` saved with ``lifecycle.run_backend_state_save``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agents.events import RunEmitter
from agents.models import Run
from agents.tools import ToolContext


class Lease(Protocol):
    """What a backend may do with its run's lease (the driver's ``agents.runs.lease.RunLease``)."""

    def tick(self) -> bool:
        """Renew when due; True once the run was cancelled. Raises ``LeaseLost`` when another
        worker took the run over."""

    def wait_owned(self) -> None:
        """Block until the last renewal confirmed this worker still owns the run (``LeaseLost``
        otherwise)."""

    def persist_stream(self, message_id: Any = None, fields: Callable[[], dict[str, str]] | None = None) -> None:
        """Save ``fields()`` of streaming message ``message_id`` with every renewal; with no
        arguments, stop (and save once more)."""


class Slot(Protocol):
    """The turn's place in the process's set-up gate (the driver's ``agents.runs.gate.SetupSlot``)."""

    def release(self) -> None:
        """Let the next waiting turn start its set-up. Idempotent."""


@dataclass
class Turn:
    """One claimed run as a backend sees it. ``run`` has its thread (with workspace),
    provider, user and user message loaded; ``role`` is the user's role name in the thread's
    workspace; ``tools`` is the scope every tool call runs in (never built from model output)."""

    run: Run
    emitter: RunEmitter
    lease: Lease
    role: str
    tools: ToolContext
    slot: Slot | None = None  # this turn's place in the process's set-up gate

    def dispatched(self) -> None:
        """The turn's first request (to the model, or the remote agent's run) is on its way:
        the next turn waiting in the set-up gate may start (``agents.runs.gate``). Idempotent;
        a backend that never calls it holds its slot until the turn ends."""
        if self.slot is not None:
            self.slot.release()

    def started(self, *, assistant_message_id) -> None:
        """Publish ``run.started`` once per run (not again on a resumed attempt)."""
        if self.emitter.seq == 0:
            run = self.run
            self.emitter.emit(
                "run.started",
                thread_id=str(run.thread_id),
                user_message_id=str(run.user_message_id) if run.user_message_id else None,
                assistant_message_id=str(assistant_message_id),
            )

    def cancelled(self) -> bool:
        """Renew the lease when due; True once the run was cancelled. Raises
        ``LeaseLost`` when another worker took the run over: stop without writing."""
        return self.lease.tick()


@dataclass(frozen=True)
class Outcome:
    """How a backend's ``advance`` ended. ``kind``: ``completed``, ``awaiting_approval``
    (a tool call waits for a person; no worker keeps waiting), ``cancelled`` (the backend
    already closed its messages as cancelled) or ``failed`` (``code``/``message`` name the
    root cause; ``retryable`` tells the UI whether a retry may help). ``truncated``: a
    completed run whose final answer was cut off — ``{"code", "message"}`` as stored on that
    message (``output_limit``), carried by ``run.completed``; None when it is whole."""

    kind: str
    code: str = ""
    message: str = ""
    retryable: bool = False
    truncated: dict | None = None

    @classmethod
    def completed(cls, *, truncated: dict | None = None) -> Outcome:
        return cls("completed", truncated=truncated)

    @classmethod
    def awaiting_approval(cls) -> Outcome:
        return cls("awaiting_approval")

    @classmethod
    def cancelled(cls) -> Outcome:
        return cls("cancelled")

    @classmethod
    def failed(cls, code: str, message: str, *, retryable: bool = False) -> Outcome:
        return cls("failed", code, message, retryable)


class AgentBackend(Protocol):
    def advance(self, turn: Turn) -> Outcome: ...

    def cancel(self, turn: Turn) -> None: ...
