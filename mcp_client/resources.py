"""Resources an MCP server links in tool results (``resource_link`` blocks and embedded
resources), opened by the person through the platform: ``/mcp-resources/<server id>/?uri=``.

:func:`mcp_client.resource_links.links_record` keeps, per person, thread and server, the URIs a
server linked; the door (:func:`resource_response`) reads only those — it is never an open proxy to whatever URI a
caller names — after the same access check as calling the server's tools (the thread is still
the caller's, one of the server's tools is allowed for their role there), with the caller's own
session (their OAuth token on an OAuth server), and answers with a safe content type."""

from __future__ import annotations

import base64
import binascii
import re

import mcp_types as types
from django.conf import settings
from django.http import Http404, HttpResponse

from agents.pipeline import guard_verdict, policy_views
from chat.selectors import role_name_in, thread_get_for_user

from .models import MCPResourceLink, MCPServer, MCPTool

INLINE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})  # never SVG: it runs script


def _may_use(user, server: MCPServer, link: MCPResourceLink) -> bool:
    """The thread is still the caller's and one of the server's tools passes the invocation
    guard for their role in its workspace (the check a call of the tool meets)."""
    try:
        thread = thread_get_for_user(user=user, thread_id=link.thread_id)
    except Http404:
        return False
    role = role_name_in(user=user, workspace_id=thread.workspace_id)
    views = policy_views()
    names = MCPTool.objects.filter(server=server).exclude(exposed_name="").values_list("exposed_name", flat=True)
    return any(guard_verdict(policy=views.get(n), role_name=role) == "ok" for n in names)


def _read(user, server: MCPServer, uri: str) -> types.ReadResourceResult:
    from . import oauth
    from .runtime import runtime
    from .sync import ConfigError, server_config

    if server.auth == MCPServer.Auth.OAUTH:
        try:
            bearer, _version = oauth.access_token(user.pk, server)
            config = server_config(server, listing=False)
        except (oauth.OAuthError, ConfigError):
            raise Http404 from None  # not connected (any more): nothing to read with
        return runtime.read_as(config, bearer, uri, timeout_s=60)
    return runtime.read_resource(server.slug, uri, timeout_s=60)


def _filename(uri: str) -> str:
    tail = uri.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]", "_", tail)[:100] or "resource"


def resource_response(user, server_id: int, uri: str) -> HttpResponse:
    """The resource as an HTTP response (see the module); Http404 for anything the caller may
    not read, 502 when the server cannot read it, 413 over ``MCP_RESOURCE_MAX_BYTES``."""
    from .runtime import CallFailed, ServerGone, ServerUnavailable

    server = MCPServer.objects.filter(pk=server_id, enabled=True).first()
    link = (MCPResourceLink.objects.filter(server=server, user=user, uri=uri).order_by("-created_at").first()
            if server is not None and uri else None)
    if link is None or not _may_use(user, server, link):
        raise Http404
    try:
        result = _read(user, server, uri)
    except (CallFailed, ServerGone, ServerUnavailable, TimeoutError) as exc:
        response = HttpResponse(f"The server could not read this resource: {exc}", status=502,
                                content_type="text/plain; charset=utf-8")
        return _harden(response)
    if not result.contents:
        raise Http404
    contents = result.contents[0]
    limit = int(settings.MCP_RESOURCE_MAX_BYTES)
    if isinstance(contents, types.TextResourceContents):
        body = contents.text.encode("utf-8")
        mime = "text/plain; charset=utf-8"  # never text/html (or anything a browser runs) inline
        disposition = "inline"
    else:
        try:
            body = base64.b64decode(contents.blob, validate=False)
        except (binascii.Error, ValueError):
            raise Http404 from None
        declared = (contents.mime_type or "").split(";")[0].strip().lower()
        if declared in INLINE_IMAGES:
            mime, disposition = declared, "inline"
        else:
            mime, disposition = "application/octet-stream", f'attachment; filename="{_filename(uri)}"'
    if len(body) > limit:
        return _harden(HttpResponse(f"The resource is larger than {limit} bytes.", status=413,
                                    content_type="text/plain; charset=utf-8"))
    response = HttpResponse(body, content_type=mime)
    response["Content-Disposition"] = disposition
    return _harden(response)


def _harden(response: HttpResponse) -> HttpResponse:
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; img-src 'self'; sandbox"
    response["Cache-Control"] = "private, no-store"
    return response
