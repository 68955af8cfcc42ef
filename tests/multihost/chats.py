"""Chats through the load balancer that survive their web host: the e2e flows' websocket client
(``tests.e2e.flows``) plus what ``stream.js`` does after a lost socket — reconnect (through
``lb``, so to whichever web host is up) and ``run.resume`` after the last seq it handled.

A :class:`Chat` runs in a thread of its own so many stream at once while a test breaks hosts;
:func:`check_runs` holds each finished chat to the invariants every fault asserts.
"""

from __future__ import annotations

import json
import threading
import time

from websockets.exceptions import ConnectionClosed, InvalidHandshake

from tests.e2e import flows

SILENCE_S = 8.0  # no frame this long: the socket is taken for dead (the page's "nothing new for N s")


class Chat(threading.Thread):
    """Send ``content`` on a new thread of ``token``'s user and follow the run to its terminal
    event, reconnecting and resuming as often as needed within ``timeout`` seconds."""

    def __init__(self, cluster, token: str, content: str = "talk", *, timeout: float = 120.0,
                 provider: str = "openai") -> None:
        super().__init__(daemon=True)
        self.cluster, self.token, self.content, self.timeout = cluster, token, content, timeout
        self.thread_id = flows.create_thread(cluster, token, provider=provider)
        self.events: list[dict] = []  # the run's events (with seq), in the order received
        self.run_id: str | None = None
        self.reconnects = 0
        self.missing: list[tuple[int, int]] = []  # events_missing ranges the server told
        self.replayed = 0  # events the server sent again after a resume (ignored, as stream.js does)
        self.lost_at: float | None = None  # monotonic: the first lost socket
        self.resumed_at: float | None = None  # monotonic: the first event after a reconnect
        self.ended_at: float | None = None
        self.error: BaseException | None = None
        self.started_streaming = threading.Event()

    @property
    def last_seq(self) -> int:
        return self.events[-1]["seq"] if self.events else 0

    @property
    def text(self) -> str:
        return "".join(e["delta"] for e in self.events if e["type"] == "text.delta")

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1]["type"] in flows.TERMINAL

    def run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:  # noqa: BLE001 - reported by check_runs
            self.error = exc

    def _follow(self) -> None:
        deadline = time.monotonic() + self.timeout
        sent = False
        while not self.done:
            if time.monotonic() > deadline:
                raise AssertionError(f"run {self.run_id} not terminal within {self.timeout} s; "
                                     f"last {[e['type'] for e in self.events[-5:]]}")
            try:
                with flows.ws_connect(self.cluster, self.thread_id, token=self.token) as ws:
                    if not sent:
                        ws.send(json.dumps({"type": "message.send", "content": self.content}))
                        sent = True
                    elif self.run_id is not None:
                        ws.send(json.dumps({"type": "run.resume", "run_id": self.run_id, "after_seq": self.last_seq}))
                    else:  # lost before the first event: the thread's messages tell the run
                        self.run_id = self._run_from_thread()
                        if self.run_id is None:
                            raise AssertionError("the send was lost: no run on the thread")
                        ws.send(json.dumps({"type": "run.resume", "run_id": self.run_id, "after_seq": 0}))
                    while not self.done:
                        frame = json.loads(ws.recv(timeout=SILENCE_S))
                        if frame.get("type") == "error" and frame.get("code") == "events_missing":
                            # The page reloads the thread's messages (the stored answer) and goes on.
                            self.missing.append((frame["from_seq"], frame["to_seq"]))
                            continue
                        assert frame.get("type") != "error", frame
                        if "seq" not in frame or "run_id" not in frame:
                            continue
                        if self.run_id is None:
                            self.run_id = frame["run_id"]
                        if frame["run_id"] != self.run_id:
                            continue
                        if frame["seq"] <= self.last_seq:  # replayed on a resume: handled once already
                            self.replayed += 1
                            continue
                        if self.lost_at is not None and self.resumed_at is None:
                            self.resumed_at = time.monotonic()
                        self.events.append(frame)
                        if frame["type"] == "text.delta":
                            self.started_streaming.set()
                    self.ended_at = time.monotonic()
            except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError):
                if self.lost_at is None:
                    self.lost_at = time.monotonic()
                self.reconnects += 1
                time.sleep(0.3)  # the browser's reconnect backoff (jittered 0.5 × …): no busy loop

    def _run_from_thread(self) -> str | None:
        rows = self.cluster.sql("SELECT id::text FROM agents_run WHERE thread_id = %s ORDER BY created_at DESC LIMIT 1",
                                self.thread_id)
        return rows[0][0] if rows else None


def start_chats(cluster, token: str, n: int, **kwargs) -> list[Chat]:
    chats = [Chat(cluster, token, **kwargs) for _ in range(n)]
    for chat in chats:
        chat.start()
    return chats


def wait_streaming(chats: list[Chat], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for chat in chats:
        assert chat.started_streaming.wait(max(0.1, deadline - time.monotonic())), \
            f"a chat did not start streaming: {chat.error or [e['type'] for e in chat.events]}"


def check_runs(cluster, chats: list[Chat], timeout: float = 120.0, *, allow_missing: bool = False) -> dict:
    """Wait for every chat, then assert: the run is terminal (and ``completed``), its seqs came
    gapless and once each (1…N over every reconnect), and the streamed text is every word of
    the answers stored for the run — none lost, none twice. Returns ``{"lost_words",
    "duplicate_events", "reconnects", "runs", "statuses"}``."""
    for chat in chats:
        chat.join(timeout)
    lost_words = duplicates = missing_runs = missing_words = 0
    problems = []
    for chat in chats:
        if chat.is_alive() or chat.error:
            problems.append(f"chat {chat.thread_id}: {chat.error or 'still running'}")
            continue
        seqs = [e["seq"] for e in chat.events]
        duplicates += len(seqs) - len(set(seqs))
        told = {n for lo, hi in chat.missing for n in range(lo, hi + 1)}
        if chat.missing:
            missing_runs += 1
        if sorted(set(seqs) | told) != list(range(1, max(seqs + list(told) or [0]) + 1)):
            problems.append(f"run {chat.run_id}: seqs not gapless {seqs[:3]}…{seqs[-3:]} ({len(seqs)})")
        stored = "".join(m["content"] for m in flows.messages(cluster, chat.token, chat.thread_id)
                         if m["role"] == "assistant" and str(m["run_id"]) == chat.run_id)
        stored_words, streamed_words = stored.split(), chat.text.split()
        lost = sum(1 for w in stored_words if w not in streamed_words) + max(0, len(stored_words) - len(streamed_words))
        lost_words += lost
        if chat.missing:
            missing_words += lost
            continue
        if chat.text != stored:
            problems.append(f"run {chat.run_id}: streamed {len(streamed_words)} words, stored {len(stored_words)}")
    statuses = {}
    ids = [c.run_id for c in chats if c.run_id]
    for _run_id, (status,) in flows.run_rows(cluster, ids).items():
        statuses[status] = statuses.get(status, 0) + 1
    result = {"runs": len(chats), "statuses": statuses, "lost_words": lost_words, "duplicate_events": duplicates,
              "reconnects": sum(c.reconnects for c in chats)}
    if missing_runs:
        result["events_missing_runs"] = missing_runs
        result["words_only_in_reload"] = missing_words
        if not allow_missing:
            problems.append(f"{missing_runs} runs told events_missing ({missing_words} words only in the reload)")
    assert not problems, (problems, result)
    assert statuses == {"completed": len(chats)}, result
    return result
