"""A scripted, OpenAI-compatible Chat Completions server speaking real HTTP.

The fake listens on ``127.0.0.1`` on a random free port and is meant to be the
``base_url`` of the real ``openai`` SDK (or any OpenAI-compatible client)::

    from tests.fakes.openai_server import FakeOpenAI, text_chunks

    with FakeOpenAI([text_chunks("Hello there")]) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)
        stream = client.chat.completions.create(model="fake-model", messages=[...], stream=True)
        ...
        assert fake.requests[0]["messages"] == [...]

The HTTP server, writers, lifecycle and script queue are the shared loopback base
(:mod:`tests.fakes._loopback`, as for the Anthropic and Ollama fakes); this module only
speaks the Chat Completions wire format.

Endpoints
---------
``GET  /v1/models``            -> ``{"object": "list", "data": [model, ...]}``
``GET  /v1/models/<id>``       -> one model object, or 404
``POST /v1/chat/completions``  -> the next scripted iteration, as an SSE stream
                                  when the body has ``"stream": true``, else as
                                  one ``chat.completion`` JSON object.

Scripting
---------
An *iteration* answers one accepted ``POST /v1/chat/completions`` request and is
one of:

* ``list[dict]`` -- the chunks of one streamed response.  Each dict is the JSON
  of one ``data:`` line *without* ``id``/``object``/``created``/``model``; the
  server fills those in (``id="chatcmpl-fake-N"``, ``object="chat.completion.chunk"``,
  ``created=<int>``, ``model=<request model>``).  Keys the dict does carry win.
  Typical chunk::

      {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}

* :class:`Failure` -- answer with an HTTP error status and OpenAI's error JSON.
* :class:`DieAfter` -- send some chunks, then drop the TCP connection mid-stream.
* a *responder* -- a callable given the request's JSON body, returning one of the above
  (an answer that depends on the request, such as usage that fills its ``max_tokens``).

Iterations given via ``raw_iterations`` (or :meth:`FakeOpenAI.script_raw`) are
sent byte-for-byte as given (no fields added); a :class:`RawLine` in one is sent as its text,
not as JSON.

Requests rejected by the fake itself (bad API key -> 401, invalid JSON or invalid
history -> 400) do **not** consume an iteration; every request, accepted or not,
is recorded in :attr:`FakeOpenAI.requests` / :attr:`FakeOpenAI.headers`.  Once
the script is exhausted, each further request is answered with the text
``"(no more scripted responses)"`` and ``finish_reason="stop"``.

Wire format
-----------
Responses use HTTP/1.1 with ``Connection: close``.  Streams use chunked transfer
encoding, one HTTP chunk per SSE event (``data: <json>\\n\\n``), each written and
flushed individually, then ``data: [DONE]\\n\\n`` (unless ``send_done=False``) and
the terminating zero-length chunk.  Because the body is chunked, a
:class:`DieAfter` close is seen by the client as an *incomplete* body
(``httpx.RemoteProtocolError``), not as a normal end of stream.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._loopback import BaseHandler, ConnectionDropped, FakeServer

__all__ = [
    "DieAfter",
    "Failure",
    "FakeOpenAI",
    "NO_MORE_SCRIPTED_RESPONSES",
    "RawLine",
    "reasoning_chunks",
    "text_chunks",
    "tool_call_chunks",
    "usage_chunk",
]

#: Text streamed when requests outnumber the scripted iterations.
NO_MORE_SCRIPTED_RESPONSES = "(no more scripted responses)"

Chunk = dict[str, Any]


# --------------------------------------------------------------------------- #
# Script items
# --------------------------------------------------------------------------- #
_DEFAULT_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass
class Failure:
    """Answer one request with an HTTP error instead of a completion.

    The body is OpenAI's error JSON::

        {"error": {"message": <message>, "type": <type>, "param": None, "code": <code>}}

    ``headers`` are added to the response (e.g. ``{"retry-after": "7"}``).
    ``type`` defaults to an OpenAI-like value derived from ``status``
    (``"rate_limit_error"`` for 429, ``"server_error"`` for 5xx, ...).
    """

    status: int = 500
    message: str = "fake failure"
    headers: dict = field(default_factory=dict)
    code: str | None = None
    type: str | None = None

    def error_body(self) -> dict:
        """The JSON body to send: ``{"error": {message, type, param, code}}``."""
        err_type = self.type or _DEFAULT_ERROR_TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return _error_body(self.message, err_type, self.code)


@dataclass
class DieAfter:
    """Stream ``chunks`` (normalized like an iteration's), then drop the connection.

    No ``[DONE]`` and no terminating HTTP chunk are sent: the socket is shut
    down mid-body, so the client sees a truncated response and raises while
    iterating.  For a non-streaming request the connection is dropped before
    any response is sent.
    """

    chunks: list[dict]


@dataclass
class RawLine:
    """A ``data:`` payload sent as this text, not as JSON (only in raw iterations): e.g.
    ``RawLine("{broken json")``, a chunk the SDK cannot decode."""

    text: str


Iteration = list | Failure | DieAfter | Callable[[dict], Any]


@dataclass
class _Scripted:
    """One queued iteration plus whether its chunks are sent raw."""

    item: Iteration
    raw: bool


# --------------------------------------------------------------------------- #
# Chunk helpers
# --------------------------------------------------------------------------- #
def _choice(delta: dict, finish_reason: str | None = None) -> Chunk:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def _split_text(text: str, pieces: int | None) -> list[str]:
    """Split ``text`` into ``pieces`` near-equal parts, or by words (keeping
    whitespace attached to the preceding word).  ``"".join(result) == text``."""
    if not text:
        return []
    if pieces is None:
        return [p for p in re.split(r"(?<=\s)(?=\S)", text) if p]
    n = max(1, min(int(pieces), len(text)))
    size, extra = divmod(len(text), n)
    parts, pos = [], 0
    for i in range(n):
        end = pos + size + (1 if i < extra else 0)
        parts.append(text[pos:end])
        pos = end
    return parts


def text_chunks(text: str, *, pieces: int | None = None) -> list[Chunk]:
    """Chunks of a streamed plain-text answer.

    Shape: a role chunk ``delta={"role": "assistant", "content": ""}``, then one
    ``delta={"content": part}`` per part (``pieces`` near-equal parts, or one per
    word when ``pieces`` is None), then ``delta={}`` with ``finish_reason="stop"``.
    """
    chunks = [_choice({"role": "assistant", "content": ""})]
    chunks += [_choice({"content": part}) for part in _split_text(text, pieces)]
    chunks.append(_choice({}, "stop"))
    return chunks


def reasoning_chunks(text: str, *, pieces: int | None = None) -> list[Chunk]:
    """Chunks streaming DeepSeek-style ``delta.reasoning_content`` (thinking).

    Shape: a role chunk ``delta={"role": "assistant", "content": None,
    "reasoning_content": ""}`` then one ``delta={"reasoning_content": part}``
    per part.  No finish chunk: concatenate with :func:`text_chunks` or
    :func:`tool_call_chunks`, e.g. ``reasoning_chunks("hmm") + tool_call_chunks([...])``.
    """
    chunks = [_choice({"role": "assistant", "content": None, "reasoning_content": ""})]
    chunks += [_choice({"reasoning_content": part}) for part in _split_text(text, pieces)]
    return chunks


def tool_call_chunks(calls: Sequence[tuple[str, str, str]]) -> list[Chunk]:
    """Chunks of a streamed tool-call answer, in OpenAI's usual shape.

    ``calls`` is a list of ``(call_id, function_name, arguments_json)``.  For call
    ``i``: a first fragment ``{"index": i, "id": call_id, "type": "function",
    "function": {"name": name, "arguments": ""}}`` (the very first one also
    carries ``"role": "assistant", "content": None`` in its delta), then two
    fragments ``{"index": i, "function": {"arguments": half}}`` whose
    concatenation is ``arguments_json``.  Finally ``delta={}`` with
    ``finish_reason="tool_calls"``.
    """
    chunks: list[Chunk] = []
    for i, (call_id, name, args) in enumerate(calls):
        head: dict[str, Any] = {
            "tool_calls": [
                {
                    "index": i,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
            ]
        }
        if i == 0:
            head = {"role": "assistant", "content": None, **head}
        chunks.append(_choice(head))
        mid = len(args) // 2
        for part in (args[:mid], args[mid:]):
            chunks.append(_choice({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    chunks.append(_choice({}, "tool_calls"))
    return chunks


def usage_chunk(prompt: int, completion: int) -> Chunk:
    """The final usage chunk: ``{"choices": [], "usage": {prompt_tokens,
    completion_tokens, total_tokens}}`` (as sent with ``stream_options.include_usage``)."""
    return {
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


# --------------------------------------------------------------------------- #
# Validation
# --------------------------------------------------------------------------- #
class _Invalid(Exception):
    """A 400 ``invalid_request_error`` with an optional ``param``."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


def _error_body(message: str, err_type: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def _validate_messages(body: dict, require_reasoning_content: str | bool | None) -> None:
    """Raise :class:`_Invalid` when ``body["messages"]`` breaks OpenAI's rules.

    Rules: ``messages`` is a non-empty list of objects with a string ``role``;
    a ``tool`` message answers (possibly after other tool messages) the nearest
    preceding assistant message with ``tool_calls`` and its ``tool_call_id`` is
    one of that message's call ids; every call id is answered before the next
    non-tool message or the end of the list; ``function.arguments`` is a string;
    with ``require_reasoning_content``, assistant tool-call messages carry
    ``reasoning_content`` (equal to it when it is a string).
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Invalid("Invalid 'messages': expected a non-empty array of messages.", "messages")

    open_ids: list[str] | None = None  # call ids of the assistant turn being answered
    answered: set[str] = set()
    opened_at = -1

    def close_turn() -> None:
        if open_ids is not None:
            missing = [cid for cid in open_ids if cid not in answered]
            if missing:
                raise _Invalid(
                    f"An assistant message with 'tool_calls' (messages[{opened_at}]) must be "
                    "followed by tool messages responding to each 'tool_call_id'. The following "
                    f"tool_call_ids did not have response messages: {', '.join(missing)}",
                    f"messages.[{opened_at}].tool_calls",
                )

    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise _Invalid(
                f"Invalid 'messages[{i}]': expected an object with a string 'role'.",
                f"messages.[{i}]",
            )
        role = msg["role"]

        if role == "tool":
            call_id = msg.get("tool_call_id")
            if open_ids is None:
                raise _Invalid(
                    f"Invalid parameter: messages[{i}] with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            if call_id not in open_ids:
                raise _Invalid(
                    f"Invalid parameter: messages[{i}] with role 'tool' has tool_call_id "
                    f"{call_id!r}, which is not among the 'tool_calls' ids {open_ids} of "
                    f"messages[{opened_at}].",
                    f"messages.[{i}].tool_call_id",
                )
            answered.add(call_id)
            continue

        close_turn()
        open_ids, answered = None, set()

        tool_calls = msg.get("tool_calls") if role == "assistant" else None
        if tool_calls:
            if not isinstance(tool_calls, list):
                raise _Invalid(
                    f"Invalid 'messages[{i}].tool_calls': expected an array.",
                    f"messages.[{i}].tool_calls",
                )
            ids: list[str] = []
            for j, call in enumerate(tool_calls):
                where = f"messages[{i}].tool_calls[{j}]"
                if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                    raise _Invalid(
                        f"Invalid '{where}': expected an object with a string 'id'.",
                        f"messages.[{i}].tool_calls.[{j}]",
                    )
                fn = call.get("function")
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise _Invalid(
                        f"Invalid '{where}.function': expected an object with a string 'name'.",
                        f"messages.[{i}].tool_calls.[{j}].function",
                    )
                if not isinstance(fn.get("arguments"), str):
                    raise _Invalid(
                        f"Invalid type for '{where}.function.arguments': expected a string "
                        f"(JSON-encoded), but got {type(fn.get('arguments')).__name__}.",
                        f"messages.[{i}].tool_calls.[{j}].function.arguments",
                    )
                ids.append(call["id"])
            _check_reasoning(msg, i, require_reasoning_content)
            open_ids, opened_at = ids, i

    close_turn()


def _check_reasoning(msg: dict, i: int, require: str | bool | None) -> None:
    """Raise :class:`_Invalid` if assistant tool-call message ``messages[i]`` lacks
    the required ``reasoning_content`` (``require``: string to match exactly,
    ``True`` for any non-empty string, ``None``/``False`` for no requirement)."""
    if require is None or require is False:
        return
    got = msg.get("reasoning_content")
    ok = (isinstance(got, str) and bool(got)) if require is True else got == require
    if not ok:
        raise _Invalid(
            f"Missing `reasoning_content` field in the assistant message at messages[{i}]: "
            "in thinking mode, an assistant message with 'tool_calls' must pass back its "
            f"reasoning_content (got {got!r}).",
            f"messages.[{i}].reasoning_content",
        )


# --------------------------------------------------------------------------- #
# Non-streaming assembly
# --------------------------------------------------------------------------- #
def _assemble_completion(chunks: Iterable[Chunk], *, cid: str, model: str, created: int) -> dict:
    """Fold streamed chunks into one ``chat.completion`` object.

    Content / reasoning deltas are concatenated, tool-call fragments merged by
    ``index``, the last non-null ``finish_reason`` kept, and the last ``usage`` used.
    """
    choices: dict[int, dict] = {}
    usage = None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices") or []:
            idx = ch.get("index", 0)
            acc = choices.setdefault(
                idx, {"content": None, "reasoning": None, "tools": {}, "finish": None}
            )
            delta = ch.get("delta") or {}
            if delta.get("content") is not None:
                acc["content"] = (acc["content"] or "") + delta["content"]
            if delta.get("reasoning_content") is not None:
                acc["reasoning"] = (acc["reasoning"] or "") + delta["reasoning_content"]
            for frag in delta.get("tool_calls") or []:
                tc = acc["tools"].setdefault(
                    frag.get("index", 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if frag.get("id"):
                    tc["id"] = frag["id"]
                fn = frag.get("function") or {}
                tc["function"]["name"] += fn.get("name") or ""
                tc["function"]["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                acc["finish"] = ch["finish_reason"]

    out_choices = []
    for idx in sorted(choices):
        acc = choices[idx]
        message: dict[str, Any] = {"role": "assistant", "content": acc["content"], "refusal": None}
        if acc["reasoning"] is not None:
            message["reasoning_content"] = acc["reasoning"]
        if acc["tools"]:
            message["tool_calls"] = [acc["tools"][k] for k in sorted(acc["tools"])]
        out_choices.append(
            {
                "index": idx,
                "message": message,
                "finish_reason": acc["finish"] or "stop",
                "logprobs": None,
            }
        )
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": out_choices,
    }
    if usage is not None:
        body["usage"] = usage
    return body


# --------------------------------------------------------------------------- #
# HTTP (the server, writers and lifecycle are the shared loopback base)
# --------------------------------------------------------------------------- #
class _Handler(BaseHandler):
    server_version = "FakeOpenAI/1.0"

    def _send_error_json(
        self,
        status: int,
        message: str,
        err_type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict | None = None,
    ) -> None:
        self.send_json(status, _error_body(message, err_type, code, param), headers)

    def _send_event(self, payload: str) -> None:
        """One SSE event (``data: <payload>``) as one HTTP chunk (two with ``split_utf8``)."""
        self.send_chunk(f"data: {payload}\n\n".encode(), split_utf8=self.fake.split_utf8)

    # -- routing --------------------------------------------------------------
    def _authorized(self) -> bool:
        key = self.fake.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._send_error_json(
            401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
        )
        return False

    def do_GET(self) -> None:  # noqa: N802
        try:
            path = self.path_only
            if path.startswith("/v1/models") and not self._authorized():
                return
            if path == "/v1/models":
                self.send_json(
                    200,
                    {"object": "list", "data": [self.fake.model_obj(m) for m in self.fake.models]},
                )
            elif path.startswith("/v1/models/"):
                model = path[len("/v1/models/") :]
                if model in self.fake.models:
                    self.send_json(200, self.fake.model_obj(model))
                else:
                    self._send_error_json(
                        404,
                        f"The model '{model}' does not exist",
                        "invalid_request_error",
                        "model_not_found",
                        "model",
                    )
            else:
                self._not_found()
        except ConnectionDropped:
            self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802
        try:
            if self.path_only != "/v1/chat/completions":
                self.read_body()
                self._not_found()
                return
            self._chat_completions(self.read_json())
        except ConnectionDropped:
            self.close_connection = True

    def _not_found(self) -> None:
        self._send_error_json(
            404, f"Invalid URL ({self.command} {self.path})", "invalid_request_error", None
        )

    # -- chat completions -----------------------------------------------------
    def _chat_completions(self, body: Any) -> None:
        """``body``: the parsed (and already recorded) JSON of the request."""
        fake = self.fake
        if not self._authorized():
            return
        if not isinstance(body, dict):
            self._send_error_json(
                400,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                None,
            )
            return
        if fake.validate_history or fake.require_reasoning_content is not None:
            try:
                if fake.validate_history:
                    _validate_messages(body, fake.require_reasoning_content)
                else:
                    _validate_reasoning_only(body, fake.require_reasoning_content)
            except _Invalid as exc:
                self._send_error_json(400, exc.message, "invalid_request_error", None, exc.param)
                return

        n, scripted = fake.next_iteration()
        cid = f"chatcmpl-fake-{n}"
        model = body.get("model") if isinstance(body.get("model"), str) else fake.models[0]
        created = int(time.time())
        stream = bool(body.get("stream"))
        item = scripted.item
        if callable(item):  # a responder: the iteration made from the request (e.g. its max_tokens)
            item = item(body)

        if isinstance(item, Failure):
            self.send_json(
                item.status, item.error_body(), {"x-request-id": f"req-fake-{n}", **item.headers}
            )
            return

        dying = isinstance(item, DieAfter)
        raw_chunks = item.chunks if dying else item
        if scripted.raw:
            chunks = list(raw_chunks)
        else:
            base = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
            chunks = [{**base, **c} for c in raw_chunks]

        if not stream:
            if dying:
                self.die()
                return
            self.send_json(
                200,
                _assemble_completion(chunks, cid=cid, model=model, created=created),
                {"x-request-id": f"req-fake-{n}"},
            )
            return

        self.start_chunked("text/event-stream; charset=utf-8", {"x-request-id": f"req-fake-{n}"})
        if fake.first_token_delay_s:
            time.sleep(fake.first_token_delay_s)
        for i, chunk in enumerate(chunks):
            if i:
                fake.pause()
            try:
                self._send_event(chunk.text if isinstance(chunk, RawLine) else json.dumps(chunk))
            except ConnectionDropped:  # the client closed the stream before its end
                fake.streams_closed.append({"request": n, "chunks_sent": i, "chunks": len(chunks)})
                raise
        if dying:
            self.die()
            return
        if fake.send_done:
            if chunks:
                fake.pause()
            self._send_event("[DONE]")
        self.end_chunked()


def _validate_reasoning_only(body: dict, require: str | bool | None) -> None:
    """Apply only the ``reasoning_content`` rule (used when validate_history=False)."""
    messages = body.get("messages")
    for i, msg in enumerate(messages if isinstance(messages, list) else []):
        if isinstance(msg, dict) and msg.get("role") == "assistant" and msg.get("tool_calls"):
            _check_reasoning(msg, i, require)


# --------------------------------------------------------------------------- #
# The fake
# --------------------------------------------------------------------------- #
class FakeOpenAI(FakeServer):
    """A scripted OpenAI-compatible server on ``127.0.0.1:<random port>``.

    Parameters
    ----------
    iterations:
        ``list`` of iterations, consumed one per accepted ``POST
        /v1/chat/completions``.  Each is a ``list[dict]`` of chunks (``id``,
        ``object``, ``created``, ``model`` are added), a :class:`Failure`, or a
        :class:`DieAfter`.
    raw_iterations:
        Same, but chunks are sent exactly as given.  Queued after ``iterations``.
    api_key:
        Required ``Authorization: Bearer <api_key>``; ``None`` disables auth.
    models:
        Model ids served by ``GET /v1/models``.
    validate_history:
        Reject (400) requests whose ``messages`` break OpenAI's tool-call rules.
    send_done:
        Send ``data: [DONE]`` at the end of each stream.
    delay_s:
        Seconds to sleep between streamed chunks.
    first_token_delay_s:
        Seconds to sleep after the response headers, before the first streamed chunk (a
        large model's time to first token); 0 by default.
    require_reasoning_content:
        If a string ``S``: assistant messages with ``tool_calls`` must carry
        ``"reasoning_content": S`` (DeepSeek thinking mode), else 400.  ``True``
        accepts any non-empty string.
    tls, split_utf8:
        As for every loopback fake (:class:`tests.fakes._loopback.FakeServer`): serve
        HTTPS with ``(certfile, keyfile)``; cut each SSE event inside its first
        multibyte character across two network writes.

    Attributes
    ----------
    base_url:
        ``"http://127.0.0.1:PORT/v1"`` (available after :meth:`start`).
    requests:
        ``list[dict]``: JSON body of every ``POST /v1/chat/completions``, in
        arrival order, recorded *before* auth/validation.  A body that is not a
        JSON object is recorded as ``{"__invalid_json__": <text>}``.
    headers:
        ``list[dict[str, str]]``: the matching request headers, keys lowercased.
    server_errors:
        Exceptions raised inside handler threads (normally empty).
    streams_closed:
        ``list[dict]``: the streamed responses the client closed before their end,
        ``{"request": n, "chunks_sent", "chunks"}`` (n: the request's number, from 1).
    """

    handler = _Handler
    url_suffix = "/v1"
    name = "FakeOpenAI"

    def __init__(
        self,
        iterations: Sequence[Iteration] | None = None,
        *,
        raw_iterations: Sequence[Iteration] | None = None,
        api_key: str | None = "sk-test",
        models: Sequence[str] = ("fake-model",),
        validate_history: bool = True,
        send_done: bool = True,
        require_reasoning_content: str | bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(iterations, **kwargs)
        self.api_key = api_key
        self.models = tuple(models) or ("fake-model",)
        self.validate_history = validate_history
        self.send_done = send_done
        self.require_reasoning_content = require_reasoning_content
        self.first_token_delay_s = 0.0
        # Streams the client closed before their end: {"request": n, "chunks_sent", "chunks"}.
        self.streams_closed: list[dict] = []
        self.script_raw(*(raw_iterations or ()))

    # -- scripting ------------------------------------------------------------
    def script(self, *iterations: Iteration) -> None:
        """Append iterations (chunks get ``id``/``object``/``created``/``model`` added)."""
        super().script(*_wrap(iterations, raw=False))

    def script_raw(self, *iterations: Iteration) -> None:
        """Append iterations whose chunks are sent exactly as given."""
        super().script(*_wrap(iterations, raw=True))

    def fallback_iteration(self) -> _Scripted:
        return _Scripted(text_chunks(NO_MORE_SCRIPTED_RESPONSES), raw=False)

    @staticmethod
    def model_obj(model: str) -> dict:
        return {"id": model, "object": "model", "created": 0, "owned_by": "fake"}

    def __repr__(self) -> str:
        state = self._base_url or "stopped"
        return f"<FakeOpenAI {state} requests={len(self.requests)} remaining={self.remaining}>"


def _wrap(iterations: Iterable[Iteration], *, raw: bool) -> list[_Scripted]:
    items = []
    for it in iterations:
        if not isinstance(it, (list, tuple, Failure, DieAfter)) and not callable(it):
            raise TypeError(
                f"an iteration must be a list of chunk dicts, Failure, DieAfter or a responder, not {it!r}"
            )
        items.append(_Scripted(list(it) if isinstance(it, tuple) else it, raw))
    return items
