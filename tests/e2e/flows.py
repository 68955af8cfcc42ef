"""Client-side steps shared by the end-to-end tests: real HTTP (httpx) and real websockets.

Nothing here imports the application: the tests talk to the running processes only.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from .harness import Platform

QUESTION = "How does the with statement work?"
WITH_TOPIC_TITLE = "The with statement"
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
HTTP_TIMEOUT = 15.0
RUN_TIMEOUT = 60.0


def http(platform: Platform, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Token {token}"} if token else {}
    return httpx.Client(base_url=platform.base_url, headers=headers, timeout=HTTP_TIMEOUT, trust_env=False)


def login_token(platform: Platform, username: str) -> str:
    with http(platform) as client:
        r = client.post("/api/v1/auth/token/", json={"username": username, "password": platform.password})
    assert r.status_code == 200, r.text
    return r.json()["token"]


def sign_in_page(page, platform: Platform, username: str = "alice") -> None:
    """Sign ``page`` (a Playwright page of a context with the platform's ``base_url``) in
    through the real login form; it ends on the chat page."""
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", platform.password)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/chat/$"))


def login_session(platform: Platform, username: str) -> httpx.Client:
    """A cookie-holding client logged in through the real login form (CSRF and all)."""
    client = http(platform)
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    r = client.post("/accounts/login/", data={"username": username, "password": platform.password,
                                               "csrfmiddlewaretoken": csrf, "next": ""},
                    headers={"Referer": f"{platform.base_url}/accounts/login/"})
    assert r.status_code == 302, (r.status_code, r.text[:500])
    assert "sessionid" in client.cookies
    return client


def create_thread(platform: Platform, token: str, provider: str = "offline") -> str:
    with http(platform, token) as client:
        r = client.post("/api/v1/threads/", json={"workspace": "demo", "provider": provider})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def messages(platform: Platform, token: str, thread_id: str) -> list[dict]:
    with http(platform, token) as client:
        r = client.get(f"/api/v1/threads/{thread_id}/messages/")
    assert r.status_code == 200, r.text
    return r.json()


def ws_connect(platform: Platform, thread_id: str, *, token: str | None = None, origin: str | None = None,
               cookie: str | None = None) -> ClientConnection:
    headers = {}
    if token:
        headers["Authorization"] = f"Token {token}"
    if cookie:
        headers["Cookie"] = cookie
    return connect(platform.ws_url(thread_id), additional_headers=headers, origin=origin, proxy=None,
                   open_timeout=10, close_timeout=5, ping_interval=None)


def close_code(ws: ClientConnection, timeout: float = 10.0) -> int | None:
    """Wait for the server to close; the close code (frames received before are ignored)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ws.recv(timeout=max(0.01, deadline - time.monotonic()))
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else None
    except TimeoutError:
        return None
    return None


def recv_json(ws: ClientConnection, timeout: float = RUN_TIMEOUT) -> dict:
    return json.loads(ws.recv(timeout=timeout))


def send_and_read_deltas(ws: ClientConnection, content: str, deltas: int) -> tuple[list[dict], str]:
    """Send ``message.send`` and read frames until ``deltas`` text deltas came; returns the
    frames (``run.queued`` first) and the run's id."""
    ws.send(json.dumps({"type": "message.send", "content": content}))
    seen: list[dict] = []
    while sum(e.get("type") == "text.delta" for e in seen) < deltas:
        seen.append(recv_json(ws, timeout=30))
    return seen, next(e["run_id"] for e in seen if "seq" in e)


def events_until(ws: ClientConnection, predicate, timeout: float = 60.0) -> list[dict]:
    """Events from ``ws`` up to and including the first for which ``predicate`` is true;
    AssertionError (naming the types seen) after ``timeout`` seconds."""
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out.append(recv_json(ws, timeout=max(0.1, deadline - time.monotonic())))
        if predicate(out[-1]):
            return out
    raise AssertionError(f"timed out; saw {[e['type'] for e in out]}")


@dataclass
class Turn:
    events: list[dict] = field(default_factory=list)
    first_delta_ms: float | None = None
    total_ms: float = 0.0
    other_frames: list[dict] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.events[0]["run_id"]

    @property
    def text(self) -> str:
        return "".join(e["delta"] for e in self.events if e["type"] == "text.delta")

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]


def ws_turn(ws: ClientConnection, content: str, timeout: float = RUN_TIMEOUT) -> Turn:
    """Send ``message.send`` and collect this run's events until its terminal event."""
    turn = Turn()
    started = time.perf_counter()
    ws.send(json.dumps({"type": "message.send", "content": content}))
    deadline = time.monotonic() + timeout
    run_id = None
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no terminal event within {timeout} s; got {[e.get('type') for e in turn.events]}"
        frame = recv_json(ws, timeout=remaining)
        if "run_id" not in frame or "seq" not in frame:
            turn.other_frames.append(frame)  # e.g. a reply to the send, or an error
            assert frame.get("type") != "error", frame
            continue
        if run_id is None:
            run_id = frame["run_id"]
        if frame["run_id"] != run_id:
            continue
        if frame["type"] == "text.delta" and turn.first_delta_ms is None:
            turn.first_delta_ms = (time.perf_counter() - started) * 1000
        turn.events.append(frame)
        if frame["type"] in TERMINAL:
            turn.total_ms = (time.perf_counter() - started) * 1000
            return turn


