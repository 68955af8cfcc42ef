"""The OpenAI-compatible API's logic, as plain functions (the views stay thin).

A request becomes a platform run of the caller, with the platform's governance intact:

* ``model`` names a provider the caller may use: ``"<provider>/<model>"``, ``"<provider>"``
  (its default model), a model name listed by exactly one enabled provider, or
  ``"default"`` (``COMPAT_API_DEFAULT_MODEL``, else the caller's default model as in the chat
  UI: :func:`_default_model`).
* The thread: ``X-Thread-Id`` header, ``metadata.thread_id``, or ``user`` holding a thread
  id → that thread (yours, writable; else 404). Otherwise the thread an earlier answer left
  whose conversation is exactly the request's messages up to the last assistant message
  (OpenAI clients resend the history), else a new thread marked API-created that gets the
  earlier messages of the request as its history.
* The new part of the request (after the last assistant message): ``tool`` messages are
  results of client-declared tool calls, ``user`` messages the new message (several are
  joined), ``system``/``developer`` messages are put in front of it as the client's
  instructions (the platform's own system prompt stays in charge).
* ``tools`` (``type: function``) are client-declared: offered to the model, never executed
  here; a name that is also a platform tool is refused (400).

Errors raise :class:`ApiRejected` (``code``, ``message``, HTTP ``status``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import Http404

from agents.loop.prompt import lost_attempt
from agents.models import LLMModel, Provider, Run
from agents.presentation import sees_error_details
from agents.presets import preset_model_ids, preset_pick
from agents.provider_keys import key_status
from agents.selectors import (
    default_model_for,
    model_allowed,
    model_list_for_provider,
    role_names_for_user,
)
from agents.services import run_create
from chat.models import Attachment, Message, Thread, Workspace
from chat.selectors import memberships_for_user, thread_get_for_user, workspace_get_for_user
from chat.services import message_create, thread_create, title_from_message
from chatplatform.errors import ServiceError
from llm import ToolDefinition

from .models import ApiRun, ApiThread

ROLES = {"system", "developer", "user", "assistant", "tool"}
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128


class ApiRejected(ServiceError):
    """A request the OpenAI-compatible API refuses (``chatplatform.errors.ServiceError``)."""


@dataclass
class Started:
    """A run started for one request."""

    run_id: str
    thread_id: str
    model_id: str
    created: int
    messages: list[dict]  # the request's messages, normalised (for the conversation digest)
    client_tool_names: set[str] = field(default_factory=set)
    detailed: bool = False  # the caller sees upstream error detail (staff, the workspace's admins)


# --- request parsing --------------------------------------------------------------------------
def _text(content, where: str) -> str:
    """OpenAI message content → text (:func:`_content` without images: refused)."""
    if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
        raise ApiRejected("unsupported_content", f"{where}: images are accepted in user messages only.", param=where)
    return _content(content, where)[0]


_DATA_URL = re.compile(r"data:(image/[a-z0-9.+-]+);base64,(.*)", re.S | re.I)


def _image(part: dict, where: str) -> tuple[str, bytes]:
    """An ``image_url`` part → ``(media type, bytes)``, checked as attachments are
    (``chatplatform.images``: the type from the bytes, the pixel limit before decoding).
    Only ``data:`` URLs: the server never fetches a URL a client names."""
    from chat.attachments import limits
    from chatplatform.images import ImageRejected, inspect

    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        raise ApiRejected("invalid_request_error", f"{where}.image_url.url must be a string.", param=f"{where}.image_url")
    match = _DATA_URL.fullmatch(url.strip())
    if match is None:
        raise ApiRejected("unsupported_content", f"{where}: only base64 data URLs are accepted for images "
                          '("data:image/png;base64,…"); the server does not fetch image URLs.', param=f"{where}.image_url")
    lim = limits()
    encoded = match.group(2)
    if len(encoded) * 3 // 4 > lim["max_bytes"]:
        raise ApiRejected("too_large", f"{where}: the image is larger than the {lim['max_bytes'] // (1024 * 1024)} MB "
                          "limit.", 413, param=f"{where}.image_url")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (ValueError, binascii.Error):
        raise ApiRejected("invalid_request_error", f"{where}: the image data is not valid base64.",
                          param=f"{where}.image_url") from None
    try:
        info = inspect(raw, max_pixels=lim["max_pixels"])
    except ImageRejected as exc:
        raise ApiRejected("invalid_image", f"{where}: {exc.message}", 413 if exc.code == "image_too_large" else 400,
                          param=f"{where}.image_url") from None
    return info.media_type, raw


def _content(content, where: str) -> tuple[str, list[tuple[str, bytes]]]:
    """OpenAI message content → ``(text, images)``. Strings, or lists of ``{"type": "text",
    "text"}`` and ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,…"}}``
    parts (``images``: ``[(media type, bytes)]``); other parts (audio, files) are refused."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        out, images = [], []
        for n, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("text", "input_text") and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, dict) and part.get("type") == "image_url":
                images.append(_image(part, f"{where}.content[{n}]"))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiRejected("unsupported_content",
                                  f"{where}: only text and image_url content is supported (got {kind!r}).")
        return "".join(out), images
    raise ApiRejected("invalid_request_error", f"{where}: content must be a string or a list of content parts.")


