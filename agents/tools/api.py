"""The tool API: what a tool is (``ToolSpec``), what it receives (``ToolContext``), what it
returns (``ToolOutput``) or raises (``ToolError``), and the ``@tool`` declaration."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Scope arguments are always overwritten with the run's own values (DESIGN §1, cks row):
# whatever the model writes, a call acts inside the caller's workspace, thread and user.
DEFAULT_SCOPE_ARGS = ("workspace_id", "thread_id", "user_id")
TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class PersonWait:
    """The time a running tool spends waiting for its person (an MCP server asking a question:
    an elicitation card). The loop's call timeout does not count it; the wait has its own
    bound. Thread-safe: the tool thread holds it, the run's thread reads it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0.0
        self._since: float | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            self._since = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._held += time.monotonic() - (self._since or time.monotonic())
                self._since = None

    def seconds(self) -> float:
        """Seconds waited so far, the wait in progress included."""
        with self._lock:
            return self._held + (time.monotonic() - self._since if self._since is not None else 0.0)


@dataclass(frozen=True)
class ToolContext:
    """Who is calling and where. Built by the loop from the run; never from model output."""

    workspace_id: int
    thread_id: str
    user_id: int
    run_id: str
    role: str
    include_private: bool = False
    allow_model_save: bool = False
    env_id: str = ""
    ui_context: dict = field(default_factory=dict)
    # ``progress(label, status="running")`` publishes ``tool.progress`` for this call.
    progress: Callable[..., None] = field(default=lambda label, status="running": None, compare=False, repr=False)
    # Set when the run gave up on this call (cancelled, timed out): a long tool should check
    # ``ctx.cancelled.is_set()`` between steps and stop; its late result is discarded anyway.
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    # The ledger row of this call ("" outside the loop), and ``emit(type, **fields)``: publish one
    # of the call's person-facing events (``elicitation.requested`` / ``elicitation.resolved``).
    tool_call_id: str = ""
    emit: Callable[..., None] = field(default=lambda type_, **fields: None, compare=False, repr=False)
    person_wait: PersonWait = field(default_factory=PersonWait, compare=False, repr=False)

    def scope_values(self) -> dict[str, Any]:
        return {"workspace_id": self.workspace_id, "thread_id": self.thread_id, "user_id": self.user_id}


class ToolError(Exception):
    """Raised by a tool for an expected failure; the model gets ``str(exc)`` as an error
    result. ``retryable``: a 5xx or connection error of a read tool (retried once after 1 s);
    never honoured for write tools, which may not be idempotent."""

    def __init__(self, message: str, *, retryable: bool = False, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        # The call may have taken effect (e.g. an external server died mid-call): a write
        # tool's call ends as ``status_unknown`` and is never re-sent.
        self.outcome_unknown = outcome_unknown


class ConnectRequired(ToolError):
    """The calling person must connect their own account to the tool's server (OAuth) before
    it can run: ``server`` (slug) and ``server_name`` name it. The call did not reach the
    tool."""

    def __init__(self, message: str, *, server: str, server_name: str, url: str = "") -> None:
        super().__init__(message)
        self.server = server
        self.server_name = server_name
        self.url = url  # where the person starts the consent (a path of this site)


@dataclass
class ToolOutput:
    """What a tool returns when it has more to say than its JSON result.

    ``result``: JSON-safe data given to the model. ``citations``: ``[{"item_id", "chunk_id",
    "title"}]`` attached to the next assistant message. ``knowledge_saved``: ``[(item_id,
    title)]`` for ``knowledge.saved`` events. ``changed_item_ids``: ids for ``knowledge.changed``.
    """

    result: Any
    citations: list[dict] = field(default_factory=list)
    knowledge_saved: list[tuple[str, str]] = field(default_factory=list)
    changed_item_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToolSpec:
    """A declared tool. ``parameters`` is the JSON schema the model sees (scope args hidden)."""

    name: str
    description: str
    parameters: dict
    risk: str
    func: Callable[..., Any]
    scope_args: tuple[str, ...] = DEFAULT_SCOPE_ARGS
    mutates_knowledge: bool = False
    default_approval: str | None = None
    always_offered: bool = False
    requires_model_save: bool = False
    chat_denylisted: bool = False
    # Roles allowed by default (empty: every role for a read tool, no one for a write or
    # dangerous tool); the admin's ToolPolicy row decides after.
    default_roles: tuple[str, ...] = ()
    # The tool source that offers it ("builtin" for @tool declarations; see agents.tools.sources).
    source: str = "builtin"
    # Non-empty: the tool is known but may not be used now (e.g. an MCP tool quarantined after
    # its definition changed); it is not offered, and a call gets this text as its error.
    unavailable: str = ""
    # Non-empty: every call is classified in this environment (an MCP server bound to one).
    env_name: str = ""
    # Where the tool really lives, e.g. ("neon", "create_branch") for an MCP tool.
    origin: tuple[str, ...] = ()
    # ``precheck(ctx=..., **args)``: the tool's own cheap checks on its target (does the object
    # exist in the run's scope, may this user change it), run *before* risk and approval, so a
    # call that would be refused never becomes an approval card. Raises ``ToolError`` to
    # refuse (the call ends failed with that message); returns nothing otherwise.
    precheck: Callable[..., None] | None = field(default=None, compare=False)
    # ``name_arguments(user_id=..., workspace_id=..., args=...) -> dict``: the call's arguments
    # as people see them (tool rows, approval cards, the inbox), e.g. a knowledge item's id
    # replaced by its title. It names only what *everyone who may see the call* may see (the
    # requester's access, nothing private); anything else stays as the model wrote it.
    name_arguments: Callable[..., dict] | None = field(default=None, compare=False)
    # ``connect_check(ctx=..., refresh=True) -> ConnectRequired | None``: whether the calling
    # person must first connect their own account (an OAuth MCP server). Run before approval; a
    # call that needs it parks on a "connect" card and runs once the person connected (or ends
    # denied). ``refresh=False``: from stored state only, no network (listings).
    connect_check: Callable[..., ConnectRequired | None] | None = field(default=None, compare=False)

    @property
    def approval_default(self) -> str:
        if self.default_approval:
            return self.default_approval
        return "never" if self.risk == "read" else "always"


def make_spec(
    *,
    name: str,
    description: str,
    parameters: dict,
    func: Callable[..., Any],
    risk: str = "read",
    scope_args: tuple[str, ...] = (),
    **flags: Any,
) -> ToolSpec:
    """Build a ToolSpec with the default scope arguments added (used by ``@tool``)."""
    if risk not in ("read", "write", "dangerous"):
        raise ValueError(f"risk must be read, write or dangerous, not {risk!r}")
    return ToolSpec(
        name=name,
        description=description,
        parameters=parameters,
        risk=risk,
        func=func,
        scope_args=tuple(dict.fromkeys(DEFAULT_SCOPE_ARGS + tuple(scope_args))),
        **flags,
    )
