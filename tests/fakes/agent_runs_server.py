"""A scripted fake of an agent's Runs API (the Hermes gateway's ``/v1/runs``), real HTTP on
loopback, for the edge cases the real gateway cannot be made to produce on demand (a 409 on
approval, malformed events, a stream of keepalives only, a forgotten run).

Wire format as hermes-agent 0.19 speaks it (``gateway/platforms/api_server.py``): SSE lines
``data: {json}`` with keys ``event``, ``run_id``, ``timestamp``; comment lines ``: keepalive``
and ``: stream closed``; no event ids; the events of a run can be read **once** (a second
``GET …/events`` answers 404 ``run_not_found``, as the gateway does after its reader left).

Each ``POST /v1/runs`` takes the next scripted iteration, a list of steps:

* ``dict`` — an event (``run_id`` and ``timestamp`` are filled in); a terminal event
  (``run.completed``/``run.failed``/``run.cancelled``) also sets the run's status;
* :class:`Keepalive` — ``: keepalive``; :class:`Raw` — bytes sent as they are;
* :class:`Sleep` — a pause; :class:`Status` — set the pollable status without an event;
* :class:`AwaitApproval` — sends ``approval.request``, marks the run ``waiting_for_approval``
  and waits for ``POST …/approval`` (``timeout_s``: then it "times out" and moves on, and a
  late decision gets 409 ``approval_not_pending``);
* :class:`Hang` — keep the stream open (keepalives every ``every_s``) until the test ends.

Recorded: ``started`` (bodies of ``POST /v1/runs``), ``approvals`` (choices received),
``stops`` (run ids), plus ``requests``/``paths``/``headers`` of every request.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field

from ._loopback import BaseHandler, ConnectionDropped, FakeServer

__all__ = ["AwaitApproval", "FakeAgentRuns", "Hang", "Keepalive", "Raw", "Sleep", "Status"]


@dataclass
class Keepalive:
    pass


@dataclass
class Raw:
    data: bytes


@dataclass
class Sleep:
    seconds: float


@dataclass
class Status:
    status: str
    fields: dict = field(default_factory=dict)


@dataclass
class AwaitApproval:
    command: str
    description: str = "recursive delete"
    choices: tuple = ("once", "session", "always", "deny")
    timeout_s: float = 30.0


@dataclass
class Hang:
    every_s: float = 0.2


TERMINAL = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}


class _RemoteRun:
    def __init__(self, run_id: str, steps: list) -> None:
        self.run_id = run_id
        self.steps = steps
        self.status: dict = {"object": "hermes.run", "run_id": run_id, "status": "queued"}
        self.events_read = False
        self.approval = threading.Event()
        self.waiting = False
        self.stopped = threading.Event()


class _Handler(BaseHandler):
    server_version = "FakeAgentRuns/1.0"

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.fake.api_key}":
            return True
        self.send_json(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error",
                                       "code": "invalid_api_key"}})
        return False

    def _not_found(self, run_id: str) -> None:
        self.send_json(404, {"error": {"message": f"Run not found: {run_id}", "type": "invalid_request_error",
                                       "code": "run_not_found"}})

    def do_GET(self) -> None:  # noqa: N802
        fake = self.fake
        path = self.path_only
        fake.record(path, {}, self.lower_headers())
        try:
            if path == "/health":
                self.send_json(200, {"status": "ok", "platform": "hermes-agent"})
                return
            if not self._authorized():
                return
            if path == "/v1/capabilities":
                self.send_json(200, {"object": "hermes.api_server.capabilities", "features": dict(fake.features)})
                return
            parts = path.split("/")  # ['', 'v1', 'runs', id, ('events')]
            if len(parts) >= 4 and parts[2] == "runs":
                run = fake.runs.get(parts[3])
                if run is None or fake.forget:
                    self._not_found(parts[3])
                elif len(parts) == 4:
                    self.send_json(200, dict(run.status))
                elif parts[4] == "events":
                    if run.events_read:
                        self._not_found(run.run_id)
                    else:
                        run.events_read = True
                        self._stream(run)
                return
            self.send_json(404, {"error": {"message": "not found"}})
        except ConnectionDropped:
            self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802
        fake = self.fake
        path = self.path_only
        raw = self.read_body()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        fake.record(path, body, self.lower_headers())
        try:
            if not self._authorized():
                return
            parts = path.split("/")
            if path == "/v1/runs":
                run_id = f"run_{uuid.uuid4().hex}"
                _n, steps = fake.next_iteration()
                run = _RemoteRun(run_id, list(steps))
                fake.runs[run_id] = run
                fake.started.append(body)
                self.send_json(202, {"run_id": run_id, "status": "started"})
                return
            run = fake.runs.get(parts[3]) if len(parts) >= 5 else None
            if run is None:
                self._not_found(parts[3] if len(parts) > 3 else "")
                return
            if parts[4] == "approval":
                fake.approvals.append(body.get("choice"))
                if not run.waiting:
                    self.send_json(409, {"error": {"message": f"Run has no pending approval: {run.run_id}",
                                                   "code": "approval_not_pending"}})
                    return
                run.decision = body.get("choice")
                run.waiting = False
                run.approval.set()
                self.send_json(200, {"object": "hermes.run.approval_response", "run_id": run.run_id,
                                     "choice": body.get("choice"), "resolved": 1})
            elif parts[4] == "stop":
                fake.stops.append(run.run_id)
                run.stopped.set()
                run.approval.set()
                self.send_json(200, {"run_id": run.run_id, "status": "stopping"})
        except ConnectionDropped:
            self.close_connection = True

    # -- the event stream ---------------------------------------------------------------
    def _event(self, run: _RemoteRun, event: dict) -> None:
        payload = {**event, "run_id": run.run_id, "timestamp": time.time()}
        self.send_chunk(f"data: {json.dumps(payload)}\n\n".encode())
        terminal = TERMINAL.get(event.get("event"))
        if terminal:
            run.status.update({"status": terminal, "last_event": event["event"],
                               **{k: v for k, v in event.items() if k in ("output", "usage", "error")}})

    def _stream(self, run: _RemoteRun) -> None:
        self.start_chunked("text/event-stream")
        run.status["status"] = "running"
        for step in run.steps:
            if run.stopped.is_set():
                self._event(run, {"event": "run.cancelled"})
                break
            if isinstance(step, dict):
                self._event(run, step)
            elif isinstance(step, Keepalive):
                self.send_chunk(b": keepalive\n\n")
            elif isinstance(step, Raw):
                self.send_chunk(step.data)
            elif isinstance(step, Sleep):
                run.stopped.wait(step.seconds)
            elif isinstance(step, Status):
                run.status.update({"status": step.status, **step.fields})
            elif isinstance(step, AwaitApproval):
                run.waiting = True
                run.status["status"] = "waiting_for_approval"
                self._event(run, {"event": "approval.request", "command": step.command,
                                  "pattern_key": step.description, "description": step.description,
                                  "choices": list(step.choices)})
                decided = run.approval.wait(step.timeout_s)
                run.waiting = False
                run.status["status"] = "running"
                if decided and not run.stopped.is_set():
                    self._event(run, {"event": "approval.responded", "choice": run.decision, "resolved": 1})
            elif isinstance(step, Hang):
                while not self.fake.closing.is_set() and not run.stopped.is_set():
                    if self.fake.drop.is_set():  # the gateway went away mid-stream
                        self.die()
                        return
                    self.send_chunk(b": keepalive\n\n")
                    time.sleep(step.every_s)
                if run.stopped.is_set():
                    self._event(run, {"event": "run.cancelled"})
                    break
        self.send_chunk(b": stream closed\n\n")
        self.end_chunked()


class FakeAgentRuns(FakeServer):
    """``base_url`` is ``http://127.0.0.1:PORT/v1``. ``features`` is what ``/v1/capabilities``
    offers; ``forget = True`` makes every run unknown (404), as after a gateway restart;
    ``drop.set()`` cuts the streams that are hanging."""

    handler = _Handler
    url_suffix = "/v1"
    name = "FakeAgentRuns"

    def __init__(self, iterations=None, *, api_key: str = "agent-key-0123456789") -> None:
        super().__init__(iterations)
        self.api_key = api_key
        self.runs: dict[str, _RemoteRun] = {}
        self.started: list[dict] = []
        self.approvals: list[str] = []
        self.stops: list[str] = []
        self.forget = False
        self.closing = threading.Event()
        self.drop = threading.Event()  # set: open streams are cut (no terminal event)
        self.features = {"run_submission": True, "run_status": True, "run_events_sse": True, "run_stop": True,
                         "run_approval_response": True, "approval_events": True}

    def fallback_iteration(self):
        return [{"event": "run.completed", "output": "(no more scripted runs)", "usage": {}}]

    def stop(self) -> None:
        self.closing.set()
        for run in self.runs.values():
            run.stopped.set()
            run.approval.set()
        super().stop()