def normalise_messages(raw) -> list[dict]:
    """``[{"role", "content", "tool_calls"?, "tool_call_id"?}]`` with text content and
    tool calls as ``[{"id", "name", "arguments"}]``. Raises ApiRejected for bad shapes."""
    if not isinstance(raw, list) or not raw:
        raise ApiRejected("invalid_request_error", "messages: a non-empty list is required.")
    out = []
    for n, msg in enumerate(raw):
        where = f"messages[{n}]"
        if not isinstance(msg, dict):
            raise ApiRejected("invalid_request_error", f"{where}: each message must be an object.", param=where)
        if not isinstance(msg.get("role"), str) or msg["role"] not in ROLES:
            raise ApiRejected("invalid_request_error", f"{where}: role must be one of {', '.join(sorted(ROLES))}.",
                              param=f"{where}.role")
        if msg["role"] == "user":
            text, images = _content(msg.get("content"), where)
            item = {"role": "user", "content": text, **({"images": images} if images else {})}
        else:
            item = {"role": msg["role"], "content": _text(msg.get("content"), where)}
        if msg["role"] == "assistant" and msg.get("tool_calls"):
            if not isinstance(msg["tool_calls"], list):
                raise ApiRejected("invalid_request_error", f"{where}: tool_calls must be a list.",
                                  param=f"{where}.tool_calls")
            calls = []
            for call in msg["tool_calls"]:
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not call.get("id") or not fn.get("name") \
                        or not isinstance(call["id"], str | int) or not isinstance(fn["name"], str):
                    raise ApiRejected("invalid_request_error", f"{where}: every tool call needs an id and a function name.",
                                      param=f"{where}.tool_calls")
                args = fn.get("arguments")
                calls.append({"id": str(call["id"]), "name": str(fn["name"]),
                              "arguments": args if isinstance(args, str) else json.dumps(args or {})})
            item["tool_calls"] = calls
        if msg["role"] == "tool":
            if not msg.get("tool_call_id") or not isinstance(msg["tool_call_id"], str | int):
                raise ApiRejected("invalid_request_error", f"{where}: tool messages need a tool_call_id.")
            item["tool_call_id"] = str(msg["tool_call_id"])
        out.append(item)
    return out


