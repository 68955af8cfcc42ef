"""A member removed from the workspace mid-run stops receiving it over SSE and the ``/v1``
stream too, not only over the websocket (security review: 53 more SSE events over 10–13 s,
60 more ``/v1`` chunks over 9 s). Each stream ends with a clear terminal error —
SSE: an ``error`` event ``access_revoked``; ``/v1``: the OpenAI error chunk (the ``openai``
SDK raises it), then ``[DONE]`` — and the run goes on for its owner.

The platform runs as real processes in both modes (embedded: SQLite + the in-memory layer;
services: PostgreSQL + Redis + a Celery worker); an administrator removes the membership
through the Django admin, as one would, so the access-change notice is sent by the web
process. ``STREAM_ACCESS_RECHECK_S`` is the bound when no notice arrives
(``test_a_removal_the_web_process_never_hears_of_ends_the_stream_by_the_periodic_check``)."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import openai
import pytest

from tests.fakes.openai_server import text_chunks

from . import flows
from .harness import Platform, started_with_fake_model

RECHECK_S = 3.0  # STREAM_ACCESS_RECHECK_S for these platforms
NOTICE_BOUND_S = 2.0  # the access-change notice reaches the stream within this (one check)
LONG_TEXT = " ".join(f"w{n}" for n in range(300))  # 300 pieces × 0.2 s: a minute at most — released at the end


@pytest.fixture(scope="module", params=["embedded", "services"])
def platform(request, upstream):
    yield from started_with_fake_model(request.param, upstream, SSE_KEEPALIVE_S="1", STREAM_ACCESS_RECHECK_S=str(RECHECK_S), COMPAT_API_WAIT_S="120")


ALICE_IN_DEMO = ("SELECT m.id FROM chat_membership m JOIN auth_user u ON u.id = m.user_id "
                 "JOIN chat_workspace w ON w.id = m.workspace_id WHERE u.username = 'alice' AND w.slug = 'demo'")


def remove_in_admin(platform: Platform) -> float:
    """Delete alice's membership of ``demo`` through the Django admin (an administrator's
    session, CSRF and all); returns ``time.monotonic()`` when the deletion was answered."""
    [(pk,)] = platform.sql(ALICE_IN_DEMO)
    admin = flows.login_session(platform, "admin")
    try:
        url = f"/admin/chat/membership/{pk}/delete/"
        page = admin.get(url)
        assert page.status_code == 200, page.text[:500]
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        done = admin.post(url, data={"csrfmiddlewaretoken": csrf, "post": "yes"},
                          headers={"Referer": f"{platform.base_url}{url}"})
        removed_at = time.monotonic()
    finally:
        admin.close()
    assert done.status_code == 302, done.text[:500]
    return removed_at


def restore(platform: Platform) -> None:
    """Alice a member of ``demo`` again (as ``member``), straight in the database."""
    if platform.sql(ALICE_IN_DEMO):
        return
    platform.sql("INSERT INTO chat_membership (user_id, workspace_id, role_id, created_at) "
                 "SELECT u.id, w.id, r.id, CURRENT_TIMESTAMP FROM auth_user u, chat_workspace w, agents_role r "
                 "WHERE u.username = 'alice' AND w.slug = 'demo' AND r.name = 'member'")


def run_status(platform: Platform, token: str, run_id: str) -> str:
    with flows.http(platform, token) as client:
        response = client.get(f"/api/v1/runs/{run_id}/")
    assert response.status_code == 200, response.text
    return response.json()["status"]


def the_run_goes_on(platform: Platform, upstream, token: str, run_id: str) -> None:
    """Alice is a member again: her run was never cancelled and completes (the model's answer
    let go at once)."""
    restore(platform)
    upstream.release()
    flows.wait_for(lambda: run_status(platform, token, run_id) in ("completed", "failed", "cancelled"),
                   what="the run's end", timeout=90)
    assert run_status(platform, token, run_id) == "completed"


@pytest.fixture
def streaming(platform, upstream):
    """A long answer scripted; afterwards alice is a member again whatever the test did."""
    upstream.delay_s = 0.2
    upstream.script(text_chunks(LONG_TEXT, pieces=300))
    yield
    upstream.release()
    upstream.delay_s = 0.0
    restore(platform)


class Removal:
    """Removes alice's membership through the Django admin on a thread of its own, so the
    stream keeps being read (each item stamped as it arrives) while the administrator works."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.done_at: float | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        def remove() -> None:
            self.done_at = remove_in_admin(self.platform)

        self.thread = threading.Thread(target=remove, daemon=True)
        self.thread.start()

    def join(self) -> float:
        assert self.thread is not None
        self.thread.join(60)
        assert self.done_at is not None, "the removal did not finish"
        return self.done_at


