"""What each provider kind can do, declared once per adapter; callers read these instead of
branching on ``provider.kind``.

The declarations sit in one table (not on the adapter classes) so that reading a
capability never imports an SDK: ``import anthropic`` alone costs ~1.5 s of start-up, and
the catalogue, the API and the tier resolution ask for capabilities of rows whose adapter is
never built in that process. :func:`adapter_class` imports the adapter when one is built.

========================  =========  ======  =======  ======  ================  =========  ======
kind                      key        lists   details  sized   request options   cloud      images
========================  =========  ======  =======  ======  ================  =========  ======
``openai_compatible``     if named   yes     no       yes     none              by host    yes
``anthropic``             required   yes     no       yes     none              always     yes
``ollama``                optional   yes     yes      yes     num_ctx, …, think  never      yes
``offline``               optional   no      no       no      none              never      no
``agent_runs`` (backend)  required   probe   no       no      none              never      no
no adapter                if named   no      no       no      none              never      no
========================  =========  ======  =======  ======  ================  =========  ======

``images``: the adapter sends images as the provider's own parts; whether a *model* reads
them is :func:`takes_images`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: Key rules. ``required``: the provider cannot work without a key (env var or admin-entered);
#: ``if_named``: a key is required only when the row names an env var (an OpenAI-compatible
#: local server needs none); ``optional``: never reported missing (sent when present).
KEY_REQUIRED, KEY_IF_NAMED, KEY_OPTIONAL = "required", "if_named", "optional"

# Hosts whose models are large hosted models: never the small tier unless overridden.
CLOUD_HOST_SUFFIXES = (
    "openai.com", "anthropic.com", "deepseek.com", "mistral.ai", "groq.com", "together.xyz", "together.ai",
    "openrouter.ai", "googleapis.com", "fireworks.ai", "x.ai", "azure.com", "perplexity.ai", "cohere.ai",
    "cohere.com", "moonshot.cn", "moonshot.ai", "dashscope.aliyuncs.com", "bigmodel.cn", "cerebras.ai",
)
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _no_options(tier: Any) -> dict:
    return {}


def _never(base_url: str) -> bool:
    return False


def _always(base_url: str) -> bool:
    return True


def cloud_host(base_url: str) -> bool:
    """Whether ``base_url`` (empty: api.openai.com) is a known hosted-model service."""
    host = (urlsplit(base_url or OPENAI_DEFAULT_BASE_URL).hostname or "").lower()
    return any(host == s or host.endswith("." + s) for s in CLOUD_HOST_SUFFIXES)


def ollama_options(tier: Any) -> dict:
    """Ollama's options for a prompt tier (``agents.loop.tiers.TierSpec``): ``num_ctx`` always,
    ``num_predict`` when the tier caps output, ``think`` when the tier sets it."""
    options: dict = {"num_ctx": tier.num_ctx}
    if tier.max_output_tokens:
        options["num_predict"] = tier.max_output_tokens
    if tier.think is not None:
        options["think"] = tier.think
    return options


@dataclass(frozen=True)
class Capabilities:
    """One adapter's declaration.

    ``adapter``: ``"module:Class"`` of the adapter ("" when this version has none); the class
    has ``from_provider(provider, *, api_key, max_retries, connect_timeout_s, read_timeout_s)``.
    ``key``: one of the key rules above. ``lists_models``: it has ``list_models()`` (else
    model names are typed). ``model_details``: it also has ``model_info(name)`` and
    ``list_models(skip_details=names)`` (sizes and context windows per model).
    ``tier_by_size``: the prompt tier may follow the model's size (else always full).
    ``shares_client``: one adapter per configuration is cached and shared between threads
    (an SDK client costs tens of ms of CPU to build). ``request_options(tier) -> dict``:
    provider-specific request options for a prompt tier. ``cloud(base_url) -> bool``: the
    endpoint serves large hosted models.
    """

    adapter: str = ""
    #: ``"module:function"`` of a health probe ``(provider, *, timeout_s) -> status`` for a kind
    #: served by an agent backend instead of an adapter (``agent_runs``: /health + capabilities).
    probe: str = ""
    key: str = KEY_IF_NAMED
    lists_models: bool = False
    model_details: bool = False
    tier_by_size: bool = False
    shares_client: bool = True
    request_options: Callable[[Any], dict] = _no_options
    cloud: Callable[[str], bool] = _never
    #: The adapter can send images (the provider's own image parts); whether a model reads
    #: them is :func:`takes_images`.
    images: bool = False
    #: A language model: a new chat may default to it without anyone naming it, and it writes
    #: a chat's title after the first answer (not the rule-based Offline assistant, not an agent).
    language_model: bool = False

    @property
    def available(self) -> bool:
        """This version can serve the kind (an adapter, or a backend with a probe)."""
        return bool(self.adapter or self.probe)

    @property
    def probed(self) -> bool:
        """The catalogue checks the provider's health (by listing models or a probe)."""
        return self.lists_models or bool(self.probe)

    def health_probe(self):
        module, _, name = self.probe.partition(":")
        return getattr(importlib.import_module(module), name)


