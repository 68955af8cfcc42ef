"""The thread websocket with Channels' WebsocketCommunicator (DESIGN §7)."""

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from rest_framework.authtoken.models import Token

from config.asgi import application
from knowledge.services import knowledge_item_create
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db(transaction=True)


_TOKENS: dict[str, str] = {}


@pytest.fixture(autouse=True)
def tokens(users):
    _TOKENS.clear()
    _TOKENS.update({name: Token.objects.get_or_create(user=user)[0].key for name, user in users.items()})
    return _TOKENS


def token_headers(user, origin: str | None = None) -> list:
    key = _TOKENS[user.username]
    headers = [(b"authorization", f"Token {key}".encode())]
    if origin:
        # A browser's handshake: its Origin is compared with the Host it connected to.
        headers += [(b"origin", origin.encode()), (b"host", b"localhost")]
    return headers


async def connect(thread_id, headers):
    comm = WebsocketCommunicator(application, f"/ws/threads/{thread_id}/", headers=headers)
    connected, code = await comm.connect(timeout=5)
    return comm, connected, code


async def until(comm, type_, timeout=20):
    seen = []
    while True:
        event = await comm.receive_json_from(timeout=timeout)
        seen.append(event)
        if event["type"] == type_:
            return seen


@pytest.fixture
def thread(users, workspaces, offline):
    knowledge_item_create(workspace=workspaces["demo"], owner=users["admin"], title="The with statement",
                          content="The with statement wraps a block with a context manager.")
    return make_thread(users["alice"], workspaces["demo"], offline)


async def test_unauthenticated_socket_is_closed_4403(thread):
    comm, connected, _ = await connect(thread.pk, [])
    assert connected
    assert (await comm.receive_output(timeout=5))["code"] == 4403
    await comm.disconnect()


async def test_other_users_thread_is_closed_4404_without_revealing_it(thread, users):
    for intruder in ("bob", "dave"):
        comm, connected, _ = await connect(thread.pk, token_headers(users[intruder]))
        assert (await comm.receive_output(timeout=5))["code"] == 4404
        await comm.disconnect()


async def test_unknown_and_malformed_thread_ids_close_4404(users):
    for thread_id in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        comm, _, _ = await connect(thread_id, token_headers(users["alice"]))
        assert (await comm.receive_output(timeout=5))["code"] == 4404
        await comm.disconnect()


async def test_foreign_origin_is_refused_even_with_credentials(thread, users):
    comm, _, _ = await connect(thread.pk, token_headers(users["alice"], origin="http://evil.example"))
    assert (await comm.receive_output(timeout=5))["code"] == 4403
    await comm.disconnect()


async def test_bad_frames_get_error_events_and_the_socket_stays_usable(thread, users):
    comm, connected, _ = await connect(thread.pk, token_headers(users["alice"], origin="http://localhost"))
    assert connected
    await comm.send_to(text_data="{not json")
    assert (await comm.receive_json_from())["code"] == "invalid_json"
    await comm.send_to(text_data="[1, 2]")
    assert (await comm.receive_json_from())["code"] == "invalid_frame"
    await comm.send_json_to({"type": "does.not.exist"})
    assert (await comm.receive_json_from())["code"] == "unknown_type"
    await comm.send_json_to({"type": "message.send", "content": 42})
    assert (await comm.receive_json_from())["code"] == "invalid_frame"
    await comm.send_json_to({"type": "message.send", "content": "   "})
    assert (await comm.receive_json_from())["code"] == "empty_message"
    for frame in ({"type": "run.cancel"}, {"type": "run.cancel", "run_id": 7}, {"type": "run.resume", "run_id": ""}):
        await comm.send_json_to(frame)
        assert (await comm.receive_json_from())["code"] == "invalid_frame", frame
    await comm.send_json_to({"type": "run.cancel", "run_id": "not-a-run"})
    assert (await comm.receive_json_from())["code"] == "not_found"
    big = json.dumps({"type": "message.send", "content": "x" * (settings.WS_MAX_FRAME_BYTES + 1)})
    await comm.send_to(text_data=big)
    error = await comm.receive_json_from()
    assert error["type"] == "error" and error["code"] == "frame_too_large"
    # Still open and working.
    await comm.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
    events = await until(comm, "run.completed")
    assert [e["type"] for e in events[:2]] == ["run.queued", "run.started"]  # the send's reply first
    events = events[1:]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert "context manager" in "".join(e["delta"] for e in events if e["type"] == "text.delta")
    await comm.disconnect()


async def test_two_tabs_both_receive_the_run(thread, users):
    headers = token_headers(users["alice"])
    first, _, _ = await connect(thread.pk, headers)
    second, _, _ = await connect(thread.pk, headers)
    await first.send_json_to({"type": "message.send", "content": "with statement"})
    a = await until(first, "run.completed")
    b = await until(second, "run.completed")
    # The sender alone gets run.queued, the reply to its send; both get every run event.
    assert a[0] == {"type": "run.queued", "run_id": b[0]["run_id"], "user_message_id": b[0]["user_message_id"]}
    assert a[1:] == b
    await first.disconnect()
    await second.disconnect()


async def test_admin_may_watch_but_not_send(thread, users):
    comm, connected, _ = await connect(thread.pk, token_headers(users["admin"]))
    assert connected
    await comm.send_json_to({"type": "message.send", "content": "hello"})
    error = await comm.receive_json_from()
    assert error["code"] == "not_allowed"
    await comm.disconnect()


