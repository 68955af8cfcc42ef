"""The request body of ``POST /v1/chat/completions`` checked as REST bodies are
(``chatplatform.safe_input``) before any service sees it, plus what only this API needs.

Each refusal is an :class:`~openai_api.services.ApiRejected` (400) that the view answers in
OpenAI's shape ``{"error": {"message", "type": "invalid_request_error", "param", "code"}}``:

* ``invalid_json`` — not UTF-8, or not JSON;
* ``nested_too_deeply`` — nested beyond ``JSON_MAX_DEPTH`` (default 32) levels, however deep
  (Python's parser would otherwise recurse out);
* ``invalid_text`` — a NUL character (PostgreSQL stores none) or a lone UTF-16 surrogate
  (``"\\ud800"``: valid JSON, not storable text) in any string or key; ``param`` names where;
* ``invalid_request_error`` — the body is not an object;
* ``too_many_messages`` — more than ``COMPAT_API_MAX_MESSAGES`` (default 1000) messages.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from chatplatform.safe_input import BadInput, loads

from .services import ApiRejected


def max_messages() -> int:
    return int(getattr(settings, "COMPAT_API_MAX_MESSAGES", 1000))


def _path(parts: list) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out[:200]


def _lone_surrogate_at(value: Any) -> str | None:
    """The path (``messages[2].content``) of the first string or key holding a lone
    surrogate, else None. Iterative."""
    stack: list[tuple[Any, list]] = [(value, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return _path(path) or "body"
        elif isinstance(node, dict):
            for key, child in node.items():
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    return _path(path) or "body"
                stack.append((child, [*path, key]))
        elif isinstance(node, list):
            stack.extend((child, [*path, n]) for n, child in enumerate(node))
    return None


def parse_body(raw: bytes) -> dict:
    """The parsed request body (a dict), or ApiRejected (400) as listed above."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiRejected("invalid_json", "The body is not valid UTF-8 text.") from None
    try:
        body = loads(text or "null", what="The request body")
    except BadInput as exc:
        raise ApiRejected(exc.code, exc.message) from None
    except ValueError:
        raise ApiRejected("invalid_json", "The body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiRejected("invalid_request_error", "The body must be a JSON object.")
    where = _lone_surrogate_at(body)
    if where is not None:
        raise ApiRejected("invalid_text", f"{where} contains a lone UTF-16 surrogate (\\ud800–\\udfff); "
                          "send valid Unicode text.", param=where)
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > max_messages():
        raise ApiRejected("too_many_messages", f"messages: at most {max_messages()} messages per request "
                          f"(got {len(messages)}); start a new conversation or send fewer.", param="messages")
    return body
