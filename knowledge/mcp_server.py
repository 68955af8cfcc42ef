"""The team's knowledge base as a streamable HTTP MCP server at ``/mcp/`` (official ``mcp`` SDK).

Authentication: the platform's API tokens — ``Authorization: Bearer <token>`` or
``Authorization: Token <token>``; none or an unknown one → 401
``{"error": {"code": "not_authenticated", "message"}}`` with ``WWW-Authenticate: Bearer``.
Every call acts as the token's user with exactly the REST API's visibility: their workspaces
only, private items only their own, hidden items included (they are AI-OK). Tools:

* ``search_knowledge(query, top_k=8, workspace?, type?, tags?)`` → ``{"results": [{"item_id",
  "title", "type", "snippet", "score", "workspace"}]}``
* ``get_knowledge_item(item_id)`` → the item (``item_id, title, type, tags, url, content,
  workspace, hidden, private, owner``)
* ``list_knowledge_tags(workspace?)`` → ``{"tags": [{"tag", "items"}]}``
* for callers who may change the knowledge base in some workspace (member, admin):
  ``save_knowledge_item(title, content, type="note", tags=[], workspace?, private=false)``
  and ``update_knowledge_item(item_id, title?, content?, type?, tags?, hidden?)``; the
  write rules of the REST API apply per call (viewers → an error result).

Every call is written to the audit log (``AuditEvent`` kind ``mcp_call``) with the caller,
the workspace, the tool and whether it succeeded. Stateless streamable HTTP with JSON
responses, so any worker can answer any request.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import weakref
from collections import Counter
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.http import Http404
from django.utils.translation import gettext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations

from agents.audit import audit_record
from agents.models import AuditEvent
from chat.selectors import memberships_for_user
from chatplatform.api import UNAVAILABLE_MESSAGE, is_unavailable
from chatplatform.credentials import CHALLENGE, auser_or_refusal

logger = logging.getLogger(__name__)

_caller: contextvars.ContextVar = contextvars.ContextVar("mcp_knowledge_caller")
SNIPPET_CHARS = 400
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)


# --- plain functions (sync, ORM): one per tool ------------------------------------------------
class Refused(Exception):
    """An expected refusal; its text is the tool's error result."""


def _workspace(user, value):
    from chat.selectors import workspace_get_for_user

    if value not in (None, ""):
        try:
            return workspace_get_for_user(user=user, workspace=value)
        except Http404 as exc:
            raise Refused(f"No workspace {value!r} among yours.") from exc
    memberships = list(memberships_for_user(user=user)[:2])
    if len(memberships) != 1:
        raise Refused("Say which workspace (its slug or id): you belong to several.")
    return memberships[0].workspace


def search(user, *, query: str, top_k: int = 8, workspace: str | None = None, type: str | None = None,
           tags: list[str] | None = None) -> dict:
    from knowledge.selectors import MAX_TOP_K, knowledge_search_for_user

    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise Refused(f"top_k must be between 1 and {MAX_TOP_K}.")
    ws = _workspace(user, workspace) if workspace else None
    hits = knowledge_search_for_user(user=user, query=query, workspace=ws, top_k=int(top_k),
                                     types=[type] if type else None, tags=tags or None,
                                     include_private=True, include_hidden=True)
    return {"query": query, "results": [
        {"item_id": str(h.item_id), "title": h.title, "type": h.type, "snippet": h.snippet[:SNIPPET_CHARS],
         "score": h.score, "workspace_id": h.workspace_id} for h in hits]}


def _item_dict(item) -> dict:
    return {"item_id": str(item.pk), "title": item.title, "type": item.type, "tags": item.tags, "url": item.url,
            "content": item.content, "workspace": item.workspace.slug, "hidden": item.is_hidden,
            "private": item.is_private, "owner": item.owner.get_username() if item.owner_id else ""}


def get_item(user, *, item_id: str) -> dict:
    from knowledge.selectors import knowledge_item_get_for_user

    try:
        return _item_dict(knowledge_item_get_for_user(user=user, item_id=item_id))
    except Http404 as exc:
        raise Refused(f"No knowledge item {item_id!r}.") from exc


