"""Keep ``<think>…</think>`` reasoning off the answer channel, even when tags are split.

Some OpenAI-compatible servers put a reasoning model's thinking inside ``content``, with
the tags cut anywhere across chunks ("<thi", "nk>…</th", "ink>answer"). No fragment of a
tag or of the reasoning may reach a client, not even briefly (shared/cases/openai/05).
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def _held_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ThinkFilter:
    """Split streamed content into answer text and reasoning.

    ``prefilled=True`` is for models whose chat template opens the think block itself, so
    only ``</think>`` appears: content is held until the closing tag (it was reasoning) or
    the end of the stream (it was the answer). ``feed(text) -> (answer, reasoning)``;
    ``finish() -> (answer, reasoning)`` flushes what is held.
    """

    def __init__(self, *, prefilled: bool = False) -> None:
        self._state = "unconfirmed" if prefilled else "start"
        self._buffer = ""
        self._answer_started = False

    def feed(self, text: str) -> tuple[str, str]:
        self._buffer += text
        answer: list[str] = []
        reasoning: list[str] = []
        while self._buffer:
            if self._state in ("start", "unconfirmed"):
                stripped = self._buffer.lstrip()
                if stripped.startswith(OPEN):
                    self._buffer = stripped[len(OPEN):]
                    self._state = "inside"
                    continue
                if OPEN.startswith(stripped):  # could still become "<think>"
                    break
                if self._state == "unconfirmed":
                    idx = self._buffer.find(CLOSE)
                    if idx < 0:
                        break  # hold everything until </think> or the end
                    reasoning.append(self._buffer[:idx])
                    self._buffer = self._buffer[idx + len(CLOSE):]
                    self._state = "after"
                    continue
                self._state = "answer"
            elif self._state == "inside":
                idx = self._buffer.find(CLOSE)
                if idx >= 0:
                    reasoning.append(self._buffer[:idx])
                    self._buffer = self._buffer[idx + len(CLOSE):]
                    self._state = "after"
                    continue
                keep = _held_suffix(self._buffer, CLOSE)
                reasoning.append(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep:]
                break
            elif self._state == "after":
                stripped = self._buffer.lstrip()
                if not stripped:
                    self._buffer = ""
                    break
                self._buffer = stripped
                self._state = "answer"
            else:  # answer
                answer.append(self._buffer)
                self._buffer = ""
        return "".join(answer), "".join(reasoning)

    def finish(self) -> tuple[str, str]:
        rest, self._buffer = self._buffer, ""
        if self._state == "inside":
            return "", rest
        if self._state == "after":
            return rest.lstrip(), ""
        return rest, ""
