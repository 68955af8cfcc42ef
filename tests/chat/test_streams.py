"""Streams that never lose a word: event log replay, SSE with Last-Event-ID, websocket
resume, mid-run second tabs, gap filling, disconnects (issue: streams; DESIGN §7)."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient
from rest_framework.authtoken.models import Token

from agents.models import Run
from agents.replay import RunStreamCursor
from agents.services import run_create
from chat.models import Message
from chatplatform import loops
from chatplatform.event_log import MemoryEventLog
from config.asgi import application
from knowledge.services import knowledge_item_create
from tests.conftest import joined_text, make_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread(users, workspaces, offline):
    knowledge_item_create(workspace=workspaces["demo"], owner=users["admin"], title="The with statement",
                          content="The with statement wraps a block with a context manager. " * 5)
    return make_thread(users["alice"], workspaces["demo"], offline)


@pytest.fixture
def keys(users):
    return {name: Token.objects.get_or_create(user=u)[0].key for name, u in users.items()}


def parse_sse(text: str) -> list[dict]:
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "data" in lines:
            event = json.loads(lines["data"])
            assert int(lines["id"]) == event["seq"] and lines["event"] == event["type"]
            events.append(event)
    return events


async def read_stream(response) -> str:
    chunks = []
    async for chunk in response.streaming_content:
        chunks.append(chunk.decode() if isinstance(chunk, bytes) else chunk)
    return "".join(chunks)


# --- the cursor alone ---------------------------------------------------------------------
def ev(seq, run="r"):
    return {"type": "text.delta", "run_id": run, "seq": seq, "delta": str(seq)}


async def test_cursor_fills_gaps_from_the_log_and_drops_duplicates():
    log = MemoryEventLog(max_runs=10, ttl_s=60)
    for n in range(1, 8):
        await log.append("r", ev(n))
    cursor = RunStreamCursor(reader=log.read)
    assert [e["seq"] for e in await cursor.accept(ev(1))] == [1]
    assert [e["seq"] for e in await cursor.accept(ev(4))] == [2, 3, 4]  # 2 and 3 were dropped by the layer
    assert await cursor.accept(ev(3)) == []  # late duplicate
    assert [e["seq"] for e in await cursor.resume("r", 2)] == [3, 4, 5, 6, 7]  # honoured as asked
    assert await cursor.accept(ev(6)) == []


async def test_cursor_replays_a_run_first_seen_midway_and_reports_what_is_lost():
    log = MemoryEventLog(max_runs=10, ttl_s=60)
    for n in (1, 2, 3):
        await log.append("r", ev(n))
    cursor = RunStreamCursor(reader=log.read)
    assert [e["seq"] for e in await cursor.accept(ev(4))] == [1, 2, 3, 4]
    empty = RunStreamCursor(reader=MemoryEventLog(max_runs=1, ttl_s=60).read)
    out = await empty.accept(ev(9))
    assert out[0]["type"] == "error" and out[0]["code"] == "events_missing"
    assert (out[0]["from_seq"], out[0]["to_seq"]) == (1, 8) and out[1]["seq"] == 9


async def test_cursor_reports_a_hole_inside_the_log_instead_of_jumping_it():
    """The log gave up seqs 4–6 (Redis away past ``EVENTS_LOG_RETRY_S``) and logged 7 on: a
    resume, a catch-up or a gap fill says ``events_missing`` 4–6 where the hole is — found in a
    trial, the page jumped from word 31 to word 382 and said nothing until the run ended."""
    log = MemoryEventLog(max_runs=10, ttl_s=60)
    for n in (1, 2, 3, 7, 8, 9):
        await log.append("r", ev(n))

    def shape(out):
        return [e["seq"] if e["type"] == "text.delta" else (e["code"], e["from_seq"], e["to_seq"]) for e in out]

    hole = ("events_missing", 4, 6)
    assert shape(await RunStreamCursor(reader=log.read).resume("r", 2)) == [3, hole, 7, 8, 9]
    caught = RunStreamCursor(reader=log.read)
    assert shape(await caught.accept(ev(1))) == [1]
    assert shape(await caught.catch_up("r")) == [2, 3, hole, 7, 8, 9]
    live = RunStreamCursor(reader=log.read)
    assert shape(await live.accept(ev(2))) == [1, 2]
    assert shape(await live.accept(ev(10))) == [3, hole, 7, 8, 9, 10]
    assert shape(await live.accept(ev(11))) == [11]


# --- SSE ----------------------------------------------------------------------------------
def finished_run(thread, user, converse):
    run, events = converse(thread, user, "How does the with statement work?")
    return run, events


def test_sse_replays_a_finished_run_and_resumes_after_last_event_id(thread, users, keys, converse):
    run, live = finished_run(thread, users["alice"], converse)

    async def go():
        client = AsyncClient()
        full = parse_sse(await read_stream(await client.get(
            f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Token {keys['alice']}"})))
        resumed = parse_sse(await read_stream(await client.get(
            f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Token {keys['alice']}", "Last-Event-ID": "3"})))
        return full, resumed

    full, resumed = asyncio.run(go())
    assert full == live
    assert [e["seq"] for e in resumed] == [e["seq"] for e in live if e["seq"] > 3]
    assert resumed[-1]["type"] == "run.completed"


def test_sse_streams_a_live_run_to_its_end(thread, users, keys, settings):
    # The live path, not the log fallback: the events are published on this loop (as on a web
    # server's, bound by config.loop_binding) and the keep-alive that would catch up from the
    # log comes only after the test's limit.
    settings.OFFLINE_DELTA_DELAY_S = 0.005
    settings.SSE_KEEPALIVE_S = 120

    async def go():
        saved = loops._server_loop
        loops.bind_server_loop(asyncio.get_running_loop())
        try:
            created = await sync_to_async(run_create)(thread=thread, user=users["alice"], content="with statement")
            response = await AsyncClient().get(f"/api/v1/runs/{created.run.pk}/events/",
                                               headers={"Authorization": f"Token {keys['alice']}"})
            assert response["Content-Type"] == "text/event-stream"
            return created, parse_sse(await read_stream(response))
        finally:
            loops._server_loop = saved

    created, events = asyncio.run(asyncio.wait_for(go(), 20))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert joined_text(events) == final.content
    assert events[-1]["type"] == "run.completed"


def test_sse_of_someone_elses_run_is_404(thread, users, keys, converse):
    run, _ = finished_run(thread, users["alice"], converse)

    async def go():
        client = AsyncClient()
        foreign = await client.get(f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Token {keys['bob']}"})
        anonymous = await client.get(f"/api/v1/runs/{run.pk}/events/")
        bad = await client.get(f"/api/v1/runs/{run.pk}/events/",
                               headers={"Authorization": f"Token {keys['alice']}", "Last-Event-ID": "x"})
        return foreign, anonymous, bad

    foreign, anonymous, bad = asyncio.run(go())
    assert foreign.status_code == 404 and json.loads(foreign.content)["error"]["code"] == "not_found"
    assert anonymous.status_code == 401
    assert bad.status_code == 400


# --- websocket ----------------------------------------------------------------------------
async def ws(thread_id, key):
    comm = WebsocketCommunicator(application, f"/ws/threads/{thread_id}/",
                                 headers=[(b"authorization", f"Token {key}".encode())])
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


async def collect_until(comm, types_, timeout=20):
    out = []
    while True:
        event = await comm.receive_json_from(timeout=timeout)
        out.append(event)
        if event["type"] in types_:
            return out


def test_websocket_resume_after_seq_gets_exactly_the_missed_events(thread, users, keys, converse):
    run, live = finished_run(thread, users["alice"], converse)

    async def go():
        comm = await ws(thread.pk, keys["alice"])
        await comm.send_json_to({"type": "run.resume", "run_id": str(run.pk), "after_seq": 2})
        got = await collect_until(comm, {"run.completed"})
        await comm.send_json_to({"type": "run.resume", "run_id": str(run.pk), "after_seq": 0})
        again = await collect_until(comm, {"run.completed"}, timeout=5)
        await comm.disconnect()
        return got, again

    got, again = asyncio.run(go())
    assert got == [e for e in live if e["seq"] > 2]
    assert again == live  # the client said it has nothing: everything, once


def test_second_tab_opening_mid_run_gets_the_text_so_far(thread, users, keys, settings):
    settings.OFFLINE_DELTA_DELAY_S = 0.01

    async def go():
        first = await ws(thread.pk, keys["alice"])
        await first.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
        early = await collect_until(first, {"text.delta"})
        second = await ws(thread.pk, keys["alice"])
        a = early + await collect_until(first, {"run.completed"})
        b = await collect_until(second, {"run.completed"})
        await first.disconnect()
        await second.disconnect()
        return a, b

    a, b = asyncio.run(go())
    assert a[0]["type"] == "run.queued"  # the reply to the first tab's send: not a run event
    assert b == a[1:]  # the late tab got seq 1.. (replayed) then the live rest, no gap, no duplicate
    assert [e["seq"] for e in b] == list(range(1, len(b) + 1))


def test_client_leaving_mid_run_does_not_stop_it(thread, users, keys, settings):
    """shared/cases/platform/03: the run continues and the full answer is persisted."""
    settings.OFFLINE_DELTA_DELAY_S = 0.01

    async def go():
        comm = await ws(thread.pk, keys["alice"])
        await comm.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
        await collect_until(comm, {"text.delta"})
        await comm.disconnect()

    asyncio.run(go())
    import time

    deadline = time.monotonic() + 20
    while Run.objects.filter(thread=thread).exclude(status="completed").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert final.status == "complete" and "context manager" in final.content and final.usage


def test_logged_out_socket_stops_receiving(thread, users, keys, converse):
    async def go():
        comm = await ws(thread.pk, keys["alice"])
        await sync_to_async(Token.objects.filter(user=users["alice"]).delete)()
        await sync_to_async(run_create)(thread=thread, user=users["alice"], content="with statement")
        closed = await comm.receive_output(timeout=10)
        await comm.disconnect()
        return closed

    closed = asyncio.run(go())
    assert closed == {"type": "websocket.close", "code": 4403}


def test_rate_limits_answer_429_with_retry_after(thread, users, settings, converse, api_for):
    from django.core.cache import cache

    cache.clear()
    settings.RUN_RATE_LIMIT = "1/3600"  # a long window: the test never straddles two
    client = api_for(users["alice"])
    url = f"/api/v1/threads/{thread.pk}/runs/"
    run, _ = converse(thread, users["alice"], "one")  # counts, and is finished before the next send
    assert run.status == "completed"
    second = client.post(url, {"content": "two"}, format="json")
    assert second.status_code == 429 and second.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(second["Retry-After"]) <= 3600


def test_a_resume_past_the_runs_last_event_does_not_mute_it(thread, users, keys, settings):
    """``run.resume`` with an ``after_seq`` far past anything the run has (a broken client, a
    trial's 2**63 - 1) is taken as "everything so far": the run's later events, its end too,
    still come (they all counted as delivered, and the socket heard nothing more of the run)."""
    settings.OFFLINE_DELTA_DELAY_S = 0.01

    async def go():
        comm = await ws(thread.pk, keys["alice"])
        await comm.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
        early = await collect_until(comm, {"text.delta"})
        run_id = early[-1]["run_id"]
        await comm.send_json_to({"type": "run.resume", "run_id": run_id, "after_seq": 2**53})
        rest = await collect_until(comm, {"run.completed"})
        await comm.disconnect()
        return early, rest

    early, rest = asyncio.run(go())
    assert rest[-1]["type"] == "run.completed"
    seqs = [e["seq"] for e in early + rest if "seq" in e]
    assert seqs == sorted(set(seqs)) and seqs[-1] == rest[-1]["seq"]  # in order, none twice
