"""A scripted Anthropic Messages API server speaking real HTTP (SSE) on ``127.0.0.1``.

Meant as the ``base_url`` of the real ``anthropic`` SDK::

    from tests.fakes.anthropic_server import FakeAnthropic, text_events

    with FakeAnthropic([text_events("Hello")]) as fake:
        client = anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant-test", max_retries=0)
        ...
        assert fake.requests[0]["messages"] == [...]

Endpoints
---------
``POST /v1/messages``      -> the next scripted iteration (SSE when ``"stream": true``,
                              otherwise one ``message`` object).
``GET  /v1/models``        -> ``{"data": [...], "has_more", "first_id", "last_id"}``
                              (``limit`` / ``after_id`` pagination as the real API).
``GET  /v1/models/<id>``   -> one model, or 404 ``not_found_error``.

Scripting
---------
An *iteration* answers one accepted ``POST /v1/messages``:

* ``list[dict]`` -- the ``data:`` objects of one streamed response (each SSE ``event:``
  name equals the object's ``type``). A standard ``message_start`` (id ``msg_t``, role
  assistant, empty content, usage) is added in front unless the list has one, and
  ``message_stop`` at the end unless the list has one (shared/cases/anthropic/ note).
* :class:`Failure` -- an HTTP error with Anthropic's error JSON.
* :class:`DieAfter` -- send some events, then drop the connection mid-body.

Validation (HTTP 400 ``invalid_request_error``, like the real API; rejected requests do not
consume an iteration): ``max_tokens`` required; the first message is ``user``; roles
alternate (``strict_alternation``); text blocks non-empty and not whitespace-only; every
``tool_use`` has its ``tool_result`` in the immediately following user message; a
``tool_result`` answers a ``tool_use`` of the message right before it and comes before any
text in its message; ``tool_use.input`` is an object; ``tool_use`` ids are unique and match
``^[a-zA-Z0-9_-]+$``; tool names match ``^[a-zA-Z0-9_-]{1,128}$``; ``system`` is a string or
a list of text blocks (never a message role).

Auth: ``x-api-key`` (or ``Authorization: Bearer``) must equal ``api_key`` (``None`` disables auth) else 401
``authentication_error``. With ``reject_unknown_models`` a model not in ``models`` is a 404
``not_found_error`` ("model: <name>").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._loopback import BaseHandler, ConnectionDropped, FakeServer

__all__ = [
    "DieAfter",
    "Failure",
    "FakeAnthropic",
    "message_delta",
    "text_events",
    "tool_use_events",
]

NO_MORE_SCRIPTED_RESPONSES = "(no more scripted responses)"
TOOL_ID_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass
class Failure:
    """Answer one request with ``{"type": "error", "error": {"type", "message"}}``."""

    status: int = 500
    message: str = "fake failure"
    headers: dict = field(default_factory=dict)
    type: str | None = None

    def body(self) -> dict:
        err_type = self.type or _ERROR_TYPES.get(self.status, "api_error")
        return {"type": "error", "error": {"type": err_type, "message": self.message}}


@dataclass
class DieAfter:
    """Stream ``events`` (with the usual ``message_start``), then drop the connection."""

    events: list[dict]


# --------------------------------------------------------------------------------------- #
# Event helpers
# --------------------------------------------------------------------------------------- #
def text_events(text: str, *, index: int = 0, pieces: int = 3, stop_reason: str | None = "end_turn",
                output_tokens: int = 5) -> list[dict]:
    """A text block streamed in ``pieces`` deltas; ends with ``message_delta`` when
    ``stop_reason`` is given (pass ``None`` to add more blocks after it)."""
    parts = _split(text, pieces)
    events: list[dict] = [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}]
    events += [{"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}} for p in parts]
    events.append({"type": "content_block_stop", "index": index})
    if stop_reason:
        events.append(message_delta(stop_reason, output_tokens))
    return events


def tool_use_events(call_id: str, name: str, arguments_json: str, *, index: int = 0, fragments: int = 2,
                    stop_reason: str | None = "tool_use", output_tokens: int = 9) -> list[dict]:
    """A ``tool_use`` block whose input arrives as ``input_json_delta`` fragments."""
    events: list[dict] = [{"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}}]
    for part in _split(arguments_json, fragments) or [""]:
        events.append({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": part}})
    events.append({"type": "content_block_stop", "index": index})
    if stop_reason:
        events.append(message_delta(stop_reason, output_tokens))
    return events


def message_delta(stop_reason: str, output_tokens: int = 5) -> dict:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens}}


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    n = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), n)
    out, pos = [], 0
    for i in range(n):
        end = pos + size + (1 if i < extra else 0)
        out.append(text[pos:end])
        pos = end
    return out


# --------------------------------------------------------------------------------------- #
# Validation
# --------------------------------------------------------------------------------------- #
class Invalid(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def validate_request(body: dict, *, strict_alternation: bool = True) -> None:
    """Raise :class:`Invalid` when ``body`` breaks the Messages API rules listed above."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("model: Field required")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        raise Invalid("max_tokens: Field required")
    system = body.get("system")
    if system is not None:
        if isinstance(system, list):
            for j, block in enumerate(system):
                _check_text_block(block, f"system.{j}")
        elif not isinstance(system, str):
            raise Invalid("system: Input should be a valid string or list of text blocks")
    _validate_tools(body.get("tools"))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages: Field required (a non-empty list)")
    seen_ids: set[str] = set()
    open_ids: list[str] = []  # tool_use ids of the previous assistant message
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise Invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        role = msg["role"]
        if i == 0 and role != "user":
            raise Invalid("messages: first message must use the \"user\" role")
        if strict_alternation and i and messages[i - 1].get("role") == role:
            raise Invalid(f"messages.{i}: roles must alternate between \"user\" and \"assistant\"")
        blocks = _blocks(msg.get("content"), i, final_assistant=(role == "assistant" and i == len(messages) - 1))
        answered: list[str] = []
        seen_text = False
        for j, block in enumerate(blocks):
            kind = block.get("type")
            where = f"messages.{i}.content.{j}"
            if kind == "text":
                _check_text_block(block, where)
                seen_text = True
            elif kind == "tool_use":
                if role != "assistant":
                    raise Invalid(f"{where}: `tool_use` blocks can only be in `assistant` messages")
                call_id = block.get("id")
                if not isinstance(call_id, str) or not TOOL_ID_RE.match(call_id):
                    raise Invalid(f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
                if call_id in seen_ids:
                    raise Invalid(f"{where}: `tool_use` ids must be unique")
                seen_ids.add(call_id)
                if not isinstance(block.get("name"), str) or not TOOL_NAME_RE.match(block["name"]):
                    raise Invalid(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
                if not isinstance(block.get("input"), dict):
                    raise Invalid(f"{where}.input: Input should be a valid dictionary")
            elif kind == "tool_result":
                if role != "user":
                    raise Invalid(f"{where}: `tool_result` blocks can only be in `user` messages")
                if seen_text:
                    raise Invalid(f"{where}: `tool_result` blocks must come before any other content in the message")
                use_id = block.get("tool_use_id")
                if use_id not in open_ids:
                    raise Invalid(
                        f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: {use_id}. Each "
                        "`tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )
                if "is_error" in block and not isinstance(block["is_error"], bool):
                    raise Invalid(f"{where}.is_error: Input should be a valid boolean")
                content = block.get("content")
                if isinstance(content, list):
                    for k, inner in enumerate(content):
                        if inner.get("type") == "text":
                            _check_text_block(inner, f"{where}.content.{k}")
                elif content is not None and not isinstance(content, str):
                    raise Invalid(f"{where}.content: Input should be a valid string or list")
                answered.append(use_id)
            elif kind in ("thinking", "redacted_thinking", "image", "document"):
                pass
            else:
                raise Invalid(f"{where}.type: unknown content block type {kind!r}")
        missing = [cid for cid in open_ids if cid not in answered]
        if missing:
            raise Invalid(
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block in "
                "the next message."
            )
        open_ids = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    if open_ids:
        raise Invalid(
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` blocks immediately "
            f"after: {', '.join(open_ids)}. Each `tool_use` block must have a corresponding `tool_result` block "
            "in the next message."
        )


def _blocks(content: Any, i: int, *, final_assistant: bool) -> list[dict]:
    if isinstance(content, str):
        if not content.strip() and not final_assistant:
            raise Invalid(f"messages.{i}: all messages must have non-empty content except for the optional "
                          "final assistant message")
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list) or (not content and not final_assistant):
        raise Invalid(f"messages.{i}.content: Input should be a valid string or a non-empty list of blocks")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise Invalid(f"messages.{i}.content.{j}: Input should be an object with a 'type'")
    return content


def _check_text_block(block: Any, where: str) -> None:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise Invalid(f"{where}: Input should be a text block")
    if not block["text"].strip():
        raise Invalid(f"{where}: text content blocks must contain non-whitespace text")


def _validate_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise Invalid("tools: Input should be a valid list")
    names = set()
    for j, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
            raise Invalid(f"tools.{j}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        if name in names:
            raise Invalid(f"tools: Tool names must be unique ({name})")
        names.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Invalid(f"tools.{j}.input_schema.type: Input should be 'object'")


# --------------------------------------------------------------------------------------- #
# HTTP
# --------------------------------------------------------------------------------------- #
class _Handler(BaseHandler):
    server_version = "FakeAnthropic/1.0"

    def _error(self, status: int, message: str, err_type: str | None = None, headers: dict | None = None) -> None:
        self.send_json(status, Failure(status, message, type=err_type).body(),
                       {"request-id": "req_fake", **(headers or {})})

    def _authorized(self) -> bool:
        key = self.fake.api_key
        # The SDK sends the key as x-api-key or, in newer versions, as a bearer token.
        if key is None or self.headers.get("x-api-key") == key or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._error(401, "invalid x-api-key", "authentication_error")
        return False

    def do_GET(self) -> None:  # noqa: N802
        try:
            path = self.path_only
            self.fake.record(path, {}, self.lower_headers())
            if not path.startswith("/v1/models"):
                self._error(404, f"Not found: {path}", "not_found_error")
                return
            if not self._authorized():
                return
            if path == "/v1/models":
                self._list_models()
            else:
                model = path[len("/v1/models/"):]
                if model in self.fake.models:
                    self.send_json(200, self.fake.model_obj(model))
                else:
                    self._error(404, f"model: {model}", "not_found_error")
        except ConnectionDropped:
            self.close_connection = True

    def _list_models(self) -> None:
        names = list(self.fake.models)
        params = self.query
        if params.get("after_id") in names:
            names = names[names.index(params["after_id"]) + 1:]
        limit = int(params.get("limit") or 20)
        page, rest = names[:limit], names[limit:]
        self.send_json(200, {
            "data": [self.fake.model_obj(m) for m in page],
            "has_more": bool(rest),
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
        })

    def do_POST(self) -> None:  # noqa: N802
        try:
            path = self.path_only
            body = self.read_json()
            if path != "/v1/messages":
                self._error(404, f"Not found: {path}", "not_found_error")
                return
            if not self._authorized():
                return
            if not isinstance(body, dict):
                self._error(400, "There was an issue with your request body: invalid JSON")
                return
            self._messages(body)
        except ConnectionDropped:
            self.close_connection = True

    def _messages(self, body: dict) -> None:
        fake = self.fake
        if fake.validate_history:
            try:
                validate_request(body, strict_alternation=fake.strict_alternation)
            except Invalid as exc:
                self._error(400, exc.message, "invalid_request_error")
                return
        if fake.reject_unknown_models and body.get("model") not in fake.models:
            self._error(404, f"model: {body.get('model')}", "not_found_error")
            return
        n, item = fake.next_iteration()
        if isinstance(item, Failure):
            self.send_json(item.status, item.body(), {"request-id": f"req_fake_{n}", **item.headers})
            return
        dying = isinstance(item, DieAfter)
        events = fake.frame(item.events if dying else item, model=body.get("model", "claude-fake"), n=n,
                            close=not dying)
        if not body.get("stream"):
            if dying:
                self.die()
                return
            self.send_json(200, _assemble(events), {"request-id": f"req_fake_{n}"})
            return
        self.start_chunked("text/event-stream; charset=utf-8", {"request-id": f"req_fake_{n}"})
        for i, event in enumerate(events):
            if i:
                fake.pause()
            name = event.get("type", "message") if isinstance(event, dict) else "message"
            data = f"event: {name}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
            self.send_chunk(data, split_utf8=fake.split_utf8)
        if dying:
            self.die()
            return
        self.end_chunked()


def _assemble(events: list[dict]) -> dict:
    """Fold streamed events into one non-streaming ``message`` object."""
    message: dict = {}
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for ev in events:
        kind = ev.get("type")
        if kind == "message_start":
            message = dict(ev["message"])
        elif kind == "content_block_start":
            blocks[ev["index"]] = dict(ev["content_block"])
        elif kind == "content_block_delta":
            delta = ev["delta"]
            if delta.get("type") == "text_delta":
                blocks[ev["index"]]["text"] = blocks[ev["index"]].get("text", "") + delta["text"]
            elif delta.get("type") == "input_json_delta":
                partial[ev["index"]] = partial.get(ev["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            message.update(ev.get("delta") or {})
            message.setdefault("usage", {}).update(ev.get("usage") or {})
    for idx, text in partial.items():
        try:
            blocks[idx]["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks[idx]["input"] = {}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


class FakeAnthropic(FakeServer):
    """Scripted Anthropic server; see the module docstring.

    ``base_url`` is ``http://127.0.0.1:PORT`` (the SDK appends ``/v1/messages``).
    ``requests`` holds the JSON body of every request (GETs as ``{}``), ``paths`` the
    matching paths, ``headers`` the lowercased headers.
    """

    handler = _Handler
    name = "FakeAnthropic"

    def __init__(
        self,
        iterations: Sequence[Any] | None = None,
        *,
        api_key: str | None = "sk-ant-test",
        models: Sequence[str] = ("claude-fake-1", "claude-fake-2"),
        validate_history: bool = True,
        strict_alternation: bool = True,
        reject_unknown_models: bool = False,
        input_tokens: int = 11,
        **kwargs,
    ) -> None:
        super().__init__(iterations, **kwargs)
        self.api_key = api_key
        self.models = tuple(models)
        self.validate_history = validate_history
        self.strict_alternation = strict_alternation
        self.reject_unknown_models = reject_unknown_models
        self.input_tokens = input_tokens

    @property
    def message_requests(self) -> list[dict]:
        """Bodies of ``POST /v1/messages`` only."""
        return [r for p, r in zip(self.paths, self.requests, strict=False) if p == "/v1/messages"]

    def fallback_iteration(self):
        return text_events(NO_MORE_SCRIPTED_RESPONSES)

    def frame(self, events: list[dict], *, model: str, n: int, close: bool = True) -> list[dict]:
        events = [dict(e) for e in events]
        if not any(e.get("type") == "message_start" for e in events):
            events.insert(0, {"type": "message_start", "message": {
                "id": "msg_t" if n == 1 else f"msg_t{n}", "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 1},
            }})
        if close and not any(e.get("type") == "message_stop" for e in events):
            events.append({"type": "message_stop"})
        return events

    @staticmethod
    def model_obj(model: str) -> dict:
        return {"type": "model", "id": model, "display_name": model.replace("-", " ").title(),
                "created_at": "2025-01-01T00:00:00Z"}

    def __repr__(self) -> str:
        return f"<FakeAnthropic {self._base_url or 'stopped'} requests={len(self.requests)} remaining={self.remaining}>"
