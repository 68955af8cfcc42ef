"""The consent doors of OAuth MCP servers (``/mcp-oauth/``) and the person's connections API
(``/api/v1/mcp/connections/``). Thin: the flow is ``mcp_client.oauth``; resuming a parked
run is ``mcp_client.connect_cards``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from . import oauth
from .models import MCPServer, MCPUserToken


def redirect_uri(request) -> str:
    """The callback URL the authorization server sends the browser back to."""
    return request.build_absolute_uri(reverse("mcp-oauth-callback"))


def _safe_next(request, value: str) -> str:
    if value and url_has_allowed_host_and_scheme(value, allowed_hosts={request.get_host()},
                                                 require_https=request.is_secure()):
        return value
    return ""


def _oauth_server(slug: str) -> MCPServer:
    server = MCPServer.objects.filter(slug=slug, enabled=True, auth=MCPServer.Auth.OAUTH).first()
    if server is None:
        raise Http404
    return server


def _page(request, *, title: str, text: str, server: MCPServer | None = None, back: str = "", code: int = 200):
    return render(request, "mcp_client/connect_result.html",
                  {"title": title, "text": text, "server": server, "back": back or "/chat/"}, status=code)


@login_required
@require_GET
def connect(request, slug: str):
    """``GET /mcp-oauth/<slug>/connect/?next=<path>&tool_call=<id>&listing=1``: start the
    person's consent and redirect the browser to the authorization server (302). ``tool_call``:
    the call parked on this person's connect card (resumed by the callback); ``listing=1``
    (staff): their token lists the server's tools. An unknown, disabled or non-OAuth server is
    a 404; a discovery or registration failure a page saying why (502)."""
    server = _oauth_server(slug)
    back = _safe_next(request, request.GET.get("next", ""))
    from . import connect_cards

    tool_call_id = connect_cards.own_parked_call(request.user, server, request.GET.get("tool_call", ""))
    try:
        url = oauth.begin(request.user, server, redirect_uri(request), return_to=back, tool_call_id=tool_call_id,
                          for_listing=request.GET.get("listing") == "1")
    except oauth.OAuthError as exc:
        return _page(request, title=_("Could not connect %(server)s") % {"server": server.name}, text=str(exc),
                     server=server, back=back, code=502)
    return HttpResponseRedirect(url)


@login_required
@require_GET
def callback(request):
    """``GET /mcp-oauth/callback/?state&code|error&iss``: where the authorization server sends
    the browser back. A ``state`` that is not a consent in flight of this person (wrong,
    replayed, expired, someone else's) is a 400 page and changes nothing."""
    from . import connect_cards

    try:
        outcome = oauth.complete(request.user, state=request.GET.get("state", ""), code=request.GET.get("code", ""),
                                 error=request.GET.get("error", ""), iss=request.GET.get("iss"))
    except oauth.RequestRefused as exc:
        return _page(request, title=_("Sign-in not accepted"), text=str(exc), code=400)
    req = outcome.request
    connect_cards.settle(req, connected=outcome.connected, error=outcome.error)
    back = req.return_to or "/chat/"
    if outcome.connected:
        return HttpResponseRedirect(back)
    return _page(request, title=_("%(server)s was not connected") % {"server": req.server.name}, text=outcome.error,
                 server=req.server, back=back)


# --- API ------------------------------------------------------------------------------------------
class ConnectionSerializer(serializers.Serializer):
    server = serializers.CharField(help_text="The server's slug.")
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=["not_connected", "connected", "expired", "error"])
    connected_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True, help_text="When the current access token expires.")
    connect_url = serializers.CharField(help_text="Open in a browser to connect (or connect again).")


def connections_for(user) -> list[dict]:
    """Every enabled OAuth server with ``user``'s state there."""
    tokens = {t.server_id: t for t in MCPUserToken.objects.filter(user=user)}
    rows = []
    for server in MCPServer.objects.filter(enabled=True, auth=MCPServer.Auth.OAUTH).order_by("name"):
        token = tokens.get(server.pk)
        rows.append({"server": server.slug, "name": server.name,
                     "status": token.status if token else "not_connected",
                     "connected_at": token.connected_at if token else None,
                     "expires_at": token.expires_at if token else None,
                     "connect_url": reverse("mcp-oauth-connect", args=[server.slug])})
    return rows


class ConnectionListApi(APIView):
    """GET: the caller's connections to the OAuth MCP servers (every enabled one listed)."""

    @extend_schema(responses=ConnectionSerializer(many=True))
    def get(self, request):
        return Response(ConnectionSerializer(connections_for(request.user), many=True).data)


class ConnectionDetailApi(APIView):
    """DELETE: disconnect the caller from the server — its tokens are revoked at the
    authorization server and forgotten (204; 404 when not connected or unknown)."""

    @extend_schema(responses={204: None})
    def delete(self, request, slug: str):
        server = MCPServer.objects.filter(slug=slug, auth=MCPServer.Auth.OAUTH).first()
        if server is None or not oauth.disconnect(request.user.pk, server, actor=request.user):
            return Response({"detail": _("Not connected.")}, status=status.HTTP_404_NOT_FOUND)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ElicitationAnswerApi(APIView):
    """POST ``{action: accept|decline|cancel, content?: {field: value}}``: the run's person
    answers an MCP server's question (``elicitation.requested``); the waiting call takes it.
    404 for anyone else's or an unknown id; 409 ``not_pending`` (answered, declined or
    expired already); 400 ``invalid`` (values that do not fit the card's fields)."""

    class InputSerializer(serializers.Serializer):
        action = serializers.ChoiceField(choices=["accept", "decline", "cancel"])
        content = serializers.DictField(required=False, allow_empty=True)

    class OutputSerializer(serializers.Serializer):
        id = serializers.UUIDField()
        status = serializers.ChoiceField(choices=["accept", "decline", "cancel"])

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request, elicitation_id):
        from chatplatform.api import error_response

        from . import elicitation

        data = self.InputSerializer(data=request.data)
        if not data.is_valid():
            return error_response("invalid", "action must be accept, decline or cancel", 400)
        try:
            row = elicitation.elicitation_answer(user=request.user, elicitation_id=elicitation_id,
                                                 action=data.validated_data["action"],
                                                 content=data.validated_data.get("content"))
        except elicitation.AnswerRefused as exc:
            return error_response(exc.code, str(exc), 409 if exc.code == "not_pending" else 400)
        return Response(self.OutputSerializer({"id": row.pk, "status": row.status}).data)


@login_required
@require_GET
def resource(request, server_id: int):
    """``GET /mcp-resources/<server id>/?uri=<uri>``: a resource the server linked in one of
    the caller's threads, read with the caller's own session or token (``resources/read``).
    Text as ``text/plain``, PNG/JPEG/GIF/WebP images as themselves, anything else as a
    download; ``X-Content-Type-Options: nosniff``; ``MCP_RESOURCE_MAX_BYTES``. 404 when the
    caller may not call the server's tools or the server never linked that URI for them."""
    from . import resources

    return resources.resource_response(request.user, server_id, request.GET.get("uri", ""))
