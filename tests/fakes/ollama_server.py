"""A scripted Ollama server speaking real HTTP (NDJSON) on ``127.0.0.1``.

Meant as the ``host`` of the real ``ollama`` client::

    from tests.fakes.ollama_server import FakeOllama, text_parts

    with FakeOllama([text_parts("Hello")]) as fake:
        client = ollama.Client(host=fake.base_url)
        for part in client.chat(model="llama3.2:3b", messages=[...], stream=True): ...
        assert fake.chat_requests[0]["options"] == {...}

Endpoints
---------
``POST /api/chat``   -> the next scripted iteration (NDJSON when ``stream`` is true or absent,
                        as Ollama defaults to streaming; otherwise one JSON object).
``GET  /api/tags``   -> ``{"models": [...]}`` with ``details.parameter_size``.
``POST /api/show``   -> details, ``model_info`` (``general.parameter_count``,
                        ``<arch>.context_length``) and ``capabilities``; 404 when unknown.
``GET  /api/version``-> ``{"version": "0.6.3-fake"}``.

Scripting
---------
An *iteration* is a ``list[dict]`` of ``message`` parts (``{"content": "Hi"}``,
``{"thinking": "…"}``, ``{"tool_calls": [...]}``); the fake wraps each as
``{"model", "created_at", "message": {"role": "assistant", **part}, "done": false}`` and
appends a final ``done: true`` line (``done_reason`` ``stop``, token counts) unless a part
is already a whole line (it has ``"done"``) -- see :func:`done`. :class:`ErrorLine` sends
``{"error": "…"}`` mid-stream, :class:`Failure` an HTTP error, :class:`DieAfter` drops the
connection after some parts.

Validation (HTTP 400 ``{"error": …}``, like Ollama's JSON decoding; rejected requests do not
consume an iteration): ``model`` required and known (404 "model … not found" otherwise);
roles are system/user/assistant/tool; ``tool_calls[].function.arguments`` is an object
(Ollama: "cannot unmarshal string into Go struct field"); ``options.num_ctx`` and
``options.num_predict`` are integers; ``think`` is a bool or low/medium/high. With
``validate_history`` (default) a ``tool`` message must follow an assistant message with
``tool_calls`` and name one of its tools in ``tool_name``, and every call is answered before
the next non-tool message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._loopback import BaseHandler, ConnectionDropped, FakeServer

__all__ = ["DieAfter", "ErrorLine", "Failure", "FakeOllama", "done", "text_parts", "thinking_parts", "tool_call_part"]

NO_MORE_SCRIPTED_RESPONSES = "(no more scripted responses)"
CREATED_AT = "2025-01-01T00:00:00.000000Z"


@dataclass
class Failure:
    status: int = 500
    error: str = "fake failure"
    headers: dict = field(default_factory=dict)


@dataclass
class ErrorLine:
    """Stream ``parts``, then an ``{"error": message}`` line (Ollama's mid-stream error)."""

    parts: list[dict]
    message: str = "model runner has unexpectedly stopped"


@dataclass
class DieAfter:
    parts: list[dict]


def text_parts(text: str, pieces: int = 3) -> list[dict]:
    n = max(1, min(pieces, len(text) or 1))
    size, extra = divmod(len(text), n)
    out, pos = [], 0
    for i in range(n):
        end = pos + size + (1 if i < extra else 0)
        out.append({"content": text[pos:end]})
        pos = end
    return out


def thinking_parts(text: str, pieces: int = 2) -> list[dict]:
    return [{"content": "", "thinking": p["content"]} for p in text_parts(text, pieces)]


def tool_call_part(*calls: tuple[str, dict]) -> dict:
    """One streamed message carrying whole tool calls ``(name, arguments_object)``."""
    return {"content": "", "tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in calls]}


def done(reason: str = "stop", *, prompt: int = 12, completion: int = 3) -> dict:
    """The final line of a stream."""
    return {"done": True, "done_reason": reason, "prompt_eval_count": prompt, "eval_count": completion,
            "total_duration": 1000, "load_duration": 10, "prompt_eval_duration": 100, "eval_duration": 200,
            "message": {"role": "assistant", "content": ""}}


DEFAULT_MODELS: dict[str, dict] = {
    "llama3.2:3b": {"parameter_size": "3.2B", "parameter_count": 3_212_749_888, "family": "llama",
                    "context_length": 131072, "capabilities": ["completion", "tools"]},
    "qwen2.5:14b": {"parameter_size": "14.8B", "parameter_count": 14_770_033_664, "family": "qwen2",
                    "context_length": 32768, "capabilities": ["completion", "tools"]},
    "nomic-embed-text:latest": {"parameter_size": "137M", "parameter_count": 136_727_040, "family": "nomic-bert",
                                "context_length": 2048, "capabilities": ["embedding"]},
}


class Invalid(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def validate_chat(body: dict, *, models: Mapping[str, dict], history: bool = True) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Invalid("model is required")
    if model not in models:
        raise Invalid(f"model '{model}' not found", 404)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Invalid("json: cannot unmarshal messages")
    options = body.get("options")
    if options is not None:
        if not isinstance(options, dict):
            raise Invalid("json: cannot unmarshal options")
        for key in ("num_ctx", "num_predict"):
            if key in options and not isinstance(options[key], int):
                raise Invalid(f"option {key!r} must be of type integer")
    think = body.get("think")
    if think is not None and not (isinstance(think, bool) or think in ("low", "medium", "high")):
        raise Invalid(f"invalid think value: {think!r}")
    open_calls: list[str] | None = None
    answered: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "user", "assistant", "tool"):
            raise Invalid(f"messages[{i}]: invalid role")
        if msg.get("content") is not None and not isinstance(msg["content"], str):
            raise Invalid("json: cannot unmarshal array into Go struct field Message.messages.content of type string")
        for call in msg.get("tool_calls") or []:
            fn = (call or {}).get("function") or {}
            if not isinstance(fn.get("name"), str):
                raise Invalid("json: cannot unmarshal tool call without a function name")
            if not isinstance(fn.get("arguments"), dict):
                raise Invalid("json: cannot unmarshal string into Go struct field ToolCallFunction."
                              "messages.tool_calls.function.arguments of type api.ToolCallFunctionArguments")
        if not history:
            continue
        if msg["role"] == "tool":
            if open_calls is None:
                raise Invalid(f"messages[{i}]: a tool message must follow an assistant message with tool_calls")
            if msg.get("tool_name") not in open_calls:
                raise Invalid(f"messages[{i}]: tool_name {msg.get('tool_name')!r} does not match a tool call")
            answered.append(msg["tool_name"])
            continue
        if open_calls is not None and sorted(answered) != sorted(open_calls):
            raise Invalid(f"messages[{i}]: tool calls {open_calls} were not all answered")
        open_calls, answered = None, []
        if msg["role"] == "assistant" and msg.get("tool_calls"):
            open_calls = [c["function"]["name"] for c in msg["tool_calls"]]
    if history and open_calls is not None and sorted(answered) != sorted(open_calls):
        raise Invalid(f"tool calls {open_calls} were not all answered")


class _Handler(BaseHandler):
    server_version = "FakeOllama/1.0"

    def _error(self, status: int, message: str, headers: dict | None = None) -> None:
        self.send_json(status, {"error": message}, headers)

    def _authorized(self) -> bool:
        key = self.fake.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._error(401, "unauthorized")
        return False

    def do_GET(self) -> None:  # noqa: N802
        try:
            path = self.path_only
            self.fake.record(path, {}, self.lower_headers())
            if not self._authorized():
                return
            if path == "/api/tags":
                self.send_json(200, {"models": [self.fake.tag_obj(m) for m in self.fake.models]})
            elif path == "/api/version":
                self.send_json(200, {"version": "0.6.3-fake"})
            else:
                self._error(404, "404 page not found")
        except ConnectionDropped:
            self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802
        try:
            path = self.path_only
            body = self.read_json()
            if not self._authorized():
                return
            if not isinstance(body, dict):
                self._error(400, "invalid JSON body")
                return
            if path == "/api/show":
                self._show(body)
            elif path == "/api/chat":
                self._chat(body)
            else:
                self._error(404, "404 page not found")
        except ConnectionDropped:
            self.close_connection = True

    def _show(self, body: dict) -> None:
        name = body.get("model") or body.get("name")
        if name not in self.fake.models:
            self._error(404, f"model '{name}' not found")
            return
        self.send_json(200, self.fake.show_obj(name))

    def _chat(self, body: dict) -> None:
        fake = self.fake
        try:
            validate_chat(body, models=fake.models, history=fake.validate_history)
        except Invalid as exc:
            self._error(exc.status, exc.message)
            return
        n, item = fake.next_iteration()
        if isinstance(item, Failure):
            self.send_json(item.status, {"error": item.error}, item.headers)
            return
        model = body["model"]
        dying = isinstance(item, DieAfter)
        failing = isinstance(item, ErrorLine)
        parts = item.parts if (dying or failing) else item
        lines = fake.frame(parts, model=model, close=not (dying or failing))
        if failing:
            lines.append({"error": item.message})
        if body.get("stream") is False:
            if dying:
                self.die()
                return
            self.send_json(200, _assemble(lines))
            return
        self.start_chunked("application/x-ndjson")
        for i, line in enumerate(lines):
            if i:
                fake.pause()
            self.send_chunk((json.dumps(line, ensure_ascii=False) + "\n").encode(), split_utf8=fake.split_utf8)
        if dying:
            self.die()
            return
        self.end_chunked()


def _assemble(lines: list[dict]) -> dict:
    out = dict(lines[-1])
    message = {"role": "assistant", "content": ""}
    for line in lines:
        part = line.get("message") or {}
        message["content"] += part.get("content") or ""
        if part.get("thinking"):
            message["thinking"] = message.get("thinking", "") + part["thinking"]
        if part.get("tool_calls"):
            message.setdefault("tool_calls", []).extend(part["tool_calls"])
    out["message"] = message
    return out


class FakeOllama(FakeServer):
    """Scripted Ollama server; see the module docstring. ``base_url`` is
    ``http://127.0.0.1:PORT``. ``models`` maps a model name to its details (see
    ``DEFAULT_MODELS``)."""

    handler = _Handler
    name = "FakeOllama"

    def __init__(self, iterations: Sequence[Any] | None = None, *, models: Mapping[str, dict] | None = None,
                 api_key: str | None = None, validate_history: bool = True, **kwargs) -> None:
        super().__init__(iterations, **kwargs)
        self.models = dict(DEFAULT_MODELS if models is None else models)
        self.api_key = api_key
        self.validate_history = validate_history

    @property
    def chat_requests(self) -> list[dict]:
        return [r for p, r in zip(self.paths, self.requests, strict=False) if p == "/api/chat"]

    def fallback_iteration(self):
        return text_parts(NO_MORE_SCRIPTED_RESPONSES)

    def frame(self, parts: list[dict], *, model: str, close: bool = True) -> list[dict]:
        lines = []
        for part in parts:
            if "done" in part:
                lines.append({"model": model, "created_at": CREATED_AT, **part})
            else:
                lines.append({"model": model, "created_at": CREATED_AT,
                              "message": {"role": "assistant", **part}, "done": False})
        if close and not any(line.get("done") for line in lines):
            lines.append({"model": model, "created_at": CREATED_AT, **done()})
        return lines

    def tag_obj(self, name: str) -> dict:
        info = self.models[name]
        return {
            "name": name, "model": name, "modified_at": "2025-01-01T00:00:00Z", "size": 2_019_393_189,
            "digest": "a80c4f17acd5" + "0" * 52,
            "details": {"parent_model": "", "format": "gguf", "family": info.get("family", "llama"),
                        "families": [info.get("family", "llama")], "parameter_size": info.get("parameter_size", ""),
                        "quantization_level": "Q4_K_M"},
        }

    def show_obj(self, name: str) -> dict:
        info = self.models[name]
        arch = info.get("family", "llama")
        model_info: dict[str, Any] = {"general.architecture": arch}
        if info.get("parameter_count") is not None:
            model_info["general.parameter_count"] = info["parameter_count"]
        if info.get("context_length"):
            model_info[f"{arch}.context_length"] = info["context_length"]
        return {
            "modelfile": f"FROM {name}", "parameters": "stop \"<|eot_id|>\"", "template": "{{ .Prompt }}",
            "details": self.tag_obj(name)["details"], "model_info": model_info,
            "capabilities": info.get("capabilities", ["completion"]), "modified_at": "2025-01-01T00:00:00Z",
        }

    def __repr__(self) -> str:
        return f"<FakeOllama {self._base_url or 'stopped'} requests={len(self.requests)} remaining={self.remaining}>"