def final_assistant(msgs: list[dict], run_id: str) -> dict:
    answers = [m for m in msgs if m["role"] == "assistant" and str(m["run_id"]) == str(run_id) and m["content"]]
    assert answers, f"no assistant answer for run {run_id}: {msgs}"
    return answers[-1]


def assert_quotes_with_topic(message: dict) -> None:
    """The answer draws on the Python reference's "The with statement" topic: the text names
    it, the citations list it, and it carries a quoted passage about ``with``. (Which of the
    with-related topics ranks first is retrieval tuning, not asserted here.)"""
    content = message["content"]
    assert "with" in content.lower()
    assert WITH_TOPIC_TITLE in content, content[:400]
    citations = message.get("citations") or []
    titles = [c.get("title", "") for c in citations]
    assert WITH_TOPIC_TITLE in titles, f"citations: {citations}"
    quoted = [ln for ln in content.splitlines() if ln.startswith("> ")]
    assert any("with" in ln for ln in quoted), content[:600]
    assert_citations_consistent(message)


def assert_citations_consistent(message: dict) -> None:
    """Citation numbers are unique, and every "**Title** [n]" in the answer names the title
    the citation list gives for [n] (the UI numbers its list by ``n``)."""
    citations = message.get("citations") or []
    numbers = [c.get("n") for c in citations]
    assert len(numbers) == len(set(numbers)), f"duplicate citation numbers: {citations}"
    by_n = {c.get("n"): c.get("title") for c in citations}
    for title, n in re.findall(r"\*\*([^*]+)\*\* \[(\d+)\]", message["content"]):
        assert by_n.get(int(n)) == title, f"answer cites **{title}** [{n}], the list has [{n}] = {by_n.get(int(n))!r}"


def assert_conversation(platform: Platform, token: str, thread_id: str, turn: Turn) -> dict:
    """The checks both modes share: gapless seq, the knowledge tool, the streamed text equals
    the stored answer, and the answer quotes the with-statement topic."""
    kinds = [e["type"] for e in turn.events]
    assert kinds[0] == "run.started", kinds
    assert kinds[-1] == "run.completed", (kinds, turn.events[-1])
    assert [e["seq"] for e in turn.events] == list(range(1, len(turn.events) + 1)), [e["seq"] for e in turn.events]
    assert {e["run_id"] for e in turn.events} == {turn.run_id}
    started = turn.of_type("tool.started")
    assert [e["name"] for e in started] == ["search_knowledge"], started
    completed = turn.of_type("tool.completed")
    assert completed and completed[0]["status"] == "succeeded" and not completed[0]["is_error"], completed
    assert kinds.index("tool.started") < kinds.index("tool.completed") < kinds.index("text.delta")
    assert turn.first_delta_ms is not None and turn.text
    msgs = messages(platform, token, thread_id)
    answer = final_assistant(msgs, turn.run_id)
    assert answer["status"] == "complete", answer
    assert turn.text == answer["content"]
    assert_quotes_with_topic(answer)
    assert turn.of_type("run.started")[0]["assistant_message_id"] in {m["id"] for m in msgs if m["role"] == "assistant"}
    return answer


def rest_turn(platform: Platform, token: str, thread_id: str, content: str = QUESTION,
              timeout: float = RUN_TIMEOUT) -> dict:
    """``POST …/runs/`` → 202, poll the run until it completes, return the stored answer."""
    with http(platform, token) as client:
        r = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": content})
        assert r.status_code == 202, r.text
        body = r.json()
        assert set(body) >= {"run_id", "user_message_id"}, body
        run_id = body["run_id"]
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            run = client.get(f"/api/v1/runs/{run_id}/")
            assert run.status_code == 200, run.text
            status = run.json()["status"]
            if status in ("completed", "failed", "cancelled", "interrupted"):
                break
            assert time.monotonic() < deadline, f"run {run_id} still {status} after {timeout} s"
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
        assert status == "completed", run.json()
    msgs = messages(platform, token, thread_id)
    assert any(m["id"] == body["user_message_id"] and m["role"] == "user" and m["content"] == content for m in msgs)
    answer = final_assistant(msgs, run_id)
    assert answer["status"] == "complete"
    assert_quotes_with_topic(answer)
    tool_rows = [c for m in msgs if str(m["run_id"]) == run_id for c in m["tool_calls"]]
    assert [(c["name"], c["status"]) for c in tool_rows] == [("search_knowledge", "succeeded")], tool_rows
    return answer


def run_rows(platform: Platform, ids: list[str], *fields: str) -> dict[str, list]:
    """``{run id: [field values]}`` of the runs ``ids``, read straight from the platform's
    database (``fields``: columns of ``agents_run``; default status only)."""
    fields = fields or ("status",)
    assert all(f.isidentifier() for f in fields), fields
    keys = [uuid.UUID(i).hex if platform.mode == "embedded" else uuid.UUID(i) for i in ids]  # SQLite: char(32)
    rows = platform.sql(f"SELECT id, {', '.join(fields)} FROM agents_run WHERE id IN ({', '.join(['%s'] * len(keys))})",
                        *keys) if keys else []
    return {str(uuid.UUID(str(row[0]))): list(row[1:]) for row in rows}


def wait_for(condition, what: str, timeout: float = 60.0):
    """Poll ``condition`` every 0.2 s until it returns something true (returned); fails with
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.2)
    return result
