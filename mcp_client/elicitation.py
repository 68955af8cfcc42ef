"""An MCP server's question during a tool call (``elicitation/create``) as a card in the chat.

The call stays open on its worker while the person answers: :func:`asker` builds the tool
thread's ``elicit(params) -> ElicitResult`` (``mcp_client.runtime`` hands it the server's
requests), which stores an :class:`~mcp_client.models.MCPElicitation`, publishes
``elicitation.requested`` and polls the row until the person answers (:func:`elicitation_answer`,
from any web process), ``MCP_ELICITATION_TIMEOUT_S`` passes (the server is told ``cancel``,
reason ``expired``) or the run gives up on the call. Then ``elicitation.resolved``.

Declined at once, with an audit row (kind ``mcp_call``): an unattended run (:func:`run_unattended`:
an API ``/v1`` run or a scheduled run — nobody watches the chat), more than
``MCP_ELICITATIONS_PER_CALL`` questions in one call (a server asking in a loop), a URL-mode
request or a schema the card cannot show (MCP's restricted schema is a flat object of string,
number, integer, boolean and enum properties).

Sensitive fields (:func:`is_sensitive`): ``format: password``, or a name or title that says
password, passphrase, secret, token, API key, credential or private key. They are password
inputs on the card, have no default in events, are ``***`` in ``elicitation.resolved`` and
are never logged; every answer is stored only Fernet-encrypted until the worker took it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import timedelta

import jsonschema
import mcp_types as types
from django.conf import settings
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.audit import audit_record
from agents.models import AuditEvent
from agents.provider_keys import decrypt_key, encrypt_key
from agents.tools import ToolContext

from .models import MCPElicitation, MCPServer

logger = logging.getLogger(__name__)

POLL_S = 0.25  # how often a waiting call looks for the person's answer
MESSAGE_CHARS = 2000  # the server's message as shown
MAX_FIELDS = 30
SENSITIVE_RE = re.compile(r"pass(word|phrase|wd)?\b|passwd|secret|token|api[\s_-]*key|credential|private[\s_-]*key",
                          re.IGNORECASE)
TYPES = ("string", "number", "integer", "boolean")
FORMATS = ("email", "uri", "date", "date-time", "password")


class Unsupported(ValueError):
    """The requested schema is not MCP's restricted form schema."""


class AnswerRefused(ValueError):
    """``code``: ``not_pending`` (answered, expired or declined already) or ``invalid``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def is_sensitive(name: str, prop: dict) -> bool:
    """A field whose value must never be shown or logged: ``format: password``, or a name or
    title naming a password, passphrase, secret, token, API key, credential or private key."""
    if prop.get("format") == "password":
        return True
    return bool(SENSITIVE_RE.search(name.replace("_", " ")) or SENSITIVE_RE.search(str(prop.get("title") or "")))


def fields_from_schema(schema: dict) -> list[dict]:
    """The card's fields from a requested schema: ``[{name, type, title, description,
    required, sensitive, default?, enum?, enum_names?, minimum?, maximum?, min_length?,
    max_length?, format?}]``. Raises Unsupported for anything else than a flat object of
    primitive (and enum) properties."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise Unsupported("the requested schema is not an object")
    props = schema.get("properties") or {}
    if not isinstance(props, dict) or len(props) > MAX_FIELDS:
        raise Unsupported("too many or malformed properties")
    required = set(schema.get("required") or [])
    fields = []
    for name, prop in props.items():
        if not isinstance(prop, dict) or not isinstance(name, str) or not name or len(name) > 100:
            raise Unsupported(f"property {name!r} is malformed")
        kind = prop.get("type")
        enum = prop.get("enum")
        if enum is None and isinstance(prop.get("oneOf"), list):  # titled enum: [{const, title}]
            options = [o for o in prop["oneOf"] if isinstance(o, dict) and "const" in o]
            enum = [str(o["const"]) for o in options]
            prop = {**prop, "enumNames": [str(o.get("title") or o["const"]) for o in options]}
            kind = kind or "string"
        if kind not in TYPES:
            raise Unsupported(f"property {name!r} has type {kind!r}")
        field: dict = {"name": name, "type": kind, "title": str(prop.get("title") or name)[:200],
                       "description": str(prop.get("description") or "")[:500], "required": name in required,
                       "sensitive": is_sensitive(name, prop)}
        if enum is not None:
            if kind != "string" or not isinstance(enum, list) or not enum or len(enum) > 100:
                raise Unsupported(f"property {name!r} has a malformed enum")
            field["enum"] = [str(v) for v in enum]
            names = prop.get("enumNames")
            if isinstance(names, list) and len(names) == len(enum):
                field["enum_names"] = [str(v)[:200] for v in names]
        for key, out in (("minimum", "minimum"), ("maximum", "maximum"), ("minLength", "min_length"),
                         ("maxLength", "max_length")):
            if isinstance(prop.get(key), int | float) and not isinstance(prop.get(key), bool):
                field[out] = prop[key]
        if prop.get("format") in FORMATS and kind == "string":
            field["format"] = prop["format"]
        if "default" in prop and not field["sensitive"] and _fits(field, prop["default"]):
            field["default"] = prop["default"]
        fields.append(field)
    return fields


