"""The thread websocket: ``/ws/threads/<thread_id>/`` (DESIGN §7).

Thin by design: ``connect`` authenticates and authorises through the permission-checked
selector, joins the thread's group and accepts; each client frame is validated and handed to
one sync service through ``db_async`` (chatplatform.dbasync); group events pass through a
:class:`~agents.replay.RunStreamCursor`, which fills gaps from the event log and drops
duplicates, so a client sees every run's seqs 1, 2, 3… exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import time

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import Http404
from django.utils.translation import gettext
from rest_framework.exceptions import ValidationError

from agents.event_types import check_event
from agents.events import GROUP_MESSAGE_TYPE
from agents.metrics import WEBSOCKETS
from agents.presentation import event_for_viewer, sees_error_details
from agents.replay import RunStreamCursor
from chatplatform import safe_input
from chatplatform.api import UNAVAILABLE_MESSAGE, flatten_detail, is_unavailable
from chatplatform.consumer_dispatch import ReceiveLoopsMixin
from chatplatform.dbasync import db_async
from chatplatform.dbpool import adatabase_down
from chatplatform.errors import ServiceError
from chatplatform.event_log import event_log
from chatplatform.layers import LAYER_ERRORS
from chatplatform.ratelimit import rate_limit_hit
from chatplatform.safe_input import BadInput

from . import ws_actions
from .access import session_digest, user_group
from .selectors import thread_get_for_user

logger = logging.getLogger(__name__)

CATCH_UP_S = 2.0  # a run idle this long (without its terminal event) is looked up in the log
# A run's first event re-checks access unless this socket's access was checked this recently
# (the message.send that started the run did, a moment before): at 50 sends at once the
# second check was a sixth of the web process's work per run. A change in between reaches
# the socket anyway as access.changed (chat.access), which closes it at once.
ACCESS_FRESH_S = 2.0
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
# The server lost its channel layer: reconnect and resume. (RFC 6455's 1012 "service restart"
# says the same, but daphne only sends 1000 or 3000–4999; 4503 mirrors HTTP 503.)
CLOSE_LAYER_LOST = 4503


def _has_lone_surrogate(value) -> bool:
    """JSON may carry "\\ud800", which no database or encoder accepts as text."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


class ClosesOnLayerLoss:
    """For a websocket consumer: if its channel layer breaks (Redis restarted or unreachable:
    the layer's receive, ``group_add`` or ``group_send`` raises; the production layer's
    ``receive`` raises ``LayerLost`` once its subscription has been down ``lost_after_s``) or
    the database is unreachable where no frame can be answered (``connect``: its access check),
    leave its groups (``disconnect``) and close the socket with ``4503``
    (``CLOSE_LAYER_LOST``) instead of leaving it open and silent. The browser reconnects with
    backoff, showing "reconnecting…", and sends ``run.resume`` for the run it was following
    (``stream.js``); the next connection joins the groups again on a fresh layer connection.
    A socket not accepted yet (the loss came during ``connect``) is accepted first: a close
    before the accept is a refused handshake (HTTP 403), and the client never sees 4503."""

    _accepted = False

    async def accept(self, subprotocol=None, headers=None) -> None:
        await super().accept(subprotocol, headers)
        self._accepted = True

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except Exception as exc:
            if not (isinstance(exc, LAYER_ERRORS) or is_unavailable(exc)):
                raise
            logger.warning("websocket %s: channel layer or database lost (%s: %s); closing %s so the client "
                           "reconnects", scope.get("path", "?"), type(exc).__name__, exc, CLOSE_LAYER_LOST)
            try:
                async with asyncio.timeout(2.0):  # leaving a group may need the Redis that is gone
                    await self.disconnect(CLOSE_LAYER_LOST)
            except (TimeoutError, *LAYER_ERRORS) as leave_exc:
                logger.info("websocket %s: leaving its groups failed: %s", scope.get("path", "?"), leave_exc)
            try:
                if not self._accepted:
                    await send({"type": "websocket.accept"})
                await send({"type": "websocket.close", "code": CLOSE_LAYER_LOST})
            except Exception as close_exc:  # noqa: BLE001 - the client is gone already
                logger.info("websocket %s: close after layer loss failed: %s", scope.get("path", "?"), close_exc)