def list_tags(user, *, workspace: str | None = None) -> dict:
    from knowledge.selectors import knowledge_item_list_for_user

    ws = _workspace(user, workspace) if workspace else None
    counts: Counter[str] = Counter()
    for tags in knowledge_item_list_for_user(user=user, workspace=ws, include_hidden=True).values_list("tags",
                                                                                                        flat=True):
        counts.update(tags or [])
    return {"tags": [{"tag": t, "items": n} for t, n in counts.most_common(200)]}


def save_item(user, *, title: str, content: str, type: str = "note", tags: list[str] | None = None,
              workspace: str | None = None, private: bool = False) -> dict:
    from knowledge.services import KnowledgeRejected, knowledge_item_create_for_user

    ws = _workspace(user, workspace)
    try:
        item = knowledge_item_create_for_user(user=user, workspace=ws, title=title, content=content, type=type,
                                              tags=tags or [], is_private=private)
    except KnowledgeRejected as exc:
        raise Refused(exc.message) from exc
    return _item_dict(item)


def update_item(user, *, item_id: str, **changes) -> dict:
    from knowledge.selectors import knowledge_item_get_for_user
    from knowledge.services import KnowledgeRejected, knowledge_item_update_for_user

    try:
        item = knowledge_item_get_for_user(user=user, item_id=item_id)
    except Http404 as exc:
        raise Refused(f"No knowledge item {item_id!r}.") from exc
    fields = {k: v for k, v in changes.items() if v is not None}
    if "hidden" in fields:
        fields["is_hidden"] = fields.pop("hidden")
    if not fields:
        raise Refused("Nothing to change: give at least one of title, content, type, tags, hidden.")
    try:
        item = knowledge_item_update_for_user(user=user, item=item, **fields)
    except KnowledgeRejected as exc:
        raise Refused(exc.message) from exc
    return _item_dict(item)


def may_write(user) -> bool:
    """Whether ``user`` may change the knowledge base in at least one of their workspaces."""
    from knowledge.selectors import knowledge_can_create

    return any(knowledge_can_create(user=user, workspace=m.workspace_id)
               for m in memberships_for_user(user=user))


def audit(user, tool: str, arguments: dict, *, ok: bool, error: str = "", workspace_id=None) -> None:
    shown = {k: (v if len(json.dumps(v, default=str)) <= 200 else "…") for k, v in arguments.items()}
    audit_record(kind=AuditEvent.Kind.MCP_CALL, user=user, workspace_id=workspace_id, tool_name=tool,
                 detail={"via": "mcp", "arguments": shown, "ok": ok, "error": error[:300]})


def _run(tool: str, func, arguments: dict) -> Any:
    close_old_connections()
    try:
        return _run_audited(tool, func, arguments)
    finally:
        close_old_connections()


def _run_audited(tool: str, func, arguments: dict) -> Any:
    user = _caller.get()
    try:
        result = func(user, **arguments)
    except Refused as exc:
        audit(user, tool, arguments, ok=False, error=str(exc))
        raise
    workspace_id = None
    if isinstance(result, dict) and result.get("workspace"):
        from chat.models import Workspace

        workspace_id = Workspace.objects.filter(slug=result["workspace"]).values_list("pk", flat=True).first()
    audit(user, tool, arguments, ok=True, workspace_id=workspace_id)
    return result


async def _call(tool: str, func, **arguments) -> Any:
    try:
        return await sync_to_async(_run)(tool, func, arguments)
    except Refused as exc:
        raise ToolError(str(exc)) from None