async def test_a_second_send_while_a_run_is_active_is_refused(thread, users, settings):
    settings.OFFLINE_DELTA_DELAY_S = 0.05
    comm, _, _ = await connect(thread.pk, token_headers(users["alice"]))
    await comm.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
    await until(comm, "run.started")
    await comm.send_json_to({"type": "message.send", "content": "again"})
    seen = await until(comm, "error")
    assert seen[-1]["code"] == "run_in_progress"
    await until(comm, "run.completed")
    await comm.disconnect()


async def test_stop_over_the_socket_works_while_the_cache_is_unreachable(thread, users, settings, monkeypatch):
    """Redis restarting: the per-frame rate limit cannot count, and that used to close the socket
    (4503) and lose the Stop in it (found trying it from a fresh clone). The limit lets the
    frame through uncounted; the cancel is a database write and takes effect."""
    from django.core.cache import caches
    from redis.exceptions import ConnectionError as RedisConnectionError

    settings.OFFLINE_DELTA_DELAY_S = 0.05
    comm, _, _ = await connect(thread.pk, token_headers(users["alice"]))
    await comm.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
    started = (await until(comm, "run.started"))[-1]

    def down(*args, **kwargs):
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(type(caches["default"]), "add", down)  # every thread's cache: the frame runs on another
    await comm.send_json_to({"type": "run.cancel", "run_id": started["run_id"]})
    seen = await until(comm, "run.cancelled")
    assert not [e for e in seen if e["type"] == "error"]
    await comm.disconnect()


async def test_catch_up_outlives_an_unreadable_event_log(monkeypatch):
    """Redis down for a few seconds: the events published meanwhile (the end of a cancelled
    run) never reach the socket live, and the first look into the log fails too. The catch-up
    tries again and delivers the terminal event once the log is readable (found trying a
    Stop during a Redis outage from a fresh clone: the page stayed "writing…" for good)."""
    import time

    from redis.exceptions import ConnectionError as RedisConnectionError

    from chat import consumers

    monkeypatch.setattr(consumers, "CATCH_UP_S", 0.05)
    reads = []

    class Cursor:  # agents.replay.RunStreamCursor's part the catch-up uses
        done = False

        def finished(self, run_id):
            return self.done

        async def catch_up(self, run_id):
            reads.append(run_id)
            if len(reads) == 1:
                raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
            self.done = True
            return [{"type": "run.cancelled", "run_id": run_id, "seq": 60, "status": "cancelled"}]

    consumer = consumers.ThreadConsumer()
    consumer.thread_id, consumer.cursor = "t1", Cursor()
    sent = []

    async def send_event(event):
        sent.append(event)

    consumer.send_event = send_event
    consumer._last_event_at = {"r1": time.monotonic() - 1}
    consumer._watchdog = asyncio.get_running_loop().create_task(consumer._catch_up_idle_runs())
    await asyncio.wait_for(consumer._watchdog, 5)
    assert reads == ["r1", "r1"] and [e["type"] for e in sent] == ["run.cancelled"]
    assert consumer._watchdog is None and consumer._last_event_at == {}  # a later run starts a new one


async def test_a_send_while_the_database_is_unreachable_is_refused_visibly_and_the_socket_stays(
        thread, users, settings, monkeypatch):
    """The pool stayed empty (or PostgreSQL refused): the frame used to end the consumer with
    an exception — the socket closed, nothing was stored and the page kept the text read-only
    (found killing database connections from a fresh clone). Now an ``error`` event
    ``service_unavailable`` says so, nothing is stored, and the same socket sends it again."""
    from django.db import OperationalError

    from chat import ws_actions
    from chat.models import Message

    settings.OFFLINE_DELTA_DELAY_S = 0.0
    comm, connected, _ = await connect(thread.pk, token_headers(users["alice"]))
    assert connected
    real = ws_actions.frame_act
    failures = []

    def pool_empty(**kwargs):
        if not failures:
            failures.append(1)
            raise OperationalError("couldn't get a connection after 10.00 sec")
        return real(**kwargs)

    monkeypatch.setattr(ws_actions, "frame_act", pool_empty)
    await comm.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
    refused = await comm.receive_json_from(timeout=10)
    assert (refused["type"], refused["code"], refused["retry_after"]) == ("error", "service_unavailable", 5)
    assert not await Message.objects.filter(thread=thread).aexists()
    await comm.send_json_to({"type": "message.send", "content": "How does the with statement work?"})
    seen = await until(comm, "run.completed")
    assert [e["type"] for e in seen[:2]] == ["run.queued", "run.started"]
    await comm.disconnect()


async def test_a_message_at_the_character_limit_fits_one_frame_in_any_script(thread):
    """The frame limit fits the character limit in UTF-8 (issue 54): a 24,000-character CJK
    message (72 KB, over the old 64 KB limit) is accepted whole, and so is one at the limit
    made of the widest JSON escapes (6 bytes a character)."""
    from agents.services import MAX_MESSAGE_CHARS
    from chat.models import Message

    widest = json.dumps({"type": "message.send", "content": "\u0001" * MAX_MESSAGE_CHARS, "grounded": False,
                         "include_private": False, "env_id": "x" * 100})
    assert len(widest.encode()) <= settings.WS_MAX_FRAME_BYTES
    comm, connected, _ = await connect(thread.pk, token_headers(thread.owner))
    assert connected
    cjk = "漢字かな交じり文" * 3000
    assert len(cjk) == 24_000 and len(json.dumps({"content": cjk}, ensure_ascii=False).encode()) > 64 * 1024
    await comm.send_to(text_data=json.dumps({"type": "message.send", "content": cjk}, ensure_ascii=False))
    events = await until(comm, "run.completed")
    assert not [e for e in events if e["type"] == "error"]
    stored = await asyncio.to_thread(
        lambda: Message.objects.filter(thread_id=thread.pk, role="user").values_list("content", flat=True).get())
    assert stored == cjk
    await comm.disconnect()
