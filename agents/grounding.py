"""The grounding plug-in point: retrieved context for a run's prompt, from whichever app
provides it (the knowledge app registers one in its ``AppConfig.ready``).

The model backend asks :func:`grounding_for` once per turn; the block goes into the system
prompt, the sources lead the final answer's citations, and the same sources reach the
provider adapter as data (``ChatRequest.grounding``) — an adapter never re-parses prompt text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass
class Grounding:
    """What a run adds to its prompt.

    ``block``: the system-prompt text ("" when nothing); ``citations``: the sources given,
    ``[{"n", "item_id", "chunk_id", "title"}]``; ``sources``: the same with their text,
    ``[{"n", "title", "snippet"}]``, for adapters that answer from it; ``note``: why it is
    empty, if it is.
    """

    block: str = ""
    citations: list[dict] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)
    note: str = ""


GroundingProvider = Callable[..., Grounding]  # (*, run, tier: "full" | "small") -> Grounding

_provider: GroundingProvider | None = None


def register_grounding(provider: GroundingProvider) -> None:
    """Install the process's grounding provider (the last registration wins)."""
    global _provider
    _provider = provider


def grounding_for(*, run, tier: str) -> Grounding:
    """The run's grounding, or an empty one when no provider is installed."""
    if _provider is None:
        return Grounding(note="no grounding provider installed")
    return _provider(run=run, tier=tier)
