"""One error type for everything a service refuses.

A service raises :class:`ServiceError` (or a subclass that only names its app:
``RunRejected``, ``KnowledgeRejected``, ``UIContextError``); it is mapped once to REST
(``chatplatform.api.exception_handler``: ``{"error": {"code", "message"}}`` with ``status``
and ``Retry-After``) and once to the websocket (``ThreadConsumer``: an ``error`` event with
``code``, ``message`` and ``extra``; the socket stays open).
"""

from __future__ import annotations


class ServiceError(Exception):
    """A request the server refuses.

    ``code``: a stable machine-readable name (``run_in_progress``, ``not_allowed``…);
    ``message``: a sentence for the user; ``status``: the HTTP status (400, 403, 404, 409,
    413, 422, 429); ``retry_after``: seconds, for 429s (``Retry-After`` / ``retry_after``);
    ``extra``: more fields for the websocket ``error`` event (e.g. ``tool_call_id``).
    """

    def __init__(self, code: str, message: str, status: int = 400, *, retry_after: float | None = None,
                 **extra) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.extra = extra
