"""Provider-neutral request, stream events and errors.

Every adapter turns a :class:`ChatRequest` into an iterator of :data:`StreamEvent` values
and raises :class:`ProviderError` (never an SDK exception) for anything that goes wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ImageInput:
    """An image given with a user message: ``media_type`` (image/png, image/jpeg, image/webp,
    image/gif) and the bytes as base64 text (``data``), already checked by the platform."""

    media_type: str
    data: str

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


@dataclass
class ChatMessage:
    """One canonical message. ``tool_calls``: ``[{"id", "name", "arguments": str}]``;
    ``images``: images given with a user message (sent as the provider's own image parts)."""

    role: str
    content: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    tool_call_id: str = ""
    is_error: bool = False
    reasoning: str = ""
    images: list[ImageInput] = field(default_factory=list)


@dataclass
class ToolDefinition:
    """A tool as the model sees it: name, description and a JSON-schema object."""

    name: str
    description: str
    parameters: dict


@dataclass
class ChatRequest:
    model: str
    system: str
    messages: list[ChatMessage]
    tools: list[ToolDefinition] = field(default_factory=list)
    max_output_tokens: int | None = None
    # Provider-specific options (e.g. Ollama's num_ctx); an adapter reads only its own keys.
    options: dict = field(default_factory=dict)
    # Send stored reasoning back on assistant tool-call turns (DeepSeek thinking mode);
    # None: the adapter's provider-level default (cases/openai/07).
    echo_reasoning: bool | None = None
    # The run's grounding sources as data, ``[{"n", "title", "snippet"}]`` (agents.grounding);
    # their text is also in ``system``. Adapters that answer without a model read it here.
    grounding: list[dict] = field(default_factory=list)


@dataclass
class TextDelta:
    text: str


@dataclass
class ReasoningDelta:
    """Hidden reasoning: stored apart, never shown as the answer."""

    text: str


@dataclass
class StreamedToolCall:
    """A tool call assembled from streamed fragments; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass
class Usage:
    """Token counts of one model response, as the provider reported them.

    A count the wire format does not give is None (never guessed). ``cached_tokens``: input
    tokens read from the provider's prompt cache (included in ``input_tokens``);
    ``reasoning_tokens``: output tokens spent on hidden reasoning (included in
    ``output_tokens``).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None

    def as_dict(self) -> dict:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cached_tokens": self.cached_tokens, "reasoning_tokens": self.reasoning_tokens}


@dataclass
class Finish:
    """End of one model response. ``reason``: ``stop`` | ``tool_calls`` | ``length``."""

    reason: str
    usage: Usage | None = None


StreamEvent = TextDelta | ReasoningDelta | StreamedToolCall | Finish


@dataclass
class ModelInfo:
    """One model as a provider lists it (``/v1/models``, ``/api/tags`` + ``/api/show``).

    ``parameter_size``: as the provider writes it ("8.0B", "137M"), "" when unknown;
    ``context_window`` in tokens and ``supports_tools`` are None when the listing is silent.
    """

    name: str
    label: str = ""
    parameter_size: str = ""
    context_window: int | None = None
    supports_tools: bool | None = None
    supports_images: bool | None = None


class ProviderError(Exception):
    """A provider failure with a user-readable root cause.

    ``code``: ``not_configured`` | ``unreachable`` | ``auth_failed`` | ``rate_limited`` |
    ``model_not_found`` | ``bad_request`` | ``upstream_error`` | ``stream_interrupted`` |
    ``timeout``. ``retryable``: whether sending the same message again may succeed.
    """

    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class ProviderAdapter(Protocol):
    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        """Yield stream events; closing the iterator closes the upstream connection."""
        ...
