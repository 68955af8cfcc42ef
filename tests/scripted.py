"""An in-process scripted model for loop, lifecycle and policy tests that need no HTTP.

``ScriptedModel`` is a provider adapter (``stream(request)``): each model request takes the
next scripted response — a list of provider-neutral events — and is recorded as the
``ChatRequest`` the loop built. Use the ``scripted_model`` fixture (tests/conftest.py),
which serves every run through it::

    scripted_model.script(calls(("c1", "note_write", {"text": "x"})), says("Done."))
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

from agents.providers import ChatRequest, Finish, StreamedToolCall, TextDelta, Usage


def says(text: str, *, pieces: int = 3) -> list:
    """A response that streams ``text`` in ``pieces`` deltas and stops."""
    step = max(1, len(text) // pieces)
    deltas = [TextDelta(text[i:i + step]) for i in range(0, len(text), step)]
    return [*deltas, Finish("stop", Usage(input_tokens=5, output_tokens=len(text.split())))]


def calls(*spec: tuple[str, str, dict | str]) -> list:
    """A response that asks for tool calls ``(call_id, name, arguments)``."""
    return [*(StreamedToolCall(cid, name, args if isinstance(args, str) else json.dumps(args))
              for cid, name, args in spec), Finish("tool_calls", Usage(input_tokens=5, output_tokens=1))]


class ScriptedModel:
    def __init__(self) -> None:
        self.responses: list[list] = []
        self.requests: list[ChatRequest] = []
        self.gate: threading.Event | None = None  # set: the next stream waits for it (mid-stream tests)
        self._lock = threading.Lock()

    def script(self, *responses: list) -> ScriptedModel:
        with self._lock:
            self.responses.extend(responses)
        return self

    def stream(self, request: ChatRequest) -> Iterator:
        with self._lock:
            self.requests.append(request)
            response = self.responses.pop(0) if self.responses else says("(the script has no more responses)")
        for n, event in enumerate(response):
            if n == 1 and self.gate is not None:
                self.gate.wait(30)
            yield event
