"""A small synchronous client for an agent's Runs API (the Hermes agent gateway's ``/v1/runs``).

Wire format (hermes-agent 0.19, ``gateway/platforms/api_server.py``), every call but
``/health`` with ``Authorization: Bearer <key>``:

* ``POST /v1/runs`` ``{input, conversation_history?, instructions?, session_id?}`` → 202
  ``{run_id, status}``.
* ``GET /v1/runs/{id}`` → ``{run_id, status, last_event, output?, usage?, error?}`` with
  status ``queued|running|waiting_for_approval|stopping|completed|failed|cancelled``; 404
  ``run_not_found`` once the gateway forgot the run (restart, or an hour after it ended).
* ``GET /v1/runs/{id}/events`` → SSE, ``data: {json}`` lines (key ``event``), ``:`` comment
  lines (``keepalive`` every 30 s, ``stream closed`` at the end). The stream carries **no
  event ids** and is a single queue: events are handed to whichever subscriber reads them,
  and the gateway drops the run's queue as soon as a subscriber's connection fails. A
  re-attached reader therefore may get 404 or an idle stream; the run's status is the source
  of truth (see :mod:`agents.agent_runs.backend`).
* ``POST /v1/runs/{id}/approval`` ``{choice: once|session|always|deny}`` → 200
  ``{choice, resolved}``; 409 ``approval_not_pending``/``approval_not_active`` when nothing
  waits (the agent timed out or moved on).
* ``POST /v1/runs/{id}/stop`` → ``{status: "stopping"}``; 404 when the run is not active.
* ``GET /health`` → ``{"status": "ok", "platform": "hermes-agent", ...}``;
  ``GET /v1/capabilities`` → ``{"object": "hermes.api_server.capabilities", "features": {...}}``.

Errors are raised as :class:`AgentRunsError` with a short ``code``: ``unreachable``,
``timeout``, ``auth`` (401/403), ``not_found`` (404), ``conflict`` (409), ``bad_response``
(anything else); ``message`` never contains the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from chatplatform.safe_input import storable

__all__ = ["AgentRunsClient", "AgentRunsError", "SSE_COMMENT"]

SSE_COMMENT = "comment"  # the pseudo-event yielded for ``:`` lines (keepalives)


class AgentRunsError(Exception):
    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass
class AgentRunsClient:
    """``base_url`` ends with ``/v1`` (``http://127.0.0.1:8642/v1``); ``/health`` is at the
    server root. Timeouts in seconds: ``connect_s`` for every call, ``read_s`` for calls
    that answer at once (the event stream has no read timeout: its reader is closed from
    outside)."""

    base_url: str
    api_key: str
    connect_s: float = 5.0
    read_s: float = 15.0

    @property
    def root_url(self) -> str:
        parts = urlsplit(self.base_url.rstrip("/"))
        path = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
        return f"{parts.scheme}://{parts.netloc}{path}"

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _timeout(self, read: float | None = None) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect_s, read=self.read_s if read is None else read,
                             write=self.connect_s, pool=self.connect_s)

    def _call(self, method: str, path: str, *, body: dict | None = None, root: bool = False) -> dict:
        url = (self.root_url if root else self.base_url.rstrip("/")) + path
        try:
            response = httpx.request(method, url, json=body, headers=self._headers(), timeout=self._timeout())
        except httpx.TimeoutException as exc:
            raise AgentRunsError("timeout", f"the agent did not answer in time ({method} {path})") from exc
        except httpx.HTTPError as exc:
            raise AgentRunsError("unreachable", f"the agent is unreachable at {self.root_url}: {_reason(exc)}") from exc
        return _json_or_raise(response, f"{method} {path}")

    # -- the Runs API ------------------------------------------------------------------------
    def start_run(self, *, input: str, conversation_history: list[dict], session_id: str = "",
                  instructions: str = "") -> str:
        """Start a remote run; returns its id (``run_…``)."""
        body: dict = {"input": input, "conversation_history": conversation_history}
        if session_id:
            body["session_id"] = session_id
        if instructions:
            body["instructions"] = instructions
        data = self._call("POST", "/runs", body=body)
        run_id = data.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise AgentRunsError("bad_response", "the agent accepted the run but sent no run_id")
        return run_id

    def get_run(self, run_id: str) -> dict:
        return self._call("GET", f"/runs/{run_id}")

    def approve(self, run_id: str, choice: str) -> dict:
        return self._call("POST", f"/runs/{run_id}/approval", body={"choice": choice})

    def stop(self, run_id: str) -> dict:
        return self._call("POST", f"/runs/{run_id}/stop", body={})

    def health(self) -> dict:
        return self._call("GET", "/health", root=True)

    def capabilities(self) -> dict:
        return self._call("GET", "/capabilities")

    def open_events(self, run_id: str) -> EventStream:
        """The run's SSE stream (raises :class:`AgentRunsError` when it cannot be opened)."""
        client = httpx.Client(timeout=self._timeout(read=None))
        try:
            request = client.build_request("GET", f"{self.base_url.rstrip('/')}/runs/{run_id}/events",
                                           headers={**self._headers(), "Accept": "text/event-stream"})
            response = client.send(request, stream=True)
        except httpx.HTTPError as exc:
            client.close()
            code = "timeout" if isinstance(exc, httpx.TimeoutException) else "unreachable"
            raise AgentRunsError(code, f"the agent's event stream could not be opened: {_reason(exc)}") from exc
        if response.status_code != 200:
            response.read()
            client.close()
            _json_or_raise(response, f"GET /runs/{run_id}/events")
        return EventStream(client, response)


class EventStream:
    """Iterate parsed SSE events (dicts with ``event``; ``{"event": "comment", "text"}`` for
    ``:`` lines). A line that is not JSON yields ``{"event": "malformed", "raw": line}``.
    Every string has its NUL characters replaced by U+FFFD (``safe_input.storable``). Ends when the server closes the stream; raises :class:`AgentRunsError`
    (``unreachable``) when the connection breaks. ``close()`` may be called from any thread."""

    def __init__(self, client: httpx.Client, response: httpx.Response) -> None:
        self._client = client
        self._response = response

    def __iter__(self) -> Iterator[dict]:
        data: list[str] = []
        try:
            for line in self._response.iter_lines():
                if line.startswith(":"):
                    yield {"event": SSE_COMMENT, "text": line[1:].strip()}
                    continue
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                    continue
                if line == "" and data:
                    raw = "\n".join(data)
                    data = []
                    try:
                        event = json.loads(raw)
                    except ValueError:
                        yield {"event": "malformed", "raw": storable(raw[:500])}
                        continue
                    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
                        yield {"event": "malformed", "raw": storable(raw[:500])}
                        continue
                    yield storable(event)  # NUL → U+FFFD: the agent's text is stored as it streams
                # other SSE fields (event:, id:, retry:) are not used by the agent
        except httpx.HTTPError as exc:
            raise AgentRunsError("unreachable", f"the agent's event stream broke: {_reason(exc)}") from exc

    def close(self) -> None:
        try:
            self._response.close()
        except Exception:  # noqa: BLE001 - closing from another thread may race the reader
            pass
        self._client.close()


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]


def _json_or_raise(response: httpx.Response, what: str) -> dict:
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code < 400:
        if not isinstance(data, dict):
            raise AgentRunsError("bad_response", f"{what}: the agent did not answer with a JSON object",
                                 status=response.status_code)
        return storable(data)
    detail = ""
    if isinstance(data, dict):
        err = data.get("error")
        detail = (err.get("message") if isinstance(err, dict) else err) or data.get("message") or ""
    detail = str(detail)[:300] or f"HTTP {response.status_code}"
    code = {401: "auth", 403: "auth", 404: "not_found", 409: "conflict"}.get(response.status_code, "bad_response")
    raise AgentRunsError(code, f"{what}: {detail} (HTTP {response.status_code})", status=response.status_code)
