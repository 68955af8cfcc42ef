"""Artifact previews (issue 55): the sandboxed document an answer's HTML, SVG or Mermaid code
block is rendered in, beside the chat.

The chat page never renders an artifact itself. It opens ``/chat/artifacts/<workspace>/frame/``
in ``<iframe sandbox="allow-scripts">`` (an opaque origin: no cookies, no storage, no access to
the page) and hands the block's text to it by ``postMessage``. That document is served with its
own policy (:func:`frame_headers`), so the artifact's inline scripts run while everything that
could reach the platform or the person is refused: no network at all (``connect-src 'none'``,
only ``data:``/``blob:`` images), no forms, no plug-ins, no framing by other sites, and the
``sandbox`` directive again in the header, so the document is sandboxed even when opened on its
own in a tab. See docs/design.md §6 "Artifacts".
"""

from __future__ import annotations

from django.templatetags.static import static

from chatplatform.safe_input import MAX_DB_INT

from .models import Workspace
from .selectors import membership_get

FRAME_SCRIPT = "chat/artifact-frame.js"  # the frame's own code: receives the source, renders it
MERMAID_SCRIPT = "vendor/preview-vendor.js"  # Mermaid (make vendor), loaded only for a diagram


def artifacts_enabled(*, user, workspace_id) -> bool | None:
    """Whether ``user`` may preview artifacts in ``workspace_id``: True or False by the
    workspace's ``artifacts_enabled`` setting, None when the user is not a member (or the
    workspace does not exist, an id past the database's integer range: the URL's ``<int:>``
    takes any digits) — the caller answers 404 then, as for any other workspace."""
    if not 0 < workspace_id <= MAX_DB_INT:
        return None
    membership = membership_get(user=user, workspace_id=workspace_id)
    if membership is None:
        return None
    return Workspace.objects.filter(pk=workspace_id).values_list("artifacts_enabled", flat=True).first()


def _absolute(request, path: str) -> str:
    """A static file's absolute URL (a CSP source with a path must name the host: ``'self'``
    cannot carry one, and the frame's own origin is opaque). Behind a TLS proxy that Django
    is not told about this says ``http:``; CSP lets an ``http:`` source match the ``https:`` URL."""
    return path if path.startswith(("http://", "https://")) else request.build_absolute_uri(path)


def frame_policy(request) -> str:
    """The preview document's ``Content-Security-Policy``: inline script and style (the
    artifact's own), plus exactly two script files of this platform — the frame's code and
    Mermaid — by full URL, never the rest of the origin (no ``<script src="/api/…">``)."""
    scripts = " ".join(_absolute(request, static(name)) for name in (FRAME_SCRIPT, MERMAID_SCRIPT))
    return "; ".join((
        "default-src 'none'",
        f"script-src 'unsafe-inline' {scripts}",
        "style-src 'unsafe-inline'",
        "img-src data: blob:",
        "font-src data:",
        "media-src data: blob:",
        "connect-src 'none'",
        "form-action 'none'",
        "base-uri 'none'",
        "frame-ancestors 'self'",
        "sandbox allow-scripts",
    ))


def frame_headers(request) -> dict[str, str]:
    """Every header of the preview document beyond Django's: its CSP (:func:`frame_policy`),
    framing by this origin only, no referrer, not cached."""
    return {
        "Content-Security-Policy": frame_policy(request),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "Cross-Origin-Resource-Policy": "same-origin",
    }
