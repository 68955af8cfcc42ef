"""Turn SDK and network exceptions into a :class:`ProviderError` naming the root cause.

Rule (DESIGN §1, SPECTROview row): an error names its root cause, found by walking
``__cause__`` / ``__context__``, so "connection refused to 127.0.0.1:9" and "invalid API
key" are told apart in ``run.failed``.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

from .base import ProviderError


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """Yield ``exc`` and every exception behind it (``__cause__`` first, then ``__context__``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def network_root_cause(exc: BaseException) -> str:
    """A short description of the lowest network failure behind ``exc``."""
    for err in exception_chain(exc):
        if isinstance(err, ConnectionRefusedError):
            return "connection refused"
        if isinstance(err, socket.gaierror):
            return "DNS lookup failed"
        if isinstance(err, ssl.SSLCertVerificationError):
            # aiohttp's ClientConnectorCertificateError is one too; the ssl module's error
            # (with the reason) is its certificate_error.
            cert_error = getattr(err, "certificate_error", err)
            reason = getattr(cert_error, "verify_message", None) or str(cert_error)
            return f"TLS certificate verification failed ({reason})"
        if isinstance(err, ssl.SSLError):
            return f"TLS error ({err.reason or err})"
        if isinstance(err, ConnectionResetError):
            return "connection reset"
        if isinstance(err, TimeoutError | socket.timeout):
            return "timed out"
    names = [type(e).__name__ for e in exception_chain(exc)]
    text = " ".join(str(e) for e in exception_chain(exc) if str(e))
    lowered = text.lower()
    if "connection refused" in lowered or "errno 111" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename nor servname" in lowered or "getaddrinfo" in lowered:
        return "DNS lookup failed"
    if "certificate verify failed" in lowered:
        return "TLS certificate verification failed"
    if any("Timeout" in n for n in names) or "timed out" in lowered:
        return "timed out"
    return str(exc) or type(exc).__name__


def host_port(url: str) -> str:
    """``http://127.0.0.1:9/v1`` → ``127.0.0.1:9`` (default ports filled in)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def scrub(text: str, secret: str | None) -> str:
    """Remove ``secret`` (an API key) — also transformed: prefix dropped, other case, cut
    short — and anything else that looks like a key from ``text`` (``chatplatform.redaction``);
    keys never reach events, pages or logs."""
    from chatplatform.redaction import redact

    return redact(text, [secret] if secret else [])


def unreachable(url: str, exc: BaseException) -> ProviderError:
    cause = network_root_cause(exc)
    code = "timeout" if cause == "timed out" else "unreachable"
    return ProviderError(code, f"provider unreachable: {cause} to {host_port(url)}", retryable=True)


def sdk_error_detail(exc) -> str:
    """The provider's own error message from an SDK ``APIStatusError`` (openai or anthropic:
    ``body = {"error": {"message": …}}`` or a plain string), at most 300 chars."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if isinstance(err, str):
            return err[:300]
    return (getattr(exc, "message", "") or "")[:300]


def status_error(status: int, detail: str, *, model: str, retry_after: str | None = None) -> ProviderError:
    """An HTTP error status → :class:`ProviderError` whose message names the cause (every
    adapter: 401/403 auth, 404 model, 429 with retry-after, 529 overloaded, 5xx, other 4xx)."""
    if status == 401:
        return ProviderError("auth_failed", f"invalid API key (HTTP 401): {detail}")
    if status == 403:
        return ProviderError("auth_failed", f"access denied (HTTP 403): {detail}")
    if status == 404:
        return ProviderError("model_not_found", f"model {model!r} not found (HTTP 404): {detail}")
    if status == 429:
        wait = f"; retry after {retry_after} s" if retry_after else ""
        return ProviderError("rate_limited", f"rate limited (HTTP 429){wait}: {detail}", retryable=True)
    if status == 529:
        return ProviderError("upstream_error", f"provider overloaded (HTTP 529): {detail}", retryable=True)
    if status >= 500:
        return ProviderError("upstream_error", f"provider error (HTTP {status}): {detail}", retryable=True)
    return ProviderError("bad_request", f"request rejected (HTTP {status}): {detail}")
