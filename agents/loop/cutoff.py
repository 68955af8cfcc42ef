"""Telling a tool call cut off by the output limit from one the model simply got wrong.

Some providers report ``finish_reason: "tool_calls"`` even when the reply ran into the
output-token limit in the middle of a call's JSON arguments. Those arguments are a *prefix*
of a JSON object (an open string, object or array at the end); a call with malformed but
complete JSON is the model's mistake and gets the usual "fix it and call again" result.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

# Stored in English; translated for each reader (agents.presentation.own_words).
OUTPUT_LIMIT_REASON = gettext_noop(
    "The model's reply reached its output limit in the middle of a tool call, so the call was "
    "not run. Ask for a shorter change, or raise the model's output limit."
)


def arguments_cut_off(raw: str | None) -> bool:
    """True when ``raw`` is an unfinished JSON text: it opens an object, array or string that
    it never closes (mismatched brackets or complete JSON → False)."""
    if not raw or not raw.strip():
        return False
    stack: list[str] = []
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return False  # malformed, not cut off
    return in_string or bool(stack) or raw.rstrip().endswith((":", ","))
