"""Tool sources: where the tools offered to a model come from.

Every place that offers, guards or executes a tool asks :data:`tool_sources` — never one
source directly — so a tool from any source goes through the same pipeline (RBAC → affinity →
consent), invocation guard, scope pinning, schema check, risk, approval, timeout/retry,
truncation and ledger.

A tool source implements::

    class MySource:
        name: str                                # unique, e.g. "mcp:git"
        def specs(self) -> Iterable[ToolSpec]: ... # the tools it offers right now

Each ``ToolSpec.func(ctx=ToolContext, **arguments)`` performs a call (blocking; it runs on
a tool thread with the policy's timeout) and returns JSON-safe data or a ``ToolOutput``, or
raises ``ToolError``. A source may appear, change its tools and disappear at run time
(``tool_sources.add`` / ``tool_sources.remove``); ``specs()`` is read again for every
offer and every call, so a removed tool is "unknown" at its next call.

:data:`registry` is the built-in source: the ``@tool`` declarations of every installed app's
``tools`` module, filled in ``AgentsConfig.ready()`` and frozen afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from .api import TOOL_NAME_RE, ToolSpec, make_spec

logger = logging.getLogger(__name__)


class ToolSource(Protocol):
    name: str

    def specs(self) -> Iterable[ToolSpec]: ...


class DeclaredTools:
    """The built-in tool source: ``@tool`` declarations, name → ToolSpec. Written only while
    apps load; read-only after ``freeze()``."""

    name = "builtin"

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

    def specs(self) -> list[ToolSpec]:
        return self.all()

    def __contains__(self, name: object) -> bool:
        return name in self._tools


class ToolSources:
    """The process's tool sources, in the order added. A name offered by two sources goes
    to the first; the later one is skipped with a warning (sources that may collide, such
    as external servers, prefix their names)."""

    def __init__(self) -> None:
        self._sources: dict[str, ToolSource] = {}
        self._lock = threading.Lock()

    def add(self, source: ToolSource) -> None:
        with self._lock:
            self._sources[source.name] = source

    def remove(self, name: str) -> None:
        with self._lock:
            self._sources.pop(name, None)

    def sources(self) -> list[ToolSource]:
        with self._lock:
            return list(self._sources.values())

    def _merged(self) -> dict[str, ToolSpec]:
        merged: dict[str, ToolSpec] = {}
        for source in self.sources():
            try:
                specs = list(source.specs())
            except Exception:  # one broken source never takes the others down
                logger.exception("tool source %s failed to list its tools", source.name)
                continue
            for spec in specs:
                if spec.name in merged:
                    logger.warning("tool %r of source %s shadowed by source %s", spec.name, source.name,
                                   merged[spec.name].source)
                    continue
                merged[spec.name] = spec
        return merged

    def all(self) -> list[ToolSpec]:
        """Every tool offered by any source, sorted by name."""
        return sorted(self._merged().values(), key=lambda s: s.name)

    def get(self, name: str) -> ToolSpec | None:
        return self._merged().get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None


registry = DeclaredTools()
tool_sources = ToolSources()
tool_sources.add(registry)


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
    precheck: Callable[..., None] | None = None,
    name_arguments: Callable[..., dict] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a tool. ``scope_args`` adds to the default scope arguments (workspace_id,
    thread_id, user_id), which are hidden from the model and pinned at invocation.
    ``precheck(ctx=..., **args)`` (optional) refuses a call with ``ToolError`` before risk
    and approval (``ToolSpec.precheck``); ``name_arguments(user_id=..., workspace_id=...,
    args=...)`` (optional) shows the arguments to people by name (``ToolSpec.name_arguments``)."""

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
                precheck=precheck,
                name_arguments=name_arguments,
            )
        )
        return func

    return decorate