class ThreadConsumer(ClosesOnLayerLoss, ReceiveLoopsMixin, AsyncJsonWebsocketConsumer):
    group_name: str | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last_event_at: dict[str, float] = {}
        self._watchdog: asyncio.Task | None = None
        self._counted = False  # in the WEBSOCKETS gauge
        self._allowed_at = 0.0  # time.monotonic() of the last access check that passed

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        try:
            thread = await db_async(thread_get_for_user)(
                user=user, thread_id=self.scope["url_route"]["kwargs"]["thread_id"], reading="live"
            )
        except Http404:
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.thread_id = str(thread.pk)
        self.workspace_id = thread.workspace_id
        # Upstream error detail only for staff and the workspace's admins (agents.presentation).
        self.detailed = await db_async(sees_error_details)(user=user, workspace_id=thread.workspace_id)
        self.group_name = thread.group_name
        self.cursor = RunStreamCursor()
        self.user_group = user_group(user.pk)  # access changes reach this socket (chat.access)
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        await self.accept()
        WEBSOCKETS.inc()
        self._counted = True

    async def disconnect(self, code: int) -> None:
        if self._counted:
            self._counted = False
            WEBSOCKETS.dec()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self.group_name:
            await self.channel_layer.group_discard(self.group_name, self.channel_name)
            self.group_name = None
        if getattr(self, "user_group", None):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)
            self.user_group = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.group_name:
            return
        raw = text_data if text_data is not None else (bytes_data or b"")
        size = len(raw.encode("utf-8")) if isinstance(raw, str) else len(raw)
        if size > settings.WS_MAX_FRAME_BYTES:
            await self.send_error("frame_too_large", f"Frames are limited to {settings.WS_MAX_FRAME_BYTES} bytes; this one has {size}.")
            return
        wait = await db_async(rate_limit_hit)(
            key=f"ws:{self.scope['user'].pk}", spec=settings.WS_FRAME_RATE_LIMIT
        )
        if wait:
            await self.send_error("rate_limited", f"Too many frames; try again in {wait:.0f} s.", retry_after=round(wait, 1))
            return
        try:
            frame = safe_input.loads(raw, what="The frame")
        except BadInput as exc:  # nested too deeply, or a NUL character
            await self.send_error(exc.code, exc.message)
            return
        except (ValueError, UnicodeDecodeError) as exc:
            await db_async(ws_actions.audit_rejected_frame)(
                user=self.scope.get("user"), thread_id=self.thread_id, reason=f"invalid JSON: {exc}"
            )
            await self.send_error("invalid_json", f"The frame is not valid JSON: {exc}")
            return
        if _has_lone_surrogate(frame):
            await self.send_error("invalid_text", "The frame contains a lone UTF-16 surrogate (\\ud800–\\udfff); send valid Unicode text.")
            return
        await self.receive_json(frame)

    async def receive_json(self, content, **kwargs) -> None:
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            await self.send_error("invalid_frame", 'A frame must be a JSON object with a string "type".')
            return
        # Every action re-checks the credential: a tab whose user signed out (or whose token
        # was deleted, or who left the workspace) may not act on the open socket.
        action = ws_actions.ACTIONS.get(content["type"])
        if action is None:
            if not await self._still_allowed():
                await self.close(code=CLOSE_FORBIDDEN)
                return
            if content["type"] == "run.resume":
                await self.resume(content)
                return
            known = ", ".join(sorted([*ws_actions.ACTIONS, "run.resume"]))
            await self.send_error("unknown_type", f"Unknown frame type {content['type']!r}. Known: {known}.")
            return
        if await adatabase_down():  # known down: say so now, not after DB_POOL_TIMEOUT_S
            await self.send_error("service_unavailable", gettext(UNAVAILABLE_MESSAGE), retry_after=5)
            return
        try:  # the re-check and the action in one database hop
            replies = await db_async(ws_actions.frame_act)(
                action=action, user=self.scope["user"], thread_id=self.thread_id, frame=content,
                session_key=getattr(self.scope.get("session"), "session_key", None),
                token=ws_actions.token_from_scope(self.scope),
            )
            self._allowed_at = time.monotonic() if replies is not None else 0.0
            if replies is None:
                await self.close(code=CLOSE_FORBIDDEN)
                return
            for reply in replies:  # run.queued: the send was taken (run.started follows)
                await self.send_json(reply)
        except ServiceError as exc:
            await self.send_service_error(exc)
        except ValidationError as exc:
            await self.send_error("invalid_frame", f"Invalid {content['type']} frame: {flatten_detail(exc.detail)}")
        except Http404:
            await self.close(code=CLOSE_NOT_FOUND)
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            # The database (or broker) is unreachable or its pool stayed empty: the frame was
            # not acted on — say so, keep the socket (the page keeps the message to send again).
            logger.warning("websocket %s: %s not acted on: %s: %s", self.thread_id, content["type"],
                           type(exc).__name__, exc)
            await self.send_error("service_unavailable", gettext(UNAVAILABLE_MESSAGE), retry_after=5)

    async def resume(self, frame: dict) -> None:
        """``run.resume {run_id, after_seq}``: the run's logged events after ``after_seq``."""
        after = frame.get("after_seq", 0)
        if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= safe_input.MAX_DB_INT:
            await self.send_error("invalid_frame", '"after_seq" must be a non-negative integer.')
            return
        try:
            last_seq = await db_async(ws_actions.run_for_resume)(
                user=self.scope["user"], thread_id=self.thread_id, run_id=frame.get("run_id")
            )
        except ServiceError as exc:
            await self.send_service_error(exc)
            return
        run_id = str(frame["run_id"])
        if after > last_seq:  # past what the run saved: at most what its log holds (a live client
            # is up to a heartbeat ahead of the saved seq); an after_seq past both muted the run
            # on this socket — every later event, its end too, counted as delivered.
            # (A log that cannot be read fails here as it would in the resume's own read below.)
            after = min(after, max(last_seq, await event_log().last_seq(run_id)))
        events = await self.cursor.resume(run_id, after)
        for event in events:
            await self.send_event(event)
        delivered = self.cursor.delivered.get(run_id, after)
        if delivered < last_seq:
            await self.send_error("events_missing", "This run's events are no longer available; reload the thread's messages.",
                                  run_id=run_id, from_seq=delivered + 1, to_seq=last_seq)

    async def _still_allowed(self) -> bool:
        allowed = await db_async(ws_actions.socket_still_allowed)(
            user=self.scope["user"], thread_id=self.thread_id,
            session_key=getattr(self.scope.get("session"), "session_key", None),
            token=ws_actions.token_from_scope(self.scope),
        )
        self._allowed_at = time.monotonic() if allowed else 0.0
        return allowed

    async def send_service_error(self, exc: ServiceError) -> None:
        """A service's refusal as an ``error`` event (the REST side maps it in
        ``chatplatform.api.exception_handler``)."""
        extra = dict(exc.extra)
        if exc.retry_after:
            extra["retry_after"] = round(exc.retry_after, 1)
        await self.send_error(exc.code, exc.message, status=exc.status, **extra)

    async def send_event(self, event: dict) -> None:
        """A run event as this socket's user may see it (``agents.presentation.event_for_viewer``)."""
        await self.send_json(event_for_viewer(event, detailed=self.detailed))

    async def send_error(self, code: str, message: str, **extra) -> None:
        event = {"code": code, "message": message, **extra}
        check_event("error", event)
        await self.send_json({"type": "error", **event})

    async def access_changed(self, message: dict) -> None:
        """Group handler for ``access.changed`` (``chat.access``): the user's membership, role,
        account, token or session changed — stop delivering at once if the thread is no longer
        theirs to see."""
        own_session = getattr(self.scope.get("session"), "session_key", None)
        ended = message.get("session") is not None and message["session"] == session_digest(own_session)
        if self.group_name and (ended or not await self._still_allowed()):
            await self.close(code=CLOSE_FORBIDDEN)
            await self.disconnect(CLOSE_FORBIDDEN)
        elif self.group_name:  # a role change: upstream error detail follows the new role
            self.detailed = await db_async(sees_error_details)(
                user=self.scope["user"], workspace_id=self.workspace_id)

    async def inbox_changed(self, message: dict) -> None:
        """Group handler for ``inbox.changed`` (``agents.approvals.requests.inbox_notify``):
        a call this user may decide was requested, progressed or closed; passed on as is."""
        await self.send_json(message["event"])

    async def thread_renamed(self, message: dict) -> None:
        """Group handler for ``thread.renamed`` (``agents.titles``): the model titled the chat."""
        await self.send_json(message["event"])

    async def run_event(self, message: dict) -> None:
        """Group handler for ``run.event``: re-check access on a run's first event (a socket
        may outlive a logout or a membership) unless a check passed within ``ACCESS_FRESH_S``,
        then deliver through the cursor."""
        event = message["event"]
        first = str(event["run_id"]) not in self.cursor.delivered
        if first and time.monotonic() - self._allowed_at > ACCESS_FRESH_S:
            if not await self._still_allowed():
                await self.close(code=CLOSE_FORBIDDEN)
                await self.disconnect(CLOSE_FORBIDDEN)
                return
        for out in await self.cursor.accept(event):
            await self.send_event(out)
        self._last_event_at[str(event["run_id"])] = time.monotonic()
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._catch_up_idle_runs())

    async def _catch_up_idle_runs(self) -> None:
        """One task per socket: a run that went quiet for ``CATCH_UP_S`` before its
        terminal event is looked up in the log — the layer may have dropped its last events
        (a Redis restart loses what was published while the subscription was down). A log
        that cannot be read (Redis still down) is tried again ``CATCH_UP_S`` later: a failed
        read used to end the task, and the page waited for a terminal event for good."""
        try:
            while self._last_event_at:
                await asyncio.sleep(CATCH_UP_S / 2)
                now = time.monotonic()
                for run_id, seen_at in list(self._last_event_at.items()):
                    if self.cursor.finished(run_id):
                        del self._last_event_at[run_id]
                    elif now - seen_at >= CATCH_UP_S:
                        self._last_event_at[run_id] = now
                        try:
                            caught_up = await self.cursor.catch_up(run_id)
                        except LAYER_ERRORS as exc:
                            logger.info("websocket %s: run %s's event log unreadable (%s: %s); trying again",
                                        getattr(self, "thread_id", "?"), run_id, type(exc).__name__, exc)
                            continue
                        for out in caught_up:
                            await self.send_event(out)
        finally:
            self._watchdog = None

    async def dispatch(self, message: dict) -> None:
        # Channels closes stale DB connections (a thread-pool hop) before every handler;
        # run events touch no connection here, and they are the hot path — skip it for them.
        if message.get("type") == GROUP_MESSAGE_TYPE:
            await self.run_event(message)
        else:
            await super().dispatch(message)


class InboxConsumer(ClosesOnLayerLoss, ReceiveLoopsMixin, AsyncJsonWebsocketConsumer):
    """``/ws/approvals/``: the signed-in user's approval notices (``inbox.changed``) for the
    inbox page and the rail badge. Joins only the per-user group; takes no frames."""

    user_group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user_group = user_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.user_group:
            await self.channel_layer.group_discard(self.user_group, self.channel_name)
            self.user_group = None

    async def receive_json(self, content, **kwargs) -> None:
        event = {"code": "unknown_type", "message": "This socket only sends approval notices."}
        check_event("error", event)
        await self.send_json({"type": "error", **event})

    async def inbox_changed(self, message: dict) -> None:
        await self.send_json(message["event"])

    async def access_changed(self, message: dict) -> None:
        """Signed out or deactivated: stop delivering."""
        user = self.scope["user"]
        if not await db_async(ws_actions.socket_user_active)(
            user=user, session_key=getattr(self.scope.get("session"), "session_key", None),
            token=ws_actions.token_from_scope(self.scope),
        ):
            await self.close(code=CLOSE_FORBIDDEN)
            await self.disconnect(CLOSE_FORBIDDEN)
