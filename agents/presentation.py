"""How a tool call is shown to people (REST, the thread's messages): one function for both."""

from __future__ import annotations

import json
import logging

from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from chat.selectors import memberships_for_user

from .models import ToolCall
from .risk import COUNTDOWN_S
from .tools.api import DEFAULT_SCOPE_ARGS, ToolSpec
from .tools.scope import MODEL_ASKED_KEY

logger = logging.getLogger(__name__)


def arguments_summary(args: dict, limit: int = 120) -> str:
    """``query='vpn', top_k=3`` — short, for the UI and events."""
    parts = []
    for key, value in args.items():
        text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={text if len(text) <= 60 else text[:57] + '…'}")
    out = ", ".join(parts)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def named_arguments(spec: ToolSpec | None, args: dict, *, user_id, workspace_id) -> dict:
    """``args`` as people see them: the tool's ``name_arguments`` (a knowledge item's id → its
    title, with the requester's access; never what some viewer of the call may not see)
    applied, else ``args`` as they are. A failing namer shows the arguments unnamed."""
    if spec is None or spec.name_arguments is None or not args:
        return args
    try:
        return spec.name_arguments(user_id=user_id, workspace_id=workspace_id, args=dict(args))
    except Exception:  # noqa: BLE001 — a name is a nicety; the call is shown as the model wrote it
        logger.warning("could not name the arguments of %s", spec.name, exc_info=True)
        return args


def shown_named_arguments(row: ToolCall) -> dict:
    """A ledger row's arguments as people see them: scope arguments left out, named by the tool
    (:func:`named_arguments`) with the run's requester's access."""
    from .tools import registry

    shown = shown_arguments(row)
    if not shown:
        return {}
    run = row.run
    return named_arguments(registry.get(row.tool_name), shown, user_id=run.user_id,
                           workspace_id=run.thread.workspace_id)


def shown_summary(row: ToolCall) -> str:
    """The arguments summary of a ledger row as people see it (:func:`shown_named_arguments`)."""
    shown = shown_named_arguments(row)
    return arguments_summary(shown) if shown else ""


def shown_arguments(row: ToolCall) -> dict:
    """The call's arguments as shown to people: the run's scope arguments left out."""
    return {k: v for k, v in (row.arguments or {}).items() if k not in DEFAULT_SCOPE_ARGS and k != MODEL_ASKED_KEY}


def tool_call_presentation(row: ToolCall) -> dict:
    """The shown fields of a ledger row: ``{"status", "summary", "is_error", "risk_level",
    "env_context" ("" or a tier), "requested_at" (ISO 8601 or None), "countdown_s" (10 for
    dangerous calls, else 0), "arguments_summary" (scope arguments hidden, named by the tool:
    :func:`shown_summary`)}``."""
    return {
        "status": row.status,
        "summary": row.summary,
        "is_error": row.is_error,
        "risk_level": row.risk_level,
        "env_context": row.env_context,
        "requested_at": row.requested_at.isoformat() if row.requested_at else None,
        "countdown_s": COUNTDOWN_S if row.risk_level == "dangerous" else 0,
        "arguments_summary": shown_summary(row),
    }


# -- errors as each viewer may see them --------------------------------------------------------
#: Codes whose messages are the platform's own words (no upstream text, no addresses, no
#: configuration): shown to everyone as they are.
OWN_WORDS = frozenset({
    "budget_exceeded", "forbidden", "interrupted", "not_started", "model_not_allowed", "output_limit",
    "stop_unconfirmed", "agent_run_lost", "agent_cancelled", "cancelled", "superseded",
})

#: What a member is told instead of an upstream error: what happened and what to do.
GENERIC = {
    "auth_failed": _("The AI provider refused the platform's credentials. An administrator needs to check the "
                   "provider's API key."),
    "agent_auth": _("The agent refused the platform's credentials. An administrator needs to check its API key."),
    "model_not_found": _("The AI provider does not offer this thread's model. Pick another model, or ask an "
                       "administrator."),
    "rate_limited": _("The AI provider is limiting requests right now. Try again in a minute."),
    "upstream_error": _("The AI provider had an error. Try again in a moment."),
    "stream_interrupted": _("The AI provider's answer broke off. Try again."),
    "bad_request": _("The AI provider rejected the request. Try a shorter or different message, or ask an "
                   "administrator."),
    "unreachable": _("The AI provider could not be reached. Try again later, or ask an administrator."),
    "timeout": _("The AI provider did not answer in time. Try again later."),
    "not_configured": _("This thread's provider is not set up. Ask an administrator, or pick another provider."),
    "agent_failed": _("The agent could not finish this task. Try again, or ask an administrator."),
    "agent_unreachable": _("The agent could not be reached. Try again later, or ask an administrator."),
    "agent_timeout": _("The agent did not answer in time. Try again later."),
    "agent_bad_response": _("The agent sent an answer the platform could not read. Ask an administrator."),
    "internal_error": _("Something went wrong on the platform. Try again; if it keeps happening, tell an "
                      "administrator."),
}


