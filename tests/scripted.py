"""An in-process scripted model for loop, lifecycle and policy tests that need no HTTP.

``ScriptedModel`` is a provider adapter (``stream(request)``): each model request takes the
next scripted response — a list of provider-neutral events — and is recorded as the
``ChatRequest`` the loop built. Use the ``scripted_model`` fixture (tests/conftest.py),
which serves every run through it (an exception in a response is raised there)::

    scripted_model.script(calls(("c1", "note_write", {"text": "x"})), says("Done."))
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

from llm import ChatRequest, Finish, StreamedToolCall, TextDelta, Usage


class Pause:
    """In a scripted response: the model goes quiet for ``seconds`` (a slow first token, a
    stall mid-stream)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class WaitFor:
    """In a scripted response: the model goes quiet until ``condition()`` holds (polled; at
    most ``timeout_s``), e.g. until the heartbeat has saved the text so far."""

    def __init__(self, condition, timeout_s: float = 10.0) -> None:
        self.condition, self.timeout_s = condition, timeout_s


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
        self.by_question: dict[str, list[list]] = {}  # the latest user message → its responses
        self.requests: list[ChatRequest] = []
        self.streams_done = threading.Semaphore(0)  # released each time a response ended (sent or closed)
        self._lock = threading.Lock()

    def script(self, *responses: list) -> ScriptedModel:
        with self._lock:
            self.responses.extend(responses)
        return self

    def respond(self, question: str, *responses: list) -> ScriptedModel:
        """Responses for the runs whose latest user message is ``question`` (concurrent runs)."""
        with self._lock:
            self.by_question.setdefault(question, []).extend(responses)
        return self

    def stream(self, request: ChatRequest) -> Iterator:
        question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        with self._lock:
            self.requests.append(request)
            queue = self.by_question.get(question) or self.responses
            response = queue.pop(0) if queue else says("(the script has no more responses)")
        try:
            for event in response:
                if isinstance(event, Pause):
                    time.sleep(event.seconds)
                    continue
                if isinstance(event, WaitFor):
                    deadline = time.monotonic() + event.timeout_s
                    while not event.condition() and time.monotonic() < deadline:
                        time.sleep(0.02)
                    continue
                if isinstance(event, BaseException):  # an adapter's bug mid-stream
                    raise event
                yield event
        finally:  # sent whole, or closed by the loop (a cancel, a lost lease)
            self.streams_done.release()
