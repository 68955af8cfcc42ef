"""Per-subscriber ordering of run events: no gap, no duplicate (DESIGN §7; issue: streams).

A :class:`RunStreamCursor` sits between the channel-layer group (live events, which a slow
client may miss if the layer drops them) and one client (a websocket or an SSE response).
For each run it remembers the last seq delivered and:

* drops a live event it already delivered (after a replay);
* fills a gap (live seq > last + 1) from the event log before delivering;
* on the first event of a run seen mid-way (a second tab, a reconnect), replays the run
  from seq 1 so the client gets the text so far;
* when the log no longer has the missing events, yields an ``error`` event with code
  ``events_missing`` so the client reloads the thread's messages (the database is the truth).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from chatplatform.event_log import event_log

from .event_types import TERMINAL_TYPES
from .metrics import EVENTS_FILLED


class RunStreamCursor:
    """``await cursor.accept(event)`` → the events to send now, in order."""

    def __init__(self, *, reader: Callable[[str, int], Awaitable[list[dict]]] | None = None) -> None:
        self.delivered: dict[str, int] = {}
        self._finished: set[str] = set()
        self._read = reader or (lambda run_id, after: event_log().read(run_id, after))

    async def resume(self, run_id: str, after_seq: int) -> list[dict]:
        """Everything logged for ``run_id`` after ``after_seq``: the client says what it has,
        and an explicit resume is honoured even if this cursor sent some of it before. A hole
        in the log (events it gave up while Redis was away) is an ``events_missing`` in its
        place, never a silent jump."""
        self.delivered[run_id] = after_seq
        out = self._take_logged(run_id, await self._read(run_id, after_seq))
        EVENTS_FILLED.labels("replay").inc(len(out))
        return out

    async def catch_up(self, run_id: str) -> list[dict]:
        """Whatever the log holds after what was delivered: for a subscriber whose layer
        dropped a run's *last* events (no later live event would reveal the gap)."""
        out = self._take_logged(run_id, await self._read(run_id, self.delivered.get(run_id, 0)))
        EVENTS_FILLED.labels("gap").inc(len(out))
        return out

    def finished(self, run_id: str) -> bool:
        return run_id in self._finished

    async def accept(self, event: dict) -> list[dict]:
        run_id, seq = str(event["run_id"]), int(event["seq"])
        last = self.delivered.get(run_id, 0)
        if seq <= last:
            return []  # already delivered (by a replay or a duplicate)
        out: list[dict] = []
        if seq > last + 1:
            out = self._take_logged(run_id, [e for e in await self._read(run_id, last) if e["seq"] < seq])
            EVENTS_FILLED.labels("replay" if last == 0 else "gap").inc(len(out))
            out.extend(self._missing(run_id, seq))
        out.extend(self._take(event))
        return out

    def _take_logged(self, run_id: str, events: list[dict]) -> list[dict]:
        """Logged ``events`` (in seq order) to deliver, each hole before one of them reported
        as ``events_missing`` first."""
        out: list[dict] = []
        for event in events:
            out.extend(self._missing(run_id, int(event["seq"])))
            out.extend(self._take(event))
        return out

    def _missing(self, run_id: str, seq: int) -> list[dict]:
        """An ``events_missing`` error when the events between what was delivered and ``seq``
        are not there (``[]`` when ``seq`` follows on): the client reloads the thread's messages."""
        first = self.delivered.get(run_id, 0) + 1
        if seq <= first:
            return []
        EVENTS_FILLED.labels("missing").inc(seq - first)
        return [{
            "type": "error", "run_id": run_id, "code": "events_missing",
            "message": f"Events {first}–{seq - 1} of this run are no longer available; reload the thread's messages.",
            "from_seq": first, "to_seq": seq - 1,
        }]

    def _take(self, event: dict) -> list[dict]:
        run_id, seq = str(event["run_id"]), int(event["seq"])
        if seq <= self.delivered.get(run_id, 0):
            return []
        self.delivered[run_id] = seq
        if event["type"] in TERMINAL_TYPES:
            self._finished.add(run_id)
        return [event]


def shown_text(events: list[dict]) -> str:
    """The text a live client shows for a run's last message, from the run's events in order:
    the ``text.delta`` deltas after the last ``message.completed`` (where the chat page starts a
    turn's text anew: a round's end, or an attempt's half answer closed), joined."""
    pieces: list[str] = []
    for event in events:
        if event.get("type") == "message.completed":
            pieces = []
        elif event.get("type") == "text.delta":
            pieces.append(str(event.get("delta") or ""))
    return "".join(pieces)


def fill_from_log(run_id, saved: str, *, timeout_s: float = 5.0) -> str:
    """The text to keep for ``run_id``'s last message when its worker was lost: what live
    clients were shown (:func:`shown_text` over the event log) when that continues ``saved``
    (the text the lease heartbeat last stored, up to ``STREAM_PERSIST_INTERVAL_S`` older — or
    much older when the database was unreachable while the model kept streaming), else
    ``saved``. The log is read on the publisher loop (sync callers only); a log that cannot
    be read, has expired or does not continue ``saved`` leaves ``saved`` as it is."""
    from chatplatform.loops import run_coroutine

    try:
        events = run_coroutine(event_log().read(str(run_id), 0), timeout=timeout_s)
    except Exception:  # noqa: BLE001 — the stored text stays; the log is an improvement only
        import logging

        logging.getLogger(__name__).warning("run %s: could not read the event log to fill its text", run_id,
                                            exc_info=True)
        return saved
    shown = shown_text(events)
    return shown if len(shown) > len(saved) and shown.startswith(saved) else saved