CAPABILITIES: dict[str, Capabilities] = {
    "openai_compatible": Capabilities(
        adapter="llm.openai_compat:OpenAICompatAdapter",
        key=KEY_IF_NAMED, lists_models=True, tier_by_size=True, cloud=cloud_host, images=True, language_model=True,
    ),
    "anthropic": Capabilities(
        adapter="llm.anthropic:AnthropicAdapter",
        key=KEY_REQUIRED, lists_models=True, tier_by_size=True, cloud=_always, images=True, language_model=True,
    ),
    "ollama": Capabilities(
        adapter="llm.ollama:OllamaAdapter",
        key=KEY_OPTIONAL, lists_models=True, model_details=True, tier_by_size=True, request_options=ollama_options,
        images=True, language_model=True,
    ),
    "offline": Capabilities(
        adapter="llm.offline:OfflineAdapter", key=KEY_OPTIONAL, shares_client=False,
    ),
    # A remote agent with its own run API: served by an agent backend (agents.agent_runs),
    # not by a stream adapter; the catalogue probes its health instead of listing models.
    "agent_runs": Capabilities(probe="agents.agent_runs.health:agent_probe", key=KEY_REQUIRED),
}
#: A kind without an adapter in this version: nothing to build, list or probe.
NO_ADAPTER = Capabilities()


def capabilities(provider) -> Capabilities:
    """The declaration for an ``agents.Provider`` row (or None: a run without a provider)."""
    if provider is None:
        return NO_ADAPTER
    return CAPABILITIES.get(provider.kind, NO_ADAPTER)


# Model families that read images, by name (lower case, provider prefixes like "openai/" kept
# out by matching anywhere). An administrator's ``LLMModel.supports_images`` and a listing
# that says (Ollama's ``capabilities``) win over this guess.
_VISION_NAMES = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|(?:^|[/:-])o[134](?:$|-(?!mini))|o4-mini"
    r"|claude-3|claude-(?:opus|sonnet|haiku)-4|claude-[a-z]+-4|claude-4"
    r"|llava|bakllava|vision|-vl\b|vl:|qwen2\.5vl|qwen3-vl|minicpm-v|moondream|gemma3|gemma-3|llama4|pixtral"
    r"|mistral-small3\.[12]|mistral-medium|granite3\.2-vision|gemini|grok-2-vision|grok-4"
)


def name_takes_images(name: str) -> bool:
    """Whether a model of this name is known to read images (by its family's name)."""
    return bool(_VISION_NAMES.search((name or "").lower()))


def takes_images(provider, model_name: str, declared: bool | None = None) -> bool:
    """Whether ``model_name`` of ``provider`` (an ``agents.Provider`` row) reads images: the
    adapter must send them, then ``declared`` (the model row's ``supports_images``) decides,
    else the name (:func:`name_takes_images`)."""
    if not capabilities(provider).images:
        return False
    if declared is not None:
        return bool(declared)
    return name_takes_images(model_name)


def adapter_class(caps: Capabilities) -> type:
    """Import and return the adapter class of ``caps`` (raises ``LookupError`` when it has none)."""
    if not caps.adapter:
        raise LookupError("no adapter")
    module, _, name = caps.adapter.partition(":")
    return getattr(importlib.import_module(module), name)


#: SDK modules an adapter imports lazily on its first request (``OpenAI().chat``).
_LAZY_SDK_MODULES = ("openai.resources.chat",)


def preload_adapters(**_signal_kwargs) -> None:
    """Import every adapter and its SDK's lazily loaded modules now: made lazily, a worker's
    first turns spend a second or more of CPU importing an SDK (pydantic model building) on
    the turn's thread, holding up every simultaneous first token. Called when a
    Celery worker is ready and, in a thread, on a web process's first connection. An adapter
    whose SDK is not installed is skipped (its provider fails when used, as before)."""
    for caps in CAPABILITIES.values():
        if caps.adapter:
            try:
                adapter_class(caps)
            except ImportError:
                pass
    for module in _LAZY_SDK_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    from chatplatform.heap import freeze_startup_heap

    freeze_startup_heap()  # the SDKs' classes: never walked by a full collection mid-stream
