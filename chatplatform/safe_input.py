"""Input the platform refuses before it reaches a service or the database, in one place for
REST, the websocket and SSE.

* JSON nested deeper than ``JSON_MAX_DEPTH`` (default 32) levels — whether Python's parser
  would recurse out (``RecursionError``) or not — is refused as ``nested_too_deeply``;
* a NUL character (``\\x00``) in any JSON string or key, query parameter or id is refused as
  ``invalid_text`` (PostgreSQL cannot store it; SQLite would, so both behave alike);
* integers in parameters must be plain decimal digits within ``[minimum, maximum]``
  (maximum ≤ 2**63 - 1, the largest database integer): ``invalid_parameter`` otherwise.

Each refusal is a :class:`BadInput` (a ``ServiceError``, status 400): REST answers
``{"error": {"code", "message"}}``, the websocket an ``error`` event.

What a *peer* produces — model output, tool results, an agent's events — is not refused (the
user did not write it, and refusing would lose it): :func:`storable` replaces each NUL with
U+FFFD where it enters the platform, so what streams and what is stored are the same text.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from django.conf import settings

from .errors import ServiceError

MAX_DB_INT = 2**63 - 1
# In a name shown to other people (an assistant, a prompt's title): control characters and
# the bidirectional overrides/isolates, which reverse or hide the text after them ("Helper"
# + U+202E + "gpj.exe" reads "Helperexe.jpg"); also folder and tag names (``chat.organise``).
_HIDDEN_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
T = TypeVar("T")


class BadInput(ServiceError):
    """Input refused before any service sees it (always 400)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message, 400)


NUL = "\x00"
REPLACEMENT = "\ufffd"


def storable(value: T) -> T:
    """``value`` with every NUL character in a string (or a dict key, at any depth of dicts,
    lists and tuples) replaced by U+FFFD, the Unicode replacement character; PostgreSQL
    stores no NUL in ``text`` or ``jsonb``. The same object comes back when nothing needed
    replacing (the common case costs one ``in`` per string). For text from peers: model
    output, tool results, agent events."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT) if NUL in value else value  # type: ignore[return-value]
    if isinstance(value, dict):
        items = [(storable(k), storable(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)  # type: ignore[return-value]
    if isinstance(value, list | tuple):
        children = [storable(v) for v in value]
        if all(c is v for c, v in zip(children, value, strict=True)):
            return value
        return type(value)(children)  # type: ignore[return-value]
    return value


def max_depth() -> int:
    return int(getattr(settings, "JSON_MAX_DEPTH", 32))


def check_value(value: Any, *, what: str = "The JSON") -> Any:
    """Return ``value`` (parsed JSON) unchanged, or raise :class:`BadInput` when it nests
    deeper than ``JSON_MAX_DEPTH`` or carries a NUL character in a string or key.
    Iterative: never recurses, whatever the input."""
    limit = max_depth()
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                raise BadInput("invalid_text", f"{what} contains a NUL character (\\u0000); remove it.")
            continue
        if not isinstance(node, dict | list):
            continue
        if depth > limit:
            raise BadInput("nested_too_deeply", f"{what} is nested more than {limit} levels deep.")
        if isinstance(node, dict):
            for key, child in node.items():
                if isinstance(key, str) and "\x00" in key:
                    raise BadInput("invalid_text", f"{what} contains a NUL character (\\u0000); remove it.")
                stack.append((child, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in node)
    return value


def loads(raw: str | bytes, *, what: str = "The JSON") -> Any:
    """``json.loads`` that refuses what :func:`check_value` refuses; ``ValueError`` (bad JSON)
    passes through for the caller's own message."""
    try:
        value = json.loads(raw)
    except RecursionError as exc:
        raise BadInput("nested_too_deeply", f"{what} is nested more than {max_depth()} levels deep.") from exc
    return check_value(value, what=what)


def parse_int(raw: Any, name: str, *, minimum: int = 0, maximum: int = MAX_DB_INT,
              default: int | None = None) -> int:
    """A parameter as an int in ``[minimum, maximum]``: decimal digits only (an optional
    leading ``-`` when ``minimum`` < 0). Empty/None → ``default`` (when given). Raises
    :class:`BadInput` ``invalid_parameter`` naming the parameter and the range."""
    if raw is None or raw == "":
        if default is not None:
            return default
        raise BadInput("invalid_parameter", f"{name} is required.")
    if isinstance(raw, bool):
        raise BadInput("invalid_parameter", f"{name} must be an integer from {minimum} to {maximum}.")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        digits = text[1:] if text.startswith("-") else text
        if not digits.isascii() or not digits.isdigit() or len(digits) > 19:
            raise BadInput("invalid_parameter", f"{name} must be an integer from {minimum} to {maximum}.")
        value = int(text)
    if not minimum <= value <= maximum:
        raise BadInput("invalid_parameter", f"{name} must be an integer from {minimum} to {maximum}.")
    return value


def hidden_control(text: str, *, newlines: bool = False) -> str | None:
    """The first control or bidirectional override/isolate character of ``text`` as
    ``"U+202E"``, None when it has none (``newlines``: ``\\n`` and ``\\t`` are allowed)."""
    for match in _HIDDEN_CONTROLS.finditer(text or ""):
        if newlines and match.group() in "\n\t":
            continue
        return f"U+{ord(match.group()):04X}"
    return None
