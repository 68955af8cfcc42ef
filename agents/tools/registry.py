"""The tool registry: declarations, the ``@tool`` decorator and the per-call context."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Scope arguments are always overwritten with the run's own values (DESIGN §1, cks row):
# whatever the model writes, a call acts inside the caller's workspace, thread and user.
DEFAULT_SCOPE_ARGS = ("workspace_id", "thread_id", "user_id")
TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


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

    def scope_values(self) -> dict[str, Any]:
        return {"workspace_id": self.workspace_id, "thread_id": self.thread_id, "user_id": self.user_id}


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
    # Roles allowed by default (empty: every role); the admin's ToolPolicy row decides after.
    default_roles: tuple[str, ...] = ()

    @property
    def approval_default(self) -> str:
        if self.default_approval:
            return self.default_approval
        return "never" if self.risk == "read" else "always"


class ToolRegistry:
    """Name → ToolSpec. Written only while apps load; read-only after ``freeze()``."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._frozen = False

    def register(self, spec: ToolSpec) -> None:
        if self._frozen:
            raise RuntimeError(f"tool registry is frozen; cannot add {spec.name!r}")
        if not TOOL_NAME_RE.match(spec.name):
            raise ValueError(f"tool name {spec.name!r} must match {TOOL_NAME_RE.pattern}")
        if spec.name in self._tools and self._tools[spec.name].func is not spec.func:
            raise ValueError(f"tool {spec.name!r} is declared twice")
        self._tools[spec.name] = spec

    def freeze(self) -> None:
        self._frozen = True

    @contextlib.contextmanager
    def scoped(self, *specs: ToolSpec) -> Iterator[None]:
        """Tests only: make ``specs`` available inside the ``with`` block, then remove them."""
        added = [s for s in specs if s.name not in self._tools]
        for spec in added:
            self._tools[spec.name] = spec
        try:
            yield
        finally:
            for spec in added:
                self._tools.pop(spec.name, None)

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def all(self) -> list[ToolSpec]:
        return sorted(self._tools.values(), key=lambda s: s.name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools


registry = ToolRegistry()


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


def tool(
    *,
    name: str,
    description: str,
    parameters: dict,
    risk: str = "read",
    scope_args: tuple[str, ...] = (),
    mutates_knowledge: bool = False,
    default_approval: str | None = None,
    always_offered: bool = False,
    requires_model_save: bool = False,
    chat_denylisted: bool = False,
    default_roles: tuple[str, ...] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a tool. ``scope_args`` adds to the default scope arguments (workspace_id,
    thread_id, user_id), which are hidden from the model and pinned at invocation."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        registry.register(
            make_spec(
                name=name,
                description=description,
                parameters=parameters,
                risk=risk,
                func=func,
                scope_args=scope_args,
                mutates_knowledge=mutates_knowledge,
                default_approval=default_approval,
                always_offered=always_offered,
                requires_model_save=requires_model_save,
                chat_denylisted=chat_denylisted,
                default_roles=tuple(default_roles),
            )
        )
        return func

    return decorate
