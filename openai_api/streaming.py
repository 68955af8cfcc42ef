"""What a ``/v1/chat/completions`` stream sends, from the run's events (no I/O).

:class:`StreamedAnswer` is fed every event of the run in order and returns the text to send
now. It keeps the text of each assistant message as the client has it (only messages that
carried text; the client sees them joined by ``"\\n\\n"``, each after the first with its
leading whitespace stripped — the same rule as the stored answer, ``Outcome.text``).

Two things the plain event stream does not get right on its own:

* **A lost attempt.** A worker that dies mid-answer leaves a ``message.completed`` with
  status ``truncated``, and the model is asked again: the new attempt's text starts from the
  beginning. It *replaces* the half answer: held back while it repeats what the client has,
  then only the rest is sent (seamless for a deterministic model). A new attempt that
  diverges, or completes shorter than what was sent, cannot be mended: :attr:`failed` becomes
  ``"answer_restarted"``. A ``truncated`` message that ends the run is a real truncation
  (output limit, broken stream) and ends the answer as usual.
* **A hole in the event log** (an ``error`` event with code ``events_missing``): from then on
  nothing more is sent; at the end :meth:`reconcile` continues the client's text from the
  stored answer (``Outcome.texts``), or :attr:`failed` becomes ``"events_missing"`` when the
  stored answer does not continue what was sent.
"""

from __future__ import annotations

SEPARATOR = "\n\n"
ANSWER_RESTARTED = "answer_restarted"
EVENTS_MISSING = "events_missing"


def failure_message(code: str, thread_id: str) -> str:
    """The error message of a stream that cannot go on (``code``: :data:`ANSWER_RESTARTED`
    or :data:`EVENTS_MISSING`)."""
    if code == ANSWER_RESTARTED:
        return ("The worker running this answer was lost and the model was asked again; its new answer differs "
                f"from the text already streamed. The whole answer will be in thread {thread_id}.")
    return ("Part of this answer's stream was lost and the stored answer does not continue the text sent. "
            f"The whole answer is in thread {thread_id}.")


class StreamedAnswer:
    """``answer.feed(event)`` → the text to send now (``""``: nothing). After each call check
    :attr:`failed` (``None``, ``"answer_restarted"``); at the run's end call
    :meth:`finish` then, if :attr:`hole`, :meth:`reconcile` with the stored texts."""

    def __init__(self) -> None:
        self.messages: list[str] = []  # per message, the text the client has (no separator)
        self.boundary = False  # a message ended: the next text starts a new message
        self.hole = False  # events_missing seen: send nothing more until reconcile()
        self.failed: str | None = None
        self._sent: list[str] = []
        self._replacing: int | None = None  # index of a truncated message a new attempt may replace
        self._retry: str | None = None  # the new attempt's text so far (None: not started)
        self._retried = False  # a new attempt completed truncated too (its text in _last_retry)
        self._last_retry = ""

    @property
    def text(self) -> str:
        """Everything sent so far, as the client has it."""
        return "".join(self._sent)

    def _send(self, text: str) -> str:
        if text:
            self._sent.append(text)
        return text

    def _as_shown(self, index: int, text: str) -> str:
        """A message's text as compared at ``index``: after the first, without leading
        whitespace (what the client is shown, and what it has)."""
        return text.lstrip() if index else text

    def feed(self, event: dict) -> str:
        if self.failed is not None or self.hole:
            return ""
        kind = event.get("type")
        if kind == "error" and event.get("code") == EVENTS_MISSING:
            self.hole = True
            return ""
        if kind == "text.delta" and event.get("delta"):
            return self._delta(event["delta"])
        if kind == "message.completed":
            self._completed(event.get("status"))
        return ""

    def _delta(self, delta: str) -> str:
        if self._replacing is not None:
            return self._retry_delta(delta)
        if self.boundary or not self.messages:
            self.boundary = False
            if self.messages:
                shown = delta.lstrip()
                self.messages.append(shown)
                return self._send(SEPARATOR + shown)
            self.messages.append(delta)
            return self._send(delta)
        self.messages[-1] += delta
        return self._send(delta)

    def _retry_delta(self, delta: str) -> str:
        index = self._replacing
        self._retry = (self._retry or "") + delta
        have, new = self._as_shown(index, self.messages[index]), self._as_shown(index, self._retry)
        if have.startswith(new):
            return ""  # the client has this already: hold it back
        if not new.startswith(have):
            self.failed = ANSWER_RESTARTED
            return ""
        rest = new[len(have):]
        self.messages[index] += rest
        self._replacing, self._retry, self._retried = None, None, False
        return self._send(rest)

    def _completed(self, status) -> None:
        if self._replacing is not None:
            index = self._replacing
            new = self._as_shown(index, self._retry or "")
            if status == "truncated":  # the new attempt was lost too (or truncated at the end)
                self._retry, self._retried, self._last_retry = None, True, new
                return
            if new != self._as_shown(index, self.messages[index]):  # complete, shorter than what was sent
                self.failed = ANSWER_RESTARTED
                return
            self._replacing, self._retry, self._retried = None, None, False
            self.boundary = True
            return
        if status == "truncated" and self.messages and not self.boundary:
            self._replacing = len(self.messages) - 1  # a lost attempt if another attempt follows
            return
        self.boundary = True

    def finish(self) -> None:
        """The run ended (or parked, or the wait ran out): a truncated message that nothing
        followed is a real truncation; a new attempt that was itself truncated must have
        repeated the client's text exactly."""
        if self._replacing is not None and self.failed is None and not self.hole:  # a hole: reconcile()
            index = self._replacing
            if self._retry is not None:
                new = self._as_shown(index, self._retry)
            elif self._retried:
                new = self._last_retry
            else:
                new = self._as_shown(index, self.messages[index])
            if new != self._as_shown(index, self.messages[index]):
                self.failed = ANSWER_RESTARTED
                return
            self._replacing, self._retry, self._retried = None, None, False
            self.boundary = True

    def reconcile(self, texts: list[str]) -> str:
        """After a hole: the text that completes the client's answer from the stored
        per-message ``texts`` (``Outcome.texts``), or ``""`` with :attr:`failed` set to
        ``"events_missing"`` when each message the client has is not the start of the stored
        message at the same index."""
        if self.failed is not None:
            return ""
        stored = [self._as_shown(n, t) for n, t in enumerate(texts)]
        have = [self._as_shown(n, t) for n, t in enumerate(self.messages)]
        if len(have) > len(stored) or any(not stored[n].startswith(h) for n, h in enumerate(have)):
            self.failed = EVENTS_MISSING
            return ""
        out: list[str] = []
        if have:
            last = len(have) - 1
            rest = stored[last][len(have[last]):]
            out.append(rest)
            self.messages[last] += rest
        for text in stored[len(self.messages):]:
            out.append(SEPARATOR + text if self.messages else text)
            self.messages.append(text)
        self.hole = False
        self._replacing, self._retry, self._retried = None, None, False
        self.boundary = True
        return self._send("".join(out))