# --- the MCP servers (SDK) ----------------------------------------------------------------
def _build(*, writable: bool) -> MCPServer:
    server = MCPServer("chatplatform-knowledge", instructions=(
        "The team's knowledge base: notes, facts, decisions and how-tos. Search it before answering "
        "questions about the team's work; cite item titles."))

    @server.tool(annotations=READ, description=(
        "Search the knowledge base (web-search syntax: \"phrase\", or, -word). Returns the best matching items "
        "with a snippet each."))
    async def search_knowledge(query: str, top_k: int = 8, workspace: str | None = None, type: str | None = None,
                               tags: list[str] | None = None) -> dict:
        return await _call("search_knowledge", search, query=query, top_k=top_k, workspace=workspace, type=type,
                           tags=tags)

    @server.tool(annotations=READ, description="Read one knowledge item in full by its id.")
    async def get_knowledge_item(item_id: str) -> dict:
        return await _call("get_knowledge_item", get_item, item_id=item_id)

    @server.tool(annotations=READ, description="List the tags used in the knowledge base, most used first.")
    async def list_knowledge_tags(workspace: str | None = None) -> dict:
        return await _call("list_knowledge_tags", list_tags, workspace=workspace)

    if writable:
        @server.tool(annotations=WRITE, description="Save a new note, fact, decision or how-to to the knowledge base.")
        async def save_knowledge_item(title: str, content: str, type: str = "note", tags: list[str] | None = None,
                                      workspace: str | None = None, private: bool = False) -> dict:
            return await _call("save_knowledge_item", save_item, title=title, content=content, type=type, tags=tags,
                               workspace=workspace, private=private)

        @server.tool(annotations=WRITE, description="Change a knowledge item you may edit (yours, or any as admin).")
        async def update_knowledge_item(item_id: str, title: str | None = None, content: str | None = None,
                                        type: str | None = None, tags: list[str] | None = None,
                                        hidden: bool | None = None) -> dict:
            return await _call("update_knowledge_item", update_item, item_id=item_id, title=title, content=content,
                               type=type, tags=tags, hidden=hidden)

    # The session manager below serves requests; Django checks the Host header (ALLOWED_HOSTS).
    server.streamable_http_app(stateless_http=True, json_response=True,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return server


# --- ASGI -------------------------------------------------------------------------------------
def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


async def _reply(send, status: int, code: str, message: str, extra: list | None = None) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


class KnowledgeMCPApp:
    """ASGI app for ``/mcp`` and ``/mcp/``: token auth, then the SDK's session manager (one
    per event loop, started on first use, since Daphne sends no lifespan events)."""

    def __init__(self) -> None:
        self._managers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def _manager(self, writable: bool):
        loop = asyncio.get_running_loop()
        per_loop = self._managers.setdefault(loop, {})
        if writable not in per_loop:
            manager = _build(writable=writable).session_manager  # a manager serves one loop, once
            ready = asyncio.Event()

            async def serve() -> None:
                async with manager.run():
                    ready.set()
                    await asyncio.Event().wait()

            per_loop[writable] = (manager, ready, loop.create_task(serve()))
        manager, ready, _task = per_loop[writable]
        await ready.wait()
        return manager

    async def __call__(self, scope, receive, send) -> None:
        from django.conf import settings
        from django.http.request import split_domain_port, validate_host

        host = _header(scope, b"host")
        domain, _port = split_domain_port(host)
        allowed = settings.ALLOWED_HOSTS or (["localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
        if not domain or not validate_host(domain, allowed):
            await _reply(send, 400, "bad_host", "Invalid Host header.")
            return
        user = refusal = None
        try:
            user, refusal = await auser_or_refusal(_header(scope, b"authorization"))
            writable = user is not None and await sync_to_async(may_write)(user)
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            # The database (or Redis) is unreachable: the API's JSON 503, not a bare 500.
            logger.warning("mcp: service unavailable: %s: %s", type(exc).__name__, exc)
            await _reply(send, 503, "service_unavailable", gettext(UNAVAILABLE_MESSAGE), [(b"retry-after", b"5")])
            return
        if user is None:
            await _reply(send, 401, refusal.code if refusal else "not_authenticated",
                         refusal.message if refusal else "Send an API key: Authorization: Bearer <key> (or Token <key>).",
                         [(b"www-authenticate", CHALLENGE.encode())])
            return
        manager = await self._manager(writable)
        token = _caller.set(user)
        try:
            await manager.handle_request(scope, receive, send)
        finally:
            _caller.reset(token)


_app: KnowledgeMCPApp | None = None


def knowledge_mcp_app() -> KnowledgeMCPApp:
    global _app
    if _app is None:
        _app = KnowledgeMCPApp()
    return _app


def with_mcp_endpoint(django_app):
    """Wrap the Django ASGI app: HTTP requests to ``/mcp`` or ``/mcp/…`` go to the knowledge
    MCP server, everything else to Django."""

    async def app(scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/mcp" or path.startswith("/mcp/")):
            await knowledge_mcp_app()(scope, receive, send)
            return
        await django_app(scope, receive, send)

    return app
