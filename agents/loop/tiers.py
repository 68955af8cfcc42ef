"""Prompt tier per run, and the small tier's history window (DESIGN §1 SPECTROview row, §5).

Resolution, first match wins:

1. a manual override: the thread's ``prompt_tier``, then the model row's;
2. cloud providers (Anthropic; OpenAI-compatible endpoints of known cloud hosts) are full;
3. a known parameter count (Ollama's ``/api/show``, cached on the model row; or a size an
   admin typed on the row) below 10 B → small, otherwise full;
4. known small-model name patterns ("llama3.2:3b", "qwen2.5-1.5b-instruct", "phi3:mini",
   "smollm2:135m") → small;
5. full.

Small tier: the short system prompt, the last 6 messages (widened, see
:func:`history_window`), ``num_ctx`` 8192, 4096 output tokens, ``think`` off. Full tier:
``num_ctx`` 16384, the whole history, no output cap (Anthropic's adapter, which needs one,
uses its own default). ``num_ctx`` and ``think`` are Ollama options: :func:`run_plan` gives
them to Ollama only, so no other provider ever receives them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from llm import ChatMessage, capabilities
from llm.capabilities import CLOUD_HOST_SUFFIXES  # noqa: F401 (re-exported)

logger = logging.getLogger(__name__)

SMALL_MODEL_MAX_BILLIONS = 10.0
SMALL_HISTORY_MESSAGES = 6


@dataclass(frozen=True)
class TierSpec:
    name: str
    history_limit: int | None
    max_output_tokens: int | None
    num_ctx: int
    think: bool | None


SMALL = TierSpec("small", history_limit=SMALL_HISTORY_MESSAGES, max_output_tokens=4096, num_ctx=8192, think=False)
FULL = TierSpec("full", history_limit=None, max_output_tokens=None, num_ctx=16384, think=None)
TIERS = {"small": SMALL, "full": FULL}

_SIZE_RE = re.compile(r"(?:^|[^a-z0-9.])e?(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")
_MOE_RE = re.compile(r"(?:^|[^a-z0-9.])(\d+)x(\d+(?:\.\d+)?)b(?![a-z0-9])")
# Small models whose usual tag carries no size ("phi3" is phi-3-mini, "llama3.2" is 3B).
_SMALL_NAME_RE = re.compile(
    r"(tinyllama|tinydolphin|smollm|moondream|^gemma3n|granite3(?:\.\d)?-moe|"
    r"^phi-?3(?:\.5)?(?::latest|:mini)?$|phi-?[34](?:\.5)?-mini|^llama3\.2(?::latest)?$)",
    re.IGNORECASE,
)


def parameter_billions(size: str | None) -> float | None:
    """``"3.2B"`` → 3.2, ``"137M"`` → 0.137, ``"8x7B"`` → 56, ``""`` → None."""
    if not size:
        return None
    text = size.strip().lower().replace(" ", "")
    moe = re.fullmatch(r"(\d+)x(\d+(?:\.\d+)?)b?", text)
    if moe:
        return int(moe.group(1)) * float(moe.group(2))
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmbt]?)", text)
    if not match:
        return None
    scale = {"": 1.0, "b": 1.0, "m": 1e-3, "k": 1e-6, "t": 1e3}[match.group(2)]
    return float(match.group(1)) * scale


def name_suggests_small(name: str) -> bool:
    """Known small-model name patterns: a size under 10 B in the name, or a small family."""
    lowered = (name or "").lower()
    moe = _MOE_RE.search(lowered)
    if moe:
        return int(moe.group(1)) * float(moe.group(2)) < SMALL_MODEL_MAX_BILLIONS
    size = _SIZE_RE.search(lowered)
    if size:
        value = float(size.group(1)) * (1.0 if size.group(2) == "b" else 1e-3)
        return value < SMALL_MODEL_MAX_BILLIONS
    return bool(_SMALL_NAME_RE.search(lowered))


def is_cloud(provider) -> bool:
    return provider is not None and capabilities(provider).cloud(provider.base_url)


def resolve_tier(*, thread_tier: str, provider, model_name: str, model_row=None,
                 parameter_size: str | None = None) -> tuple[TierSpec, str]:
    """``(tier, reason)`` for one run; ``reason`` says which rule decided (for logs and UI)."""
    if thread_tier in TIERS:
        return TIERS[thread_tier], "set on the thread"
    if model_row is not None and model_row.prompt_tier in TIERS:
        return TIERS[model_row.prompt_tier], "set on the model"
    if not capabilities(provider).tier_by_size:
        return FULL, "default"
    if is_cloud(provider):
        return FULL, "cloud provider"
    size = parameter_size if parameter_size is not None else (model_row.parameter_size if model_row else "")
    billions = parameter_billions(size)
    if billions is not None:
        tier = SMALL if billions < SMALL_MODEL_MAX_BILLIONS else FULL
        return tier, f"{size} parameters"
    if name_suggests_small(model_name):
        return SMALL, "model name"
    return FULL, "default"


def history_window(messages: list[ChatMessage], limit: int | None) -> list[ChatMessage]:
    """The last ``limit`` messages of a repaired history, widened so the window

    * never starts with a tool result: it reaches back to the assistant message that made
      the calls, so every call it keeps has all its results and vice versa
      (shared/cases/platform/01);
    * never drops the latest user message (the current question), however many tool
      rounds the current turn took.

    ``limit=None`` keeps everything. The system prompt and grounding block are not part of
    ``messages``: they are always sent.
    """
    if limit is None or len(messages) <= limit:
        return list(messages)
    start = max(0, len(messages) - limit)
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last_user is not None:
        start = min(start, last_user)
    while start > 0 and messages[start].role == "tool":
        start -= 1
    return list(messages[start:])


@dataclass
class RunPlan:
    """What the loop needs to build each request of one run."""

    tier: TierSpec
    reason: str
    max_output_tokens: int | None
    options: dict = field(default_factory=dict)
    echo_reasoning: bool | None = None

    @property
    def history_limit(self) -> int | None:
        return self.tier.history_limit


def provider_options(tier: TierSpec, provider) -> dict:
    """Provider-specific request options for ``tier`` (the adapter's ``request_options``:
    Ollama's ``num_ctx`` / ``num_predict`` / ``think``; nothing for any other provider)."""
    return capabilities(provider).request_options(tier)


def run_plan(*, thread, provider, model_name: str) -> RunPlan:
    """Resolve the tier of a run and the request settings that follow from it.

    For an Ollama model whose size is unknown, ``/api/show`` is asked once (short timeout)
    and the answer cached on the model row; a failure just falls through to name patterns.
    """
    from agents.selectors import model_row as model_row_for

    model_row = model_row_for(provider=provider, name=model_name, memo=thread)  # the turn's metering reads it too
    parameter_size = None
    needs_size = (
        capabilities(provider).model_details and thread.prompt_tier not in TIERS
        and (model_row is None or (model_row.prompt_tier not in TIERS and not model_row.parameter_size))
    )
    if needs_size and model_name:
        from agents.catalogue import model_details_refresh

        refreshed = model_details_refresh(provider=provider, name=model_name)
        if refreshed is not None:
            model_row = refreshed
            parameter_size = refreshed.parameter_size
    tier, reason = resolve_tier(thread_tier=thread.prompt_tier, provider=provider, model_name=model_name,
                                model_row=model_row, parameter_size=parameter_size)
    logger.debug("run tier %s (%s) for %s/%s", tier.name, reason, getattr(provider, "slug", None), model_name)
    echo = model_row.echo_reasoning if model_row is not None else None
    return RunPlan(tier=tier, reason=reason, max_output_tokens=tier.max_output_tokens,
                   options=provider_options(tier, provider), echo_reasoning=echo)
