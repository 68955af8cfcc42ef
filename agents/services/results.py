"""What the use cases return and raise."""

from __future__ import annotations

from dataclasses import dataclass

from agents.models import Run
from chat.models import Message
from chatplatform.errors import ServiceError


class RunRejected(ServiceError):
    """A send, cancel or decision the server refuses (``chatplatform.errors.ServiceError``)."""


@dataclass
class RunCreated:
    run: Run
    user_message: Message | None  # None only for a run that continues after client tool results
