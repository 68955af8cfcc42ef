"""One subscription to a run's events for every reader that is not the websocket consumer: the
SSE endpoint, the OpenAI-compatible ``/v1`` stream and the ``ask`` command.

``run_event_stream`` subscribes to the thread's group first, then replays the event log after
``after`` (so nothing falls between log and live), then follows the live feed through a
:class:`~agents.replay.RunStreamCursor` (in order, no duplicates, holes refilled from the log).
A quiet feed (or a Redis outage: the feed and the log live there) is caught up from the log;
a run that ended with events the log no longer has ends the stream with an ``error`` event
``events_missing``.

A reader who loses access mid-run (removed from the workspace, deactivated, token deleted,
logged out) stops receiving: the caller passes ``still_allowed`` (its access re-check) and
``notices_group`` (the reader's per-user group, where ``chat.access`` sends
``access.changed``); the stream re-checks on every such notice and at least every
``STREAM_ACCESS_RECHECK_S`` seconds, and a failed check ends it with an ``error`` event
``access_revoked``. The run itself goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from channels.layers import get_channel_layer
from django.conf import settings

from chatplatform.dbasync import db_async
from chatplatform.layers import LAYER_ERRORS, receive_within

from .event_types import TERMINAL_TYPES
from .events import GROUP_MESSAGE_TYPE, thread_group
from .models import Run
from .replay import RunStreamCursor

logger = logging.getLogger(__name__)

PARKED = "approval.requested"
KEEPALIVE = {"type": "keepalive"}
"""Pseudo-event: ``keepalive_s`` passed with nothing to give (the run waits for a worker, a
silent model, Redis away). Not a run event: it has no ``seq``."""
WAIT_TIMEOUT = {"type": "wait.timeout"}
"""Pseudo-event: ``wait_s`` ran out before the run ended (or parked); the stream ends after it."""
READ_STEP_S = 2.0  # the longest the live feed is waited on before the log and the row are read


ACCESS_NOTICE = "access.changed"  # chat.access.ACCESS_CHANGED: the reader's access may have changed
ACCESS_REVOKED = "access_revoked"


def access_revoked(run_id: str) -> dict:
    return {"type": "error", "run_id": run_id, "code": ACCESS_REVOKED,
            "message": "You no longer have access to this thread, or the key or session you read it with "
                       "was revoked or ended; the stream has ended."}


def events_missing(run_id: str) -> dict:
    return {"type": "error", "run_id": run_id, "code": "events_missing",
            "message": "This run's events are no longer available; reload its messages."}


@db_async
def _run_state(run_id: str) -> tuple[str | None, int]:
    row = Run.objects.filter(pk=run_id).values("status", "last_event_seq").first()
    return (row["status"], row["last_event_seq"]) if row else (None, 0)


async def run_event_stream(run_id, thread_id, *, after: int = 0, stop_at_park: bool = False,
                           keepalive_s: float | None = None, wait_s: float | None = None,
                           every_event: bool = True, check_s: float = READ_STEP_S,
                           still_allowed: Callable[[dict | None], Awaitable[bool]] | None = None,
                           notices_group: str | None = None, recheck_s: float | None = None) -> AsyncIterator[dict]:
    """The events of run ``run_id`` (of thread ``thread_id``; the caller checked the reader may
    see it) with ``seq`` > ``after``, in order, until a terminal event (``run.completed`` …).

    ``stop_at_park``: also end after ``approval.requested`` (a client that cannot decide).
    ``keepalive_s``: yield :data:`KEEPALIVE` after that many seconds with nothing yielded.
    ``wait_s``: yield :data:`WAIT_TIMEOUT` and end after that many seconds in all.
    ``every_event=False``: while the log is unreadable, end as soon as the run has ended (or
    parked, with ``stop_at_park``) — for a caller that reads the answer from the database.
    ``check_s``: the longest the live feed is waited on before the log and the run's row are
    read (a quiet feed may have lost its tail).
    ``still_allowed(notice)``: the reader's access re-check (True: may go on reading), called
    with the ``access.changed`` message that arrived on ``notices_group`` (joined with the
    thread's group), or None for the periodic check every ``recheck_s`` seconds
    (``STREAM_ACCESS_RECHECK_S`` by default). False: :func:`access_revoked` (an ``error``
    event ``access_revoked``), then the end — within one check's time after the notice, or
    ``recheck_s`` plus one check's time when no notice came.

    A run found ended with every event delivered ends the stream; ended with events the log no
    longer has: ``events_missing`` (an ``error`` event), then the end. Events are the log's
    dicts (``type``, ``run_id``, ``seq`` and the type's fields; DESIGN §7)."""
    run_id = str(run_id)
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = thread_group(thread_id)
    await layer.group_add(group, channel)  # subscribe first: nothing falls between log and live
    if still_allowed is not None and notices_group:
        await layer.group_add(notices_group, channel)
    cursor = RunStreamCursor()
    loop = asyncio.get_running_loop()
    every_s = float(settings.STREAM_ACCESS_RECHECK_S if recheck_s is None else recheck_s)
    next_check = loop.time() + every_s if still_allowed is not None else float("inf")
    deadline = loop.time() + wait_s if wait_s is not None else float("inf")
    quiet_s = keepalive_s if keepalive_s is not None else float("inf")
    last_yield = loop.time()
    ends = (*TERMINAL_TYPES, PARKED) if stop_at_park else TERMINAL_TYPES

    def stopped(status: str | None) -> bool:
        return status is None or status in Run.TERMINAL or (stop_at_park and status == Run.Status.AWAITING_APPROVAL)

    try:
        for event in await cursor.resume(run_id, after):
            yield event
            last_yield = loop.time()
            if event["type"] in ends:
                return
        status, last_seq = await _run_state(run_id)
        if status in Run.TERMINAL and cursor.delivered.get(run_id, after) >= last_seq:
            return  # finished and the reader already has everything
        while True:
            if loop.time() >= next_check:
                if not await still_allowed(None):
                    yield access_revoked(run_id)
                    return
                next_check = loop.time() + every_s
            if loop.time() - last_yield >= quiet_s:
                yield KEEPALIVE
                last_yield = loop.time()
            left = deadline - loop.time()
            if left <= 0:
                yield WAIT_TIMEOUT
                return
            message = await receive_within(layer, channel,
                                           max(0.0, min(left, check_s, quiet_s, next_check - loop.time())))
            if message is not None and message.get("type") != GROUP_MESSAGE_TYPE:
                if message.get("type") == ACCESS_NOTICE and still_allowed is not None:
                    if not await still_allowed(message):
                        yield access_revoked(run_id)
                        return
                    next_check = loop.time() + every_s
                continue  # another notice of the reader's group (an inbox change): not this stream's
            try:
                if message is not None:
                    event = message.get("event", {})
                    events = await cursor.accept(event) if str(event.get("run_id")) == run_id else []
                else:  # quiet, or Redis unreachable for now: the layer may have dropped the tail
                    events = await cursor.catch_up(run_id)
            except LAYER_ERRORS as exc:  # the event log is in Redis too: keep the stream, try later
                logger.info("run %s: event log unreadable (%s); stream kept open", run_id, exc)
                if not every_event and stopped((await _run_state(run_id))[0]):
                    return
                continue
            for event in events:
                yield event
                last_yield = loop.time()
                if event["type"] in ends:
                    return
            if message is None and not events:
                status, last_seq = await _run_state(run_id)
                if stopped(status):
                    events = await cursor.catch_up(run_id)  # what was logged before the row changed
                    for event in events:
                        yield event
                        if event["type"] in ends:
                            return
                    if status in Run.TERMINAL and cursor.delivered.get(run_id, after) < last_seq:
                        yield events_missing(run_id)
                        return
                    if status is None or status in Run.TERMINAL or not events:
                        return
    finally:
        await layer.group_discard(group, channel)
        if still_allowed is not None and notices_group:
            await layer.group_discard(notices_group, channel)
