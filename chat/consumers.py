"""The thread websocket: ``/ws/threads/<thread_id>/`` (DESIGN §7).

Thin by design: ``connect`` authenticates and authorises through the permission-checked
selector, joins the thread's group and accepts; each client frame is validated and handed to
one sync service through ``database_sync_to_async``; group events are forwarded as they are.
"""

from __future__ import annotations

import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import Http404

from . import ws_actions
from .selectors import thread_get_for_user

logger = logging.getLogger(__name__)

CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


class ThreadConsumer(AsyncJsonWebsocketConsumer):
    group_name: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        try:
            thread = await database_sync_to_async(thread_get_for_user)(
                user=user, thread_id=self.scope["url_route"]["kwargs"]["thread_id"]
            )
        except Http404:
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.thread_id = str(thread.pk)
        self.group_name = thread.group_name
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group_name:
            await self.channel_layer.group_discard(self.group_name, self.channel_name)
            self.group_name = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else (bytes_data or b"")
        size = len(raw.encode("utf-8")) if isinstance(raw, str) else len(raw)
        if size > settings.WS_MAX_FRAME_BYTES:
            await self.send_error("frame_too_large", f"Frames are limited to {settings.WS_MAX_FRAME_BYTES} bytes; this one has {size}.")
            return
        try:
            frame = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            await database_sync_to_async(ws_actions.audit_rejected_frame)(
                user=self.scope.get("user"), thread_id=getattr(self, "thread_id", None), reason=f"invalid JSON: {exc}"
            )
            await self.send_error("invalid_json", f"The frame is not valid JSON: {exc}")
            return
        await self.receive_json(frame)

    async def receive_json(self, content, **kwargs) -> None:
        if not self.group_name:
            return
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            await self.send_error("invalid_frame", 'A frame must be a JSON object with a string "type".')
            return
        action = ws_actions.ACTIONS.get(content["type"])
        if action is None:
            await self.send_error("unknown_type", f"Unknown frame type {content['type']!r}. Known: {', '.join(sorted(ws_actions.ACTIONS))}.")
            return
        try:
            replies = await database_sync_to_async(action)(user=self.scope["user"], thread_id=self.thread_id, frame=content)
        except ws_actions.FrameError as exc:
            await self.send_error(exc.code, exc.message, **exc.extra)
            return
        for reply in replies or ():
            await self.send_json(reply)

    async def send_error(self, code: str, message: str, **extra) -> None:
        await self.send_json({"type": "error", "code": code, "message": message, **extra})

    async def run_event(self, message: dict) -> None:
        """Group handler for ``run.event``: forward the event unchanged."""
        await self.send_json(message["event"])