def error_for_viewer(error: dict | None, *, detailed: bool) -> dict | None:
    """An error ``{"code", "message", …}`` (a run's, a message's, ``run.failed``'s) as a viewer
    sees it: ``detailed`` viewers (staff, the workspace's admins) get it as stored — upstream
    detail already key-scrubbed (``chatplatform.redaction``); everyone else gets, for any code not
    in :data:`OWN_WORDS`, a generic actionable message naming the code
    (``"… (error code: auth_failed)"``), never the upstream text."""
    if not error or not isinstance(error, dict):
        return error
    if detailed:
        return own_words(error)
    code = str(error.get("code") or "")
    if code in OWN_WORDS:
        return own_words(error)
    generic = GENERIC.get(code, _("The reply failed. Try again; if it keeps happening, tell an administrator."))
    return {**error, "message": gettext("%(message)s (error code: %(code)s)") % {
        "message": generic, "code": code or "unknown"}}


def own_words(error: dict) -> dict:
    """An error in the platform's own words in the active language: its message was written in
    English where the run failed (a worker has no reader's language); a message marked there
    with ``gettext_noop`` is found in the catalogue and translated, any other stays as written."""
    message = error.get("message")
    if not isinstance(message, str) or not message:
        return error
    translated = gettext(message)
    return error if translated == message else {**error, "message": translated}


def event_for_viewer(event: dict, *, detailed: bool) -> dict:
    """A run event as a viewer may see it (``run.failed``'s ``error`` via :func:`error_for_viewer`)."""
    if detailed or event.get("type") != "run.failed" or not isinstance(event.get("error"), dict):
        return event
    return {**event, "error": error_for_viewer(event["error"], detailed=False)}


def sees_error_details(*, user, workspace_id=None) -> bool:
    """Whether ``user`` sees upstream error detail: staff, or an admin of ``workspace_id`` (of
    any workspace when None — for platform-wide things such as provider status)."""

    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if user.is_staff or user.is_superuser:
        return True
    return memberships_for_user(user=user, workspace_id=workspace_id, admin=True).exists()


def provider_status_for_viewer(status: str, *, detailed: bool) -> str:
    """A provider's health line for a viewer: as stored for ``detailed`` viewers; else only its
    platform's own lines (``ok``, ``disabled``, ``not configured: set …``, ``not available: …``)
    as they are, and a probe's failure only as ``unreachable`` or ``error`` with what to do
    (the upstream text and the address stay with the administrators)."""
    if detailed or not status.startswith(("unreachable", "error")):
        return status
    if status.startswith("unreachable"):
        return gettext("unreachable: the provider could not be reached; ask an administrator")
    return gettext("error: the provider refused the platform's check; ask an administrator")


def provider_status_text(status: str) -> str:
    """A provider's health line (:func:`provider_status_for_viewer`) in the active language for a
    page: the platform's own lines are translated, an upstream detail after ``unreachable:`` or
    ``error:`` stays as written. The API keeps the English lines (clients compare them)."""
    head, sep, detail = status.partition(": ")
    if status == "disabled":
        return gettext("disabled")
    if head == "not configured" and detail.startswith("set "):
        return gettext("not configured: set %(variable)s") % {"variable": detail.removeprefix("set ")}
    if status == "not configured: enter an API key in the admin":
        return gettext("not configured: enter an API key in the admin")
    if head == "not available":
        return gettext("not available: this version has no adapter for the provider's kind")
    if status in ("unreachable: the provider could not be reached; ask an administrator",
                  "error: the provider refused the platform's check; ask an administrator"):
        return gettext(status)
    if sep and head == "unreachable":
        return gettext("unreachable: %(detail)s") % {"detail": detail}
    if sep and head == "error":
        return gettext("error: %(detail)s") % {"detail": detail}
    return status