def _fits(field: dict, value) -> bool:
    """A default of the field's own type (and one of its options): a card shows no other."""
    kind = field["type"]
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int)
    if kind == "number":
        return isinstance(value, int | float)
    return isinstance(value, str) and ("enum" not in field or value in field["enum"])


def _schema_of(fields: list[dict]) -> dict:
    """The JSON schema an answer must satisfy, rebuilt from the card's fields only."""
    props = {}
    for f in fields:
        prop: dict = {"type": f["type"]}
        if "enum" in f:
            prop["enum"] = f["enum"]
        for key, out in (("minimum", "minimum"), ("maximum", "maximum"), ("min_length", "minLength"),
                         ("max_length", "maxLength")):
            if key in f:
                prop[out] = f[key]
        if f.get("format") in ("email", "date", "date-time"):
            prop["format"] = f["format"]
        props[f["name"]] = prop
    return {"type": "object", "properties": props, "additionalProperties": False,
            "required": [f["name"] for f in fields if f["required"]]}


def validate_answer(fields: list[dict], content) -> dict:
    """The accepted values checked against the card's fields; raises AnswerRefused
    (``invalid``, naming the field — never its value)."""
    if not isinstance(content, dict):
        raise AnswerRefused("invalid", "content must be an object")
    validator = jsonschema.Draft202012Validator(_schema_of(fields),
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    error = next(iter(sorted(validator.iter_errors(content), key=lambda e: list(e.path))), None)
    if error is not None:
        where = ".".join(str(p) for p in error.path) or "content"
        if error.validator == "required":
            raise AnswerRefused("invalid", f"{where}: a required field is missing")
        if error.validator == "additionalProperties":
            raise AnswerRefused("invalid", f"{where}: unknown field")
        raise AnswerRefused("invalid", f"{where}: not a valid value ({error.validator})")
    return content


def redacted(fields: list[dict], content: dict | None) -> dict:
    """The values as events may show them: sensitive ones as ``***``."""
    hidden = {f["name"] for f in fields if f.get("sensitive")}
    return {k: ("***" if k in hidden else v) for k, v in (content or {}).items()}


def run_unattended(run_id) -> bool:
    """Nobody watches the run's chat: an API ``/v1`` run or a scheduled run."""
    from openai_api.models import ApiRun
    from schedules.models import ScheduleFire

    return ApiRun.objects.filter(run_id=run_id).exists() or ScheduleFire.objects.filter(run_id=run_id).exists()


def timeout_s() -> float:
    return float(getattr(settings, "MCP_ELICITATION_TIMEOUT_S", 600))


def asker(ctx: ToolContext, slug: str):
    """The tool thread's ``elicit(params) -> ElicitResult`` for one call of server ``slug``'s
    tool in ``ctx``'s run (counts the call's questions)."""
    asked = [0]

    def elicit(params: types.ElicitRequestParams) -> types.ElicitResult:
        asked[0] += 1
        server = MCPServer.objects.filter(slug=slug).first() or MCPServer(slug=slug, name=slug)
        message = str(getattr(params, "message", "") or "")[:MESSAGE_CHARS]
        if getattr(params, "mode", "form") != "form":
            return _declined(ctx, server, message, "unsupported")
        try:
            fields = fields_from_schema(params.requested_schema)
        except Unsupported as exc:
            logger.info("MCP server %s: elicitation declined: %s", server.slug, exc)
            return _declined(ctx, server, message, "unsupported")
        if asked[0] > int(getattr(settings, "MCP_ELICITATIONS_PER_CALL", 3)):
            return _declined(ctx, server, message, "limit")
        if run_unattended(ctx.run_id):
            return _declined(ctx, server, message, "unattended")
        return _ask(ctx, server, message, fields)

    return elicit


def _audit(ctx: ToolContext, server: MCPServer, row: MCPElicitation) -> None:
    audit_record(kind=AuditEvent.Kind.MCP_CALL, user_id=ctx.user_id, workspace_id=ctx.workspace_id,
                 thread_id=ctx.thread_id, run=row.run, tool_name=server.slug,
                 detail={"elicitation_id": str(row.pk), "action": row.status, "reason": row.reason,
                         "server": server.slug})


def _declined(ctx: ToolContext, server: MCPServer, message: str, reason: str) -> types.ElicitResult:
    row = MCPElicitation.objects.create(
        run_id=ctx.run_id, tool_call_id=ctx.tool_call_id or None, user_id=ctx.user_id, server_slug=server.slug,
        server_name=server.name, message=message, status=MCPElicitation.Status.DECLINE, reason=reason,
        expires_at=timezone.now(), resolved_at=timezone.now())
    _audit(ctx, server, row)
    ctx.emit("elicitation.resolved", elicitation_id=str(row.pk), action="decline", reason=reason,
             server=server.slug, server_name=server.name, message=message)
    return types.ElicitResult(action="decline")


def _ask(ctx: ToolContext, server: MCPServer, message: str, fields: list[dict]) -> types.ElicitResult:
    wait_s = timeout_s()
    row = MCPElicitation.objects.create(
        run_id=ctx.run_id, tool_call_id=ctx.tool_call_id or None, user_id=ctx.user_id, server_slug=server.slug,
        server_name=server.name, message=message, fields=fields, expires_at=timezone.now() + timedelta(seconds=wait_s))
    ctx.emit("elicitation.requested", elicitation_id=str(row.pk), server=server.slug, server_name=server.name,
             message=message, fields=fields, expires_at=row.expires_at.isoformat())
    rows = MCPElicitation.objects.filter(pk=row.pk)
    deadline = time.monotonic() + wait_s
    with ctx.person_wait.held():
        while True:
            current = rows.values("status", "reason", "answer_encrypted").first()
            if current is None:  # the run was deleted under it
                return types.ElicitResult(action="cancel")
            if current["status"] != MCPElicitation.Status.PENDING:
                break
            ending = "cancelled" if ctx.cancelled.is_set() else "expired" if time.monotonic() >= deadline else ""
            if ending and rows.filter(status=MCPElicitation.Status.PENDING).update(
                    status=MCPElicitation.Status.CANCEL, reason=ending, resolved_at=timezone.now()):
                current = {"status": MCPElicitation.Status.CANCEL, "reason": ending, "answer_encrypted": ""}
                break
            ctx.cancelled.wait(POLL_S)
    action, reason = current["status"], current["reason"]
    content = None
    if action == MCPElicitation.Status.ACCEPT:
        content = json.loads(decrypt_key(current["answer_encrypted"]) or "{}")
        rows.update(answer_encrypted="")  # taken: not kept, even encrypted
    if reason != "answered":
        row.status, row.reason = action, reason
        _audit(ctx, server, row)
    ctx.emit("elicitation.resolved", elicitation_id=str(row.pk), action=action, reason=reason,
             **({"content": redacted(fields, content)} if content is not None else {}))
    return types.ElicitResult(action=action, content=content)


def elicitation_answer(*, user, elicitation_id, action: str, content=None) -> MCPElicitation:
    """The run's person answers (``accept`` with ``content``, ``decline``, ``cancel``).
    Http404 for anyone else's or an unknown id; AnswerRefused ``not_pending`` when it was
    answered, declined or expired already, ``invalid`` for values that do not fit its fields."""
    row = MCPElicitation.objects.filter(pk=elicitation_id, user=user).first() if user.is_authenticated else None
    if row is None:
        raise Http404
    if row.status != MCPElicitation.Status.PENDING or row.expires_at <= timezone.now():
        raise AnswerRefused("not_pending", _("This question was already answered or has expired."))
    if action not in ("accept", "decline", "cancel"):
        raise AnswerRefused("invalid", "action must be accept, decline or cancel")
    secret = ""
    if action == "accept":
        secret = encrypt_key(json.dumps(validate_answer(row.fields, content if content is not None else {})))
    done = MCPElicitation.objects.filter(pk=row.pk, status=MCPElicitation.Status.PENDING).update(
        status=action, reason="answered", answer_encrypted=secret, resolved_at=timezone.now())
    if not done:
        raise AnswerRefused("not_pending", _("This question was already answered or has expired."))
    row.refresh_from_db()
    return row
