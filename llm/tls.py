"""TLS trust for every SDK client.

``SSL_CERT_FILE`` or ``REQUESTS_CA_BUNDLE`` (a PEM bundle, e.g. a company CA) wins;
otherwise the operating system's trust store through ``truststore``.
"""

from __future__ import annotations

import functools
import os
import ssl

import truststore


@functools.lru_cache(maxsize=8)
def _context_for(cafile: str | None) -> ssl.SSLContext:
    if cafile:
        return ssl.create_default_context(cafile=cafile)
    return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def ssl_context() -> ssl.SSLContext:
    """The SSL context SDK clients verify servers with (cached per CA bundle path)."""
    cafile = os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE") or None
    return _context_for(cafile)