def client_tools(raw) -> list[ToolDefinition]:
    """The request's ``tools`` as ToolDefinitions (function tools only)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS:
        raise ApiRejected("invalid_request_error", f"tools: a list of at most {MAX_TOOLS} function tools.")
    out, seen = [], set()
    for n, tool in enumerate(raw):
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(fn, dict) or not TOOL_NAME.match(str(fn.get("name", ""))):
            raise ApiRejected("invalid_request_error",
                              f"tools[{n}]: a function tool with a name of letters, digits, _ or - (≤ 64) is required.")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ApiRejected("invalid_request_error", f"tools[{n}].function.parameters must be a JSON schema object.")
        if fn["name"] in seen:
            raise ApiRejected("invalid_request_error", f"tools: {fn['name']!r} is declared twice.")
        seen.add(fn["name"])
        out.append(ToolDefinition(fn["name"], str(fn.get("description") or ""), params))
    return out


def digest(messages: list[dict]) -> str:
    """A stable fingerprint of a conversation as the client sees it (roles, text without
    surrounding whitespace, tool calls, tool results)."""
    canon = [[m["role"], (m.get("content") or "").strip(),
              [[c["id"], c["name"], c["arguments"]] for c in m.get("tool_calls") or []], m.get("tool_call_id") or "",
              # images only when there are some: the fingerprints of text-only chats stay as they were
              *([[hashlib.sha256(raw).hexdigest() for _t, raw in m["images"]]] if m.get("images") else [])]
             for m in messages]
    return hashlib.sha256(json.dumps(canon, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


# --- model and workspace ----------------------------------------------------------------------
def model_id(provider: Provider, model: str) -> str:
    return f"{provider.slug}/{model}" if model else provider.slug


SHOWN_NAME_CHARS = 100  # of a model name echoed in an error message


def _shown(name: str) -> str:
    """``name`` quoted for an error message, cut to ``SHOWN_NAME_CHARS`` characters."""
    return repr(name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "…")


def model_resolve(*, name: str, user=None, workspace: str = "") -> tuple[Provider, str]:
    """``(provider, model name)`` for the request's ``model``; ApiRejected ``model_not_found``
    (404, OpenAI's code for "does not exist or you do not have access to it") when nothing
    enabled fits, when ``user`` (when given) has no role that may use it
    (``agents.selectors.model_allowed``; the thread's workspace is checked again when the
    run is created), or when its provider is not set up (``key_status``: its key is
    missing, so ``GET /v1/models`` leaves it out) — refused before anything is written, where
    a run would only fail ``not_configured``. The name is echoed cut to
    ``SHOWN_NAME_CHARS``."""
    name = (name or "").strip()
    if not name:
        raise ApiRejected("invalid_request_error", "model is required.")
    roles = role_names_for_user(user=user) if user is not None else None
    if name == "default":
        name = getattr(settings, "COMPAT_API_DEFAULT_MODEL", "") or ""
        if not name:
            return _default_model(roles, user=user, workspace=workspace)
    slug, _, model = name.partition("/")
    provider = Provider.objects.filter(slug=slug, enabled=True).first()
    if provider is not None:
        model = model or provider.default_model
    else:
        # A model row of one enabled provider, else one enabled provider's default model (a
        # provider with no rows offers only that).
        listed = [(m.provider, m.name) for m in LLMModel.objects.filter(name=name, enabled=True, provider__enabled=True)
                  .select_related("provider")[:2]]
        if not listed:
            listed = [(p, name) for p in Provider.objects.filter(default_model=name, enabled=True)[:2]]
        if len(listed) != 1:
            hint = "several providers list it; name it as provider/model" if listed else "see GET /v1/models"
            raise ApiRejected("model_not_found", f"The model {_shown(name)} does not exist or you do not have access "
                              f"to it ({hint}).", 404)
        provider, model = listed[0]
    if not _usable(provider, model, roles):
        raise ApiRejected("model_not_found", f"The model {_shown(name)} is not enabled for you on this platform "
                          "(see GET /v1/models).", 404)
    if key_status(provider) is not None:
        raise ApiRejected("model_not_found", f"The model {_shown(name)} is not set up on this platform yet: its "
                          "provider has no API key (see GET /v1/models, or ask an administrator).", 404)
    return provider, model


ASSISTANT_PREFIX = "assistant:"  # a workspace assistant's model id (agents.presets)


def _str(value) -> str | None:
    return None if value is None else str(value)


def assistant_resolve(*, name: str, user):
    """The ``agents.presets.Pick`` of a model id ``assistant:<id>``: ApiRejected
    ``model_not_found`` (404) for one the caller may not see (another workspace's, another
    user's private one, unknown); ``assistant_disabled`` (403), ``model_not_allowed`` (403:
    its model is not enabled for the caller's role) with the reason."""
    if user is None:
        raise ApiRejected("model_not_found", f"The model {_shown(name)} does not exist or you do not have access "
                          "to it (see GET /v1/models).", 404)
    try:
        return preset_pick(user=user, preset_id=name[len(ASSISTANT_PREFIX):])
    except Http404 as exc:
        raise ApiRejected("model_not_found", f"The model {_shown(name)} does not exist or you do not have access "
                          "to it (see GET /v1/models).", 404) from exc
    except ServiceError as exc:
        raise ApiRejected(exc.code, exc.message, exc.status) from exc


def _usable(provider: Provider, model: str, roles) -> bool:
    """Whether ``model`` of ``provider`` may run for a caller with ``roles``
    (``agents.selectors.model_allowed``); ``roles`` None (no caller): unless an administrator
    disabled its row."""
    if roles is None:
        return not LLMModel.objects.filter(provider=provider, name=model, enabled=False).exists()
    return model_allowed(provider=provider, model=model, role_names=roles)


def _default_model(roles, *, user=None, workspace: str = "") -> tuple[Provider, str]:
    """``"default"`` without ``COMPAT_API_DEFAULT_MODEL``: with a caller, the model a new chat
    of theirs starts with in the chat UI (``agents.selectors.default_model_for``: their own
    default, the workspace's, the first set-up real provider, else Offline) in the workspace
    the new thread goes to (``workspace``: the ``X-Workspace`` header, else their first);
    without one, the first enabled provider by name that is set up (its key is there:
    ``key_status``) and whose default model an administrator did not disable. ApiRejected
    ``model_not_found`` (404) when none is."""
    if user is not None:
        memberships = list(memberships_for_user(user=user))
        chosen = next((m for m in memberships if workspace and workspace in (m.workspace.slug, str(m.workspace_id))),
                      memberships[0] if memberships else None)
        if chosen is not None:
            provider, model, _ = default_model_for(user=user, workspace_id=chosen.workspace_id)
            if provider is not None:
                return provider, model
        raise ApiRejected("model_not_found", "No enabled provider is set up for you, so \"default\" names none "
                          "(see GET /v1/models, or ask an administrator to set COMPAT_API_DEFAULT_MODEL).", 404)
    enabled = list(Provider.objects.filter(enabled=True).order_by("name"))
    if not enabled:
        raise ApiRejected("model_not_found", "No provider is enabled on this platform.", 404)
    for provider in enabled:
        if key_status(provider) is None and _usable(provider, provider.default_model, roles):
            return provider, provider.default_model
    raise ApiRejected("model_not_found", "No enabled provider is set up for you, so \"default\" names none "
                      "(see GET /v1/models, or ask an administrator to set COMPAT_API_DEFAULT_MODEL).", 404)


def model_list(*, user=None) -> list[dict]:
    """``GET /v1/models`` entries: each enabled provider that is set up (its key is there:
    ``key_status``; a run on any other could only fail) with its default model, and each of
    its enabled models, as ``provider/model`` — with ``user``, only what one of their roles
    may use, and the workspace assistants they may use, as ``assistant:<id>``. First, when it
    names a model, ``default`` (what ``model="default"`` runs: :func:`model_resolve`), owned by
    that model's provider, so a client that offers only listed ids can still follow the
    platform's default."""
    roles = role_names_for_user(user=user) if user is not None else None
    out = []
    try:
        provider, _ = model_resolve(name="default", user=user)
    except ApiRejected:
        pass
    else:
        out.append({"id": "default", "object": "model", "created": int(provider.created_at.timestamp()),
                    "owned_by": provider.slug})
    for provider in Provider.objects.filter(enabled=True).order_by("slug"):
        if key_status(provider) is not None:
            continue
        created = int(provider.created_at.timestamp())
        if roles is None or model_allowed(provider=provider, model="", role_names=roles):
            out.append({"id": provider.slug, "object": "model", "created": created, "owned_by": provider.slug})
        for m in model_list_for_provider(provider=provider, role_names=roles):
            out.append({"id": model_id(provider, m.name), "object": "model", "created": created,
                        "owned_by": provider.slug})
    if user is not None:  # the workspace assistants the caller may use, as "assistant:<id>"
        out.extend({k: v for k, v in entry.items() if k != "name"} for entry in preset_model_ids(user=user))
    return out


def _workspace_for(user, hint: str, provider: Provider, model: str) -> Workspace:
    """The workspace of a new API-created thread: the ``X-Workspace`` header's (slug or id;
    ApiRejected ``not_found`` 404 when not theirs), else the caller's first workspace (oldest
    membership) whose role may use the model — so a model allowed to them only in another
    workspace than their first is not refused. ApiRejected ``model_not_found`` 404 when no
    workspace of theirs allows it, ``forbidden`` 403 with no membership at all."""
    if hint:
        try:
            return workspace_get_for_user(user=user, workspace=hint)
        except Http404 as exc:
            raise ApiRejected("not_found", f"No workspace {hint!r} of yours.", 404) from exc
    memberships = list(memberships_for_user(user=user))
    if not memberships:
        raise ApiRejected("forbidden", "You are not a member of any workspace.", 403)
    for membership in memberships:
        if model_allowed(provider=provider, model=model, role_names=[membership.role.name], memo=provider):
            return membership.workspace
    raise ApiRejected("model_not_found", f"The model {model_id(provider, model)!r} is not enabled for you in any of "
                      "your workspaces (see GET /v1/models).", 404)


# --- starting a run ---------------------------------------------------------------------------
def _thread_hint(body: dict, header: str) -> str:
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    for candidate in (header, metadata.get("thread_id"), body.get("user")):
        if isinstance(candidate, str) and candidate.strip():
            try:
                return str(uuid.UUID(candidate.strip()))
            except ValueError:
                if candidate is not body.get("user"):  # "user" may be any end-user label
                    raise ApiRejected("not_found", "No such thread.", 404) from None
    return ""


def _import_history(thread: Thread, messages: list[dict]) -> None:
    """Store a client's earlier conversation in a new thread (canonical messages)."""
    for m in messages:
        if m["role"] in ("system", "developer"):
            continue  # folded into the new user message (see _new_part)
        role = m["role"]
        fields = {"status": Message.Status.COMPLETE}
        if m.get("tool_calls"):
            fields["tool_calls"] = m["tool_calls"]
        if m.get("tool_call_id"):
            fields["tool_call_id"] = m["tool_call_id"]
        message = message_create(thread_id=thread.pk, role=role, content=m["content"], **fields)
        if m.get("images"):
            ids = _store_images(thread, thread.owner, m["images"])
            Attachment.objects.filter(pk__in=ids).update(message=message)


def _store_images(thread: Thread, user, images: list[tuple[str, bytes]]) -> list[str]:
    """Store a request's images as pending attachments of ``thread`` (checked and prepared as
    uploads are: ``chat.attachments.attachment_create``); their ids. ApiRejected for a refusal."""
    from chat.attachments import attachment_create

    ids = []
    for n, (media_type, raw) in enumerate(images, start=1):
        ext = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif"}[media_type]
        try:
            ids.append(str(attachment_create(user=user, thread=thread, filename=f"image-{n}{ext}", data=raw).pk))
        except ServiceError as exc:
            raise ApiRejected(exc.code, exc.message, exc.status) from exc
    return ids


def _split(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """(everything up to the last assistant message, what came after it)."""
    cut = max((n + 1 for n, m in enumerate(messages) if m["role"] == "assistant"), default=0)
    return messages[:cut], messages[cut:]


def _instructions(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] in ("system", "developer") and m["content"].strip()]


def _new_images(tail: list[dict]) -> list[tuple[str, bytes]]:
    return [image for m in tail if m["role"] == "user" for image in m.get("images") or ()]


def _new_part(tail: list[dict], earlier_instructions: list[str] = ()) -> tuple[str, list[dict]]:
    """``(user content, tool results)`` of the request's new part. The client's
    system/developer messages lead the user content (stored system messages never reach
    the model: the platform builds its own system prompt)."""
    instructions = [*earlier_instructions, *_instructions(tail)]
    said = [m["content"] for m in tail if m["role"] == "user" and m["content"].strip()]
    results = [{"tool_call_id": m["tool_call_id"], "content": m["content"]} for m in tail if m["role"] == "tool"]
    content = "\n\n".join(said)
    if instructions and content:
        content = "Instructions from the API client:\n" + "\n\n".join(instructions) + "\n\n---\n\n" + content
    return content, results


def completion_start(*, user, body: dict, thread_header: str = "", workspace_header: str = "",
                     user_agent: str = "") -> Started:
    """Validate a chat completion request and start its run. Raises ApiRejected."""
    if not isinstance(body, dict):
        raise ApiRejected("invalid_request_error", "The body must be a JSON object.")
    if body.get("n") not in (None, 1):
        raise ApiRejected("invalid_request_error", "n: only 1 choice is supported.")
    messages = normalise_messages(body.get("messages"))
    tools = client_tools(body.get("tools"))
    if body.get("tool_choice") == "none":
        tools = []
    if not isinstance(body.get("model"), str | None):
        raise ApiRejected("invalid_request_error", "model must be a string.", param="model")
    name = (body.get("model") or "").strip()
    pick = assistant_resolve(name=name, user=user) if name.startswith(ASSISTANT_PREFIX) else None
    if pick is not None:
        provider, model = pick.provider, pick.model or pick.provider.default_model
    else:
        provider, model = model_resolve(name=name, user=user, workspace=workspace_header)
    _refuse_platform_names(tools)
    prefix, tail = _split(messages)
    content, results = _new_part(tail)
    images = _new_images(tail)
    if not content and not results and not images:
        raise ApiRejected("invalid_request_error", "The request has no new user message or tool result after the last "
                          "assistant message.")
    hint = _thread_hint(body, thread_header)
    with transaction.atomic():
        # run_create locks user → thread; this transaction writes the thread before it, so it
        # takes the user's lock first too (the same order everywhere: no deadlock).
        list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user.pk).values_list("pk", flat=True))
        if hint:
            try:
                thread = thread_get_for_user(user=user, thread_id=hint, write=True)
            except Http404 as exc:
                raise ApiRejected("not_found", "No such thread.", 404) from exc
        else:
            known = (ApiThread.objects.select_related("thread").filter(user=user, digest=digest(prefix)).first()
                     if prefix else None)
            if known is not None and memberships_for_user(user=user, workspace_id=known.thread.workspace_id).exists():
                thread = known.thread
            else:
                workspace = (Workspace.objects.get(pk=pick.workspace_id) if pick is not None
                             else _workspace_for(user, workspace_header, provider, model))
                first_user = next((m["content"] for m in messages if m["role"] == "user" and m["content"].strip()), "")
                thread = thread_create(workspace=workspace, owner=user, provider=provider, model=model,
                                       title=title_from_message(first_user) if first_user else "API chat")
                ApiThread.objects.create(thread=thread, user=user, client=user_agent[:200])
                _import_history(thread, prefix)
                content, results = _new_part(tail, _instructions(prefix))
        _check_results(thread, results)
        assistant_id = pick.preset_id if pick is not None else None
        if pick is not None and thread.workspace_id != pick.workspace_id:  # another workspace's thread
            raise ApiRejected("model_not_found", f"The model {_shown(name)} does not exist in this thread's workspace "
                              "(see GET /v1/models).", 404)
        if (thread.provider_id, thread.model, _str(thread.assistant_id)) != (provider.pk, model, assistant_id):
            thread.provider, thread.model, thread.assistant_id = provider, model, assistant_id
            thread.save(update_fields=["provider", "model", "assistant", "updated_at"])
        try:
            attachments = _store_images(thread, user, images) if images else None
            created = run_create(thread=thread, user=user, content=content, tool_results=results,
                                 attachments=attachments)
        except ServiceError as exc:  # rate limits, a run in progress, a refused UI context…
            raise ApiRejected(exc.code, exc.message, exc.status, retry_after=exc.retry_after) from exc
        if tools:
            ApiRun.objects.create(run=created.run, tools=[{"name": t.name, "description": t.description,
                                                            "parameters": t.parameters} for t in tools])
    return Started(run_id=str(created.run.pk), thread_id=str(thread.pk), model_id=name if pick is not None else model_id(provider, model),
                   created=int(time.time()), messages=messages, client_tool_names={t.name for t in tools},
                   detailed=sees_error_details(user=user, workspace_id=thread.workspace_id))


