"""Access re-checks for the run streams that are not websockets: SSE
(``GET /api/v1/runs/{id}/events/``) and the OpenAI-compatible ``/v1`` stream.

A stream reads through ``agents.streams.run_event_stream``; :func:`stream_access` gives it
the reader's per-user notice group (``chat.access.user_group``, where a membership, role,
account, token or logout change sends ``access.changed``) and the re-check to run on each
notice and periodically — the same check as an open websocket's
(``ws_actions.socket_still_allowed``): the user is active, the credential they streamed with
(API token, or session) still exists, and the thread is still visible to them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from chatplatform.dbasync import db_async

from .access import session_digest, user_group
from .ws_actions import socket_still_allowed


@dataclass(frozen=True)
class StreamAccess:
    notices_group: str
    still_allowed: Callable[[dict | None], Awaitable[bool]]

    def stream_kwargs(self) -> dict:
        """``run_event_stream``'s keyword arguments for this reader."""
        return {"notices_group": self.notices_group, "still_allowed": self.still_allowed}


def stream_access(*, user, thread_id, session_key: str | None = None, token: str | None = None) -> StreamAccess:
    """The re-check of ``user``'s access to ``thread_id`` for a stream they opened with API
    token ``token`` or session ``session_key`` (one of them, or neither for another kind of
    credential). The check is ``async (notice) -> bool``: False when a notice names this
    session as ended (a logout: the session still exists when the notice is sent) or the
    database check fails."""
    check = db_async(socket_still_allowed)
    own_session = session_digest(session_key)

    async def still_allowed(notice: dict | None) -> bool:
        if notice is not None and own_session and notice.get("session") == own_session:
            return False
        return await check(user=user, thread_id=str(thread_id), session_key=session_key, token=token)

    return StreamAccess(notices_group=user_group(user.pk), still_allowed=still_allowed)
