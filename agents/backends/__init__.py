"""Agent backends: what does the work of a run (see :mod:`agents.backends.base`).

* :class:`~agents.backends.model.ModelBackend` — the platform's own tool loop: stream from an
  LLM provider (OpenAI-compatible, Anthropic, Ollama, offline), run the tools it calls under
  the platform's governance, repeat. The default for every provider kind.
* Other backends register for a provider kind (``register_backend("agent_runs", factory)``),
  e.g. a remote agent with its own runs API.

Every backend is registered once, in ``AgentsConfig.ready()`` — the default with
``register_default_backend``; this package imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import AgentBackend, Outcome, Turn

_backends: dict[str, Callable[[], AgentBackend]] = {}
_default: Callable[[], AgentBackend] | None = None


def register_backend(kind: str, factory: Callable[[], AgentBackend]) -> None:
    """Serve runs whose provider has ``kind`` with ``factory()`` (called once per turn)."""
    _backends[kind] = factory


def register_default_backend(factory: Callable[[], AgentBackend]) -> None:
    """Serve every other provider kind (and a run with no provider) with ``factory()``."""
    global _default
    _default = factory


def backend_for(provider) -> AgentBackend:
    """The backend for a run's provider row (None → the model backend, which fails the run
    with a clear message)."""
    factory = _backends.get(getattr(provider, "kind", "")) or _default
    if factory is None:
        raise RuntimeError("no agent backend registered: AgentsConfig.ready() has not run")
    return factory()


def abandon_waiting(run) -> None:
    """A run that waited for a decision ended without a worker (cancelled, or superseded by a
    new message): a backend with remote work (``abandon(run)``) releases it; others have none."""
    import threading

    factory = _backends.get(getattr(run.provider, "kind", ""))
    abandon = getattr(factory() if factory else None, "abandon", None)
    if abandon is not None:  # network calls: never on the request's thread
        threading.Thread(target=abandon, args=(run,), name=f"abandon-{run.pk}", daemon=True).start()


__all__ = ["AgentBackend", "Outcome", "Turn", "abandon_waiting", "backend_for", "register_backend",
           "register_default_backend"]
