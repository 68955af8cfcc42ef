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
            return f"TLS certificate verification failed ({err.verify_message})"
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
    """Remove ``secret`` (an API key) from ``text``; keys never reach events, pages or logs."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    return text


def unreachable(url: str, exc: BaseException) -> ProviderError:
    cause = network_root_cause(exc)
    code = "timeout" if cause == "timed out" else "unreachable"
    return ProviderError(code, f"provider unreachable: {cause} to {host_port(url)}", retryable=True)
