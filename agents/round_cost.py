"""What a model round can cost, known before it is sent: budget admission reserves it
(``agents.metering.Meter.before_round``, the usage app's ``usage.services.budget_admit``).

The input side is an estimate from the request itself: the UTF-8 bytes of everything the
adapters put on the wire from it (system prompt, messages with their tool calls and reasoning,
tool definitions) divided by ``BUDGET_BYTES_PER_TOKEN`` (3 by default: BPE tokenizers average
about 4 bytes a token on English text and code, about 3 on CJK text, where a character is 3
bytes), plus a few tokens of framing per message. The output side is exact: the ``max_tokens``
the request sends, which providers do not exceed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from django.conf import settings

#: Tokens a provider adds around each message (role markers, separators) and around the request.
MESSAGE_FRAMING_TOKENS = 4
REQUEST_FRAMING_TOKENS = 8


@dataclass(frozen=True)
class RoundCost:
    """``input_tokens``: the request's estimated input; ``max_output_tokens``: the output cap
    the request would send as it stands (None: it sets none)."""

    input_tokens: int
    max_output_tokens: int | None


def request_bytes(request) -> int:
    """UTF-8 bytes of a :class:`llm.base.ChatRequest`'s content as it goes on the
    wire (system, messages, tool calls, reasoning, tool definitions)."""
    parts = [request.system or ""]
    for message in request.messages:
        parts += [message.content or "", message.reasoning or "", message.tool_call_id or ""]
        parts += [f"{call.get('name', '')}{call.get('arguments', '')}" for call in message.tool_calls]
    for tool in request.tools:
        parts += [tool.name, tool.description or "", json.dumps(tool.parameters, separators=(",", ":"))]
    return sum(len(part.encode("utf-8")) for part in parts)


def round_cost(request) -> RoundCost:
    """The :class:`RoundCost` of sending ``request`` (a ``ChatRequest``)."""
    tokens = math.ceil(request_bytes(request) / settings.BUDGET_BYTES_PER_TOKEN)
    tokens += MESSAGE_FRAMING_TOKENS * len(request.messages) + REQUEST_FRAMING_TOKENS
    return RoundCost(input_tokens=tokens, max_output_tokens=request.max_output_tokens)
