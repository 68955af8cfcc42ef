"""The run use cases — what a person (or an API client) asks of the platform, each one
transaction: send (``run_create``), edit and regenerate (``sends``), cancel (``runs``), decide a
parked call (``decisions``), and the thread changes that touch runs or governance (``threads``:
branch select, duplicate, settings with a UI context). The interface layer (views, the
consumer, ``/v1``, management commands) calls these; nothing below them imports them."""

from .decisions import approval_decide, tool_call_decide
from .runs import run_cancel
from .sends import (
    MAX_MESSAGE_CHARS,
    RunCreated,
    RunRejected,
    message_edit,
    message_regenerate,
    model_check,
    run_create,
)
from .threads import thread_branch_select, thread_changes_check, thread_duplicate, thread_update

__all__ = [
    "MAX_MESSAGE_CHARS",
    "RunCreated",
    "RunRejected",
    "approval_decide",
    "message_edit",
    "message_regenerate",
    "model_check",
    "run_cancel",
    "run_create",
    "thread_branch_select",
    "thread_duplicate",
    "thread_changes_check",
    "thread_update",
    "tool_call_decide",
]
