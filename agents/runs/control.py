"""Telling the process that runs a turn to look at its run now: a cancel reaches the turn at
once instead of at its worker's next heartbeat.

A cancel is a database write (``lifecycle.run_cancel_running``); the worker holding the run
finds it when its heartbeat's renewal fails (``agents.runs.lease``), every
``min(RUN_HEARTBEAT_S, STREAM_PERSIST_INTERVAL_S)`` seconds — up to a second of tokens after
the person pressed Stop, a couple of dozen at streaming speed. Once the cancel has committed,
:func:`run_check_now` wakes that heartbeat for a beat now:

* in this process directly (embedded mode, where the web process runs its turns);
* in every other process through the channel layer: a ``run.check`` message ``{run_id}`` to
  the group ``run-control``, which each process running turns on a Redis layer joins on its
  publisher loop (:func:`listen`). A process that does not hold the run ignores it.

The message only says "look now": the beat reads the run's row as it always does, so a message
from anywhere (anyone who can publish on the Redis) can at most cause an early renewal. It is
sent without waiting for Redis, and its loss (Redis down, a worker reconnecting) costs only
the latency: the heartbeat finds the cancel at its next interval, as before.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from channels.layers import InMemoryChannelLayer, get_channel_layer

from chatplatform.loops import publisher_loop

from .lease import lease_check_now

logger = logging.getLogger(__name__)

GROUP = "run-control"
MESSAGE_TYPE = "run.check"
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0

_listening: asyncio.AbstractEventLoop | None = None  # the loop the listener runs on
_lock = threading.Lock()


def _redis_layer():
    layer = get_channel_layer()
    return None if layer is None or isinstance(layer, InMemoryChannelLayer) else layer


def run_check_now(run_id) -> None:
    """Wake the heartbeat that holds ``run_id`` — this process's at once, the others' through
    the channel layer (not awaited; a failure is logged at debug level, the heartbeat is the
    fallback). Call after the change is committed (``transaction.on_commit``)."""
    lease_check_now(run_id)
    layer = _redis_layer()
    if layer is None:
        return
    try:
        future = asyncio.run_coroutine_threadsafe(
            layer.group_send(GROUP, {"type": MESSAGE_TYPE, "run_id": str(run_id)}), publisher_loop())
    except RuntimeError:  # the loop is shutting down
        return
    future.add_done_callback(_log_failure)


def _log_failure(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.debug("run-control message not sent: %s", future.exception())


def listen() -> None:
    """Join ``run-control`` on this process's publisher loop, once per loop (a process that
    runs turns calls it before each; cheap after the first). Nothing on an in-memory layer:
    one process, where :func:`run_check_now` wakes the heartbeat directly."""
    global _listening
    if _redis_layer() is None:
        return
    loop = publisher_loop()
    with _lock:
        if _listening is loop:
            return
        _listening = loop
    loop.call_soon_threadsafe(lambda: loop.create_task(_listen(), name="run-control"))


async def _listen() -> None:
    """Receive ``run.check`` messages for as long as the loop runs. Joining retries with
    backoff (1 s doubling to 30 s) while Redis is unreachable; once joined, the layer's
    subscriber renews the subscription after a lost connection by itself."""
    layer = get_channel_layer()
    delay = RETRY_FIRST_S
    while True:
        try:
            channel = await layer.new_channel()
            await layer.group_add(GROUP, channel)
            break
        except Exception as exc:
            logger.warning("run control: cannot join %s (%s); cancels wait for the heartbeat", GROUP, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
    while True:
        try:
            message = await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("run control: receive failed (%s); retrying", exc)
            await asyncio.sleep(RETRY_FIRST_S)
            continue
        if message.get("type") == MESSAGE_TYPE and isinstance(message.get("run_id"), str):
            lease_check_now(message["run_id"])
