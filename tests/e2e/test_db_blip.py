"""A database blip under a running turn (issue 17): PostgreSQL stopped for a few seconds
while a write tool runs. The tool's result is kept (not "outcome unknown"), the tool runs
once, the turn continues without a second upstream call for the round it was in, and the
run completes — the lifecycle's writes retry the lost connection (``chatplatform.db``).

The cluster is PRIVATE to this module (``initdb`` + ``pg_ctl`` on a free port); the shared
PostgreSQL is never stopped.
"""

from __future__ import annotations

import json
import time

import pytest
from websockets.sync.client import connect

from tests.fakes.openai_server import text_chunks, tool_call_chunks

from . import flows
from .harness import Platform, started

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def postgres(private_postgres):
    return private_postgres


@pytest.fixture(scope="module")
def platform(upstream, postgres, tmp_path_factory):
    ledger = tmp_path_factory.mktemp("blip") / "writes.txt"
    ledger.touch()
    env = {
        "EXTRA_TOOL_MODULES": "tests.e2e.kill_tools", "KILL_TEST_LEDGER": str(ledger),
        "OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
        # The blip (stop + ~3 s down + start) must stay inside the lease's fence on a loaded
        # machine: this test is about the retries, not the lease (tests/runs/test_durability).
        "RUN_LEASE_S": "40", "DB_RETRY_S": "30",
    }
    p = Platform("services", extra_env=env, pg_admin_dsn=postgres.admin_dsn, asgi_server="uvicorn",
                 pg_url_base=f"postgres://postgres@127.0.0.1:{postgres.port}")
    p.ledger = ledger
    yield from started(p)


def test_a_database_blip_during_a_write_tool_loses_nothing(platform, upstream, postgres):
    upstream.script(
        tool_call_chunks([("call_b", "slow_write", json.dumps({"text": "blip-proof", "seconds": 2}))]),
        text_chunks("Written once."),
    )
    before = len(upstream.requests)
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token, provider="openai")
    with flows.ws_connect(platform, thread_id, token=token) as ws:
        ws.send(json.dumps({"type": "message.send", "content": "write it"}))
        events = []
        while not any(e.get("type") == "tool.started" for e in events):
            events.append(flows.recv_json(ws, timeout=30))
        deadline = time.monotonic() + 10
        while "blip-proof" not in platform.ledger.read_text():
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.05)
        postgres.stop()  # fast shutdown: every connection of web and worker is cut
        time.sleep(3.0)  # the tool finishes while the database is down
        postgres.start()
        while events[-1].get("type") not in flows.TERMINAL:
            events.append(flows.recv_json(ws, timeout=90))
    assert events[-1]["type"] == "run.completed", ([e["type"] for e in events], platform.log_tail())
    completed = [e for e in events if e["type"] == "tool.completed"]
    assert len(completed) == 1 and completed[0]["status"] == "succeeded" and not completed[0]["is_error"], completed
    assert platform.ledger.read_text().count("blip-proof") == 1  # executed once
    assert len(upstream.requests) == before + 2  # the tool-call round and the answer: no repeat
    seqs = [e["seq"] for e in events if "seq" in e]
    assert seqs == list(range(1, len(seqs) + 1))
    msgs = flows.messages(platform, token, thread_id)
    assert msgs[-1]["content"] == "Written once." and msgs[-1]["status"] == "complete"
    tool_msgs = [m for m in msgs if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and not tool_msgs[0]["is_error"]


def test_pages_and_the_api_say_the_database_is_unreachable_then_serve_again(platform, postgres):
    """PostgreSQL down: a page answers 503 saying so (and reloads itself), not Django's bare 500;
    the API answers its JSON ``service_unavailable``; the page's websocket is closed 4503; once the server is back the next page and
    API call are served (each request here waits out ``DB_POOL_TIMEOUT_S`` first, so the
    outage lasts over 20 s; the pool's prompt reconnection itself: tests/test_services_dbpool)."""
    page = flows.login_session(platform, "alice")
    api = flows.http(platform, flows.login_token(platform, "alice"))
    chat = page.get("/chat/")
    assert chat.status_code == 200, chat.text[:300]
    thread_id = flows.create_thread(platform, flows.login_token(platform, "alice"))
    postgres.stop()
    try:
        down_page = page.get("/chat/")  # waits DB_POOL_TIMEOUT_S: the pool's attempts give up meanwhile
        down_api = api.get("/api/v1/threads/")  # known unreachable now: answered without waiting
        # The page's socket (session cookie): its session look-up finds no database before any
        # consumer runs — accepted and closed 4503 ("reconnecting…"), not a refused handshake.
        with connect(platform.ws_url(thread_id), additional_headers={"Cookie": f"sessionid={page.cookies['sessionid']}"},
                     origin=platform.base_url, proxy=None, open_timeout=30, close_timeout=5,
                     ping_interval=None) as ws:
            down_ws = flows.close_code(ws, timeout=30)
    finally:
        postgres.start()
    assert down_page.status_code == 503, (down_page.status_code, down_page.text[:300])
    assert down_page.headers["Retry-After"] == "5" and down_page.headers["Refresh"] == "5"
    assert "database or broker) is not reachable right now" in down_page.text
    assert down_api.status_code == 503 and down_api.headers["Retry-After"] == "5"
    assert down_api.json()["error"]["code"] == "service_unavailable"
    assert down_ws == 4503
    assert "PostgreSQL unreachable" in platform.log_tail()  # the requests after the first did not wait
    back = page.get("/chat/")
    assert back.status_code == 200, (back.status_code, back.text[:300], platform.log_tail())
    assert api.get("/api/v1/threads/").status_code == 200
