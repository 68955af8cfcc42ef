"""The share page ``/s/<token>/`` and its "Continue this chat" (``/s/<token>/continue/``).

The page is read-only and rendered on the server (``chat.rendering``, the REST
``content_html``): it needs no script. It carries the site's strict Content-Security-Policy
(the middleware), ``X-Robots-Tag: noindex, nofollow`` (with the robots meta tag) so a public
link is never indexed, ``Referrer-Policy: same-origin`` so the token never leaves in a
``Referer`` to another site (links in messages also carry ``rel=noreferrer``; ``no-referrer``
would make the browser send ``Origin: null`` with the page's own form, which CSRF refuses),
and ``Cache-Control: private, no-store`` so a revoked link is not served from a cache.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse
from django.views.decorators.http import require_POST

from chat.selectors import membership_get
from chatplatform.errors import ServiceError

from .selectors import ShareGone, ShareNotFound, ShareSignIn, share_open, share_turns
from .services import share_continue


def _private(response):
    response["X-Robots-Tag"] = "noindex, nofollow"
    response["Referrer-Policy"] = "same-origin"
    response["Cache-Control"] = "private, no-store"
    return response


def _refused(request, exc: Exception):
    """The clear page for a link that shows nothing: 410 for a link that is gone, 404 for one
    the viewer may not know of (with a way to sign in when they are signed out)."""
    gone = isinstance(exc, ShareGone)
    login = f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': request.get_full_path()})}"
    context = {"gone": gone, "reason": exc.reason if gone else "", "sign_in": isinstance(exc, ShareSignIn),
               "login_url": login}
    return _private(render(request, "sharing/unavailable.html", context, status=410 if gone else 404))


def share_page(request, token):
    """The snapshot for whoever may see it (``selectors.share_open``)."""
    try:
        share = share_open(token=token, viewer=request.user)
    except (ShareGone, ShareNotFound) as exc:
        return _refused(request, exc)
    viewer = request.user
    member = viewer.is_authenticated and membership_get(user=viewer, workspace_id=share.thread.workspace_id)
    return _private(render(request, "sharing/share.html", {
        "share": share,
        "turns": share_turns(share=share, viewer=viewer),
        "member": bool(member),
        "owner_name": share.created_by.get_username(),
        "workspace_name": share.thread.workspace.name,
        "login_url": f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': request.get_full_path()})}",
    }))


@require_POST
def share_continue_view(request, token):
    """Copy the snapshot into a new chat of the signed-in viewer and open it (signed out: the
    sign-in page, back to the share page after)."""
    if not request.user.is_authenticated:
        return redirect_to_login(reverse("sharing:page", args=[token]))
    try:
        share = share_open(token=token, viewer=request.user)
    except (ShareGone, ShareNotFound) as exc:
        return _refused(request, exc)
    try:
        thread = share_continue(share=share, viewer=request.user)
    except ServiceError as exc:
        return _private(render(request, "sharing/unavailable.html", {"error": exc.message}, status=exc.status))
    return redirect("chat:thread", thread_id=thread.pk)
