"""Issue 17, bad input over the websocket: deeply nested frames, NUL characters and
out-of-range integers get an ``error`` event and the socket stays usable (never 1011).
``db_backends``: on SQLite and again on PostgreSQL + Redis."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from agents.models import Run
from config.asgi import application
from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]

DEEP = 20_000  # fits in the 64 KiB frame limit; json.loads alone would recurse out


@pytest.fixture
def thread(users, workspaces, offline):
    return make_thread(users["alice"], workspaces["demo"], offline)


async def open_socket(thread, user):
    key = (await database_sync_to_async(Token.objects.get_or_create)(user=user))[0].key
    comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                 headers=[(b"authorization", f"Token {key}".encode())])
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


async def next_error(comm) -> dict:
    while True:
        event = await comm.receive_output(timeout=10)
        assert event["type"] == "websocket.send", event  # a close here would be the bug
        frame = json.loads(event["text"])
        if frame["type"] == "error":
            return frame


async def still_usable(comm) -> None:
    await comm.send_json_to({"type": "no.such.thing"})
    assert (await next_error(comm))["code"] == "unknown_type"


@pytest.mark.parametrize(("raw", "code"), [
    ("[" * DEEP + "]" * DEEP, "nested_too_deeply"),
    ('{"type": "message.send", "content": "hi", "ui_context": ' + '{"a":' * (DEEP // 2) + "1" + "}" * (DEEP // 2) + "}",
     "nested_too_deeply"),
    (json.dumps({"type": "message.send", "content": "hi", "ui_context": json.loads('{"a":' * 40 + "1" + "}" * 40)}),
     "nested_too_deeply"),
    (json.dumps({"type": "message.send", "content": "hi\x00there"}), "invalid_text"),
    (json.dumps({"type": "message.send", "content": "hi", "env_id": "a\x00"}), "invalid_text"),
    (json.dumps({"type": "message.send\x00", "content": "hi"}), "invalid_text"),
    (json.dumps({"type": "message.send", "content": "hi", "ui_context": {"objectType": "thread", "x\x00": 1}}),
     "invalid_text"),
])
async def test_hostile_frames_get_an_error_event_and_the_socket_stays_open(thread, users, raw, code):
    comm = await open_socket(thread, users["alice"])
    await comm.send_to(text_data=raw)
    error = await next_error(comm)
    assert error["code"] == code and error["message"]
    await still_usable(comm)
    await comm.disconnect()
    assert not await database_sync_to_async(Run.objects.exists)()


@pytest.mark.parametrize("after_seq", [2**63, 10**30, -1, "5", 1.5, True])
async def test_out_of_range_after_seq_is_an_invalid_frame(thread, users, after_seq, settings):
    from agents.services import run_create

    settings.RUN_EXECUTOR = "none"  # the run only has to exist; a turn would outlive the test

    created = await database_sync_to_async(run_create)(thread=thread, user=users["alice"], content="hi")
    comm = await open_socket(thread, users["alice"])
    await comm.send_to(text_data=json.dumps({"type": "run.resume", "run_id": str(created.run.pk),
                                             "after_seq": after_seq}))
    error = await next_error(comm)
    assert error["code"] == "invalid_frame" and "after_seq" in error["message"]
    await still_usable(comm)
    await comm.disconnect()


async def test_out_of_range_ids_in_frames_are_refused_not_crashes(thread, users):
    comm = await open_socket(thread, users["alice"])
    for frame in ({"type": "approval.decide", "tool_call_id": str(10**30), "decision": "approve"},
                  {"type": "approval.decide", "tool_call_id": "\x00", "decision": "approve"},
                  {"type": "run.cancel", "run_id": str(2**63)},
                  {"type": "run.resume", "run_id": str(10**30), "after_seq": 0}):
        await comm.send_to(text_data=json.dumps(frame))
        error = await next_error(comm)
        assert error["code"] in {"not_found", "invalid_frame", "invalid_text"}, error
    await still_usable(comm)
    await comm.disconnect()