def _refuse_platform_names(tools: list[ToolDefinition]) -> None:
    """A client tool may not shadow a platform tool: the model would see one name twice and
    the loop could not tell whose call it is."""
    from agents.tools import tool_sources

    names = sorted(t.name for t in tools if t.name in tool_sources)
    if names:
        raise ApiRejected("invalid_request_error",
                          f"tools: {', '.join(names)} is the name of a platform tool; rename the client tool.")


def _check_results(thread: Thread, results: list[dict]) -> None:
    """Tool results must answer calls of the thread's last assistant message."""
    if not results:
        return
    last = Message.objects.filter(thread=thread, role=Message.Role.ASSISTANT).order_by("-position").first()
    open_ids = {c["id"] for c in (last.tool_calls if last else [])}
    stray = [r["tool_call_id"] for r in results if r["tool_call_id"] not in open_ids]
    if stray:
        raise ApiRejected("invalid_request_error",
                          f"tool results for unknown calls: {', '.join(stray)} (not in the last assistant message).")


# --- reading the outcome ----------------------------------------------------------------------
@dataclass
class Outcome:
    status: str
    text: str
    tool_calls: list[dict]
    finish_reason: str
    usage: dict
    error: dict
    texts: list[str] = field(default_factory=list)  # per assistant message with text, as stored


