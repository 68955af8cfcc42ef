"""How a tool call is shown to people (REST, the thread's messages): one function for both."""

from __future__ import annotations

import json

from .models import ToolCall
from .risk import COUNTDOWN_S
from .tools.api import DEFAULT_SCOPE_ARGS


def arguments_summary(args: dict, limit: int = 120) -> str:
    """``query='vpn', top_k=3`` — short, for the UI and events."""
    parts = []
    for key, value in args.items():
        text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={text if len(text) <= 60 else text[:57] + '…'}")
    out = ", ".join(parts)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def shown_arguments(row: ToolCall) -> dict:
    """The call's arguments as shown to people: the run's scope arguments left out."""
    return {k: v for k, v in (row.arguments or {}).items() if k not in DEFAULT_SCOPE_ARGS}


def tool_call_presentation(row: ToolCall) -> dict:
    """The shown fields of a ledger row: ``{"status", "summary", "is_error", "risk_level",
    "env_context" ("" or a tier), "requested_at" (ISO 8601 or None), "countdown_s" (10 for
    dangerous calls, else 0), "arguments_summary" (scope arguments hidden)}``."""
    shown = shown_arguments(row)
    return {
        "status": row.status,
        "summary": row.summary,
        "is_error": row.is_error,
        "risk_level": row.risk_level,
        "env_context": row.env_context,
        "requested_at": row.requested_at.isoformat() if row.requested_at else None,
        "countdown_s": COUNTDOWN_S if row.risk_level == "dangerous" else 0,
        "arguments_summary": arguments_summary(shown) if shown else "",
    }