def test_sse_of_a_removed_member_ends_with_access_revoked(platform, upstream, streaming):
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    with flows.http(platform, token) as client:
        started_run = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": "long, please"})
        assert started_run.status_code == 202, started_run.text
        run_id = started_run.json()["run_id"]
    events: list[tuple[float, dict]] = []  # (arrival, event)
    removal = Removal(platform)
    with flows.http(platform, token) as client, client.stream(
            "GET", f"/api/v1/runs/{run_id}/events/", timeout=httpx.Timeout(60)) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append((time.monotonic(), json.loads(line[len("data: "):])))
            if removal.thread is None and sum(e["type"] == "text.delta" for _t, e in events) == 3:
                removal.start()
        ended_at = time.monotonic()
    removed_at = removal.join()
    after = [e for t, e in events if t > removed_at]
    # The stream may end before the admin's response is back (the notice is faster than the
    # page's redirect): then nothing at all arrives "after" it.
    print(f"\n{platform.mode}: SSE ended {ended_at - removed_at:+.2f} s from the removal's answer, "
          f"{len(after)} events after it")
    last = events[-1][1]
    assert last["type"] == "error" and last["code"] == "access_revoked", [e for _t, e in events[-3:]]
    assert last["run_id"] == run_id and last["message"]
    assert not any(e["type"] in flows.TERMINAL for _t, e in events)  # cut off, not the run's end
    assert ended_at - removed_at < NOTICE_BOUND_S
    the_run_goes_on(platform, upstream, token, run_id)


def test_v1_stream_of_a_removed_member_ends_with_the_error_chunk(platform, upstream, streaming):
    token = flows.login_token(platform, "alice")
    client = openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=token, max_retries=0, timeout=60,
                           http_client=httpx.Client(trust_env=False))
    stream = client.chat.completions.create(model="openai", stream=True,
                                            messages=[{"role": "user", "content": "long, please"}])
    chunks: list[tuple[float, object]] = []
    removal, run_id = Removal(platform), None
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            run_id = chunk.id.removeprefix("chatcmpl-")
            chunks.append((time.monotonic(), chunk))
            if removal.thread is None and sum(bool(c.choices and c.choices[0].delta.content) for _t, c in chunks) == 3:
                removal.start()
    ended_at = time.monotonic()
    removed_at = removal.join()
    after = sum(t > removed_at for t, _c in chunks)
    print(f"\n{platform.mode}: /v1 stream ended {ended_at - removed_at:.2f} s after the removal committed, "
          f"{after} chunks after it, then the error chunk")
    assert raised.value.body["code"] == "access_revoked", raised.value.body
    assert "no longer have access" in raised.value.message
    assert ended_at - removed_at < NOTICE_BOUND_S
    assert not any(c.choices and c.choices[0].finish_reason for _t, c in chunks)  # no normal end
    the_run_goes_on(platform, upstream, token, run_id)


def test_a_removal_the_web_process_never_hears_of_ends_the_stream_by_the_periodic_check(platform, upstream, streaming):
    """The membership removed behind the web process's back (straight in the database, as
    another process or a restore would): no notice is sent, so the periodic re-check ends the
    stream, within ``STREAM_ACCESS_RECHECK_S`` plus a check."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    with flows.http(platform, token) as client:
        run_id = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": "long, please"}).json()["run_id"]
    events, removed_at = [], None
    with flows.http(platform, token) as client, client.stream(
            "GET", f"/api/v1/runs/{run_id}/events/", timeout=httpx.Timeout(60)) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
                if removed_at is None and sum(e["type"] == "text.delta" for e in events) == 3:
                    asked_at = time.monotonic()
                    platform.sql(f"DELETE FROM chat_membership WHERE id IN ({ALICE_IN_DEMO})")
                    removed_at = time.monotonic()
        ended_at = time.monotonic()
    print(f"\n{platform.mode}: SSE ended {ended_at - asked_at:.2f} s after a removal in the database "
          f"({removed_at - asked_at:.2f} s to commit it)")
    assert events[-1]["type"] == "error" and events[-1]["code"] == "access_revoked", events[-3:]
    assert not any(e["type"] in flows.TERMINAL for e in events)
    assert ended_at - asked_at < (removed_at - asked_at) + RECHECK_S + 1.0
    the_run_goes_on(platform, upstream, token, run_id)