def client_tools_of_run(run) -> list[ToolDefinition]:
    """``agents.client_tools`` lookup: the tools the API client declared for ``run``."""
    row = ApiRun.objects.filter(run_id=run.pk).values_list("tools", flat=True).first()
    return [ToolDefinition(t["name"], t.get("description", ""), t.get("parameters") or {}) for t in row or []]


def completion_abandoned(*, run_id: str, user) -> bool:
    """The client of a streaming completion disconnected before ``run_id`` ended: cancel the
    run as its user (``agents.services.run_cancel``: the worker closes the upstream stream,
    the partial text is kept ``cancelled``), as OpenAI's API stops generating, unless
    ``COMPAT_API_CANCEL_ON_DISCONNECT`` is off. True when this cancelled it; False when the
    setting is off or the run had already ended (or been cancelled)."""
    from agents.services import RunRejected, run_cancel

    if not settings.COMPAT_API_CANCEL_ON_DISCONNECT:
        return False
    run = Run.objects.select_related("thread").filter(pk=run_id).first()
    if run is None or run.status in Run.TERMINAL:
        return False
    try:
        run_cancel(run=run, user=user)
    except RunRejected:  # it ended meanwhile
        return False
    return True


def completion_outcome(*, run_id: str, client_tool_names: set[str]) -> Outcome:
    """The run's answer as the API returns it: the text of its assistant messages (joined by
    a blank line; a lost attempt's half answer left out, ``agents.loop.prompt.lost_attempt``),
    the same messages' contents one by one (``texts``: those with text, in order — what a
    stream that lost events continues from), the client tool calls of its last message,
    finish reason and usage."""
    run = Run.objects.get(pk=run_id)
    assistants = list(Message.objects.filter(run=run, role=Message.Role.ASSISTANT).order_by("position"))
    # (a run with no assistant message yet — not started within COMPAT_API_WAIT_S — has none)
    assistants = [m for m, following in zip(assistants, [*assistants[1:], None][:len(assistants)], strict=True)
                  if not lost_attempt(m, following)]
    texts = [m.content for m in assistants if m.content.strip()]
    text = "\n\n".join(t.strip() for t in texts)
    last = assistants[-1] if assistants else None
    calls = [c for c in (last.tool_calls if last else []) if c["name"] in client_tool_names]
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    for m in assistants:
        usage["prompt_tokens"] += int((m.usage or {}).get("input_tokens") or 0)
        usage["completion_tokens"] += int((m.usage or {}).get("output_tokens") or 0)
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    if calls:
        finish = "tool_calls"
    elif last is not None and last.status == Message.Status.TRUNCATED:
        finish = "length"
    else:
        finish = "stop"
    return Outcome(status=run.status, text=text, tool_calls=calls, finish_reason=finish, usage=usage,
                   error=run.error or {}, texts=texts)


def conversation_remember(*, thread_id: str, messages: list[dict], answer: dict) -> None:
    """After an answer: the digest of the conversation as the client now has it, so its
    next request (history + new message) finds this thread."""
    ApiThread.objects.filter(thread_id=thread_id).update(digest=digest([*messages, answer]))


def answer_message(text: str, tool_calls: list[dict]) -> dict:
    return {"role": "assistant", "content": text, "tool_calls": tool_calls}
