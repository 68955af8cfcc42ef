"""Plumbing shared by the Anthropic and Ollama fakes: a threaded HTTP/1.1 server on
``127.0.0.1:<random port>`` (optionally TLS), chunked streaming with an option to cut a
multibyte UTF-8 character across two network writes, and a scripted-iteration queue.

Only the standard library (plus ``cryptography`` for :func:`self_signed_cert`) is used, so
the real SDK code (httpx / httpx2) runs unchanged against it.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

#: Pause between the two halves of a split write: long enough that the client's socket
#: read returns the first half on its own.
SPLIT_PAUSE_S = 0.02


class LoopbackServer(ThreadingHTTPServer):
    """Daemon handler threads; handler exceptions are recorded, not printed."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    fake: Any

    def handle_error(self, request, client_address) -> None:  # noqa: D401
        self.fake.server_errors.append(sys.exc_info()[1])


class ConnectionDropped(Exception):
    """The client went away while we were writing."""


class BaseHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    sys_version = ""
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silence per-request logging."""

    def setup(self) -> None:
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    @property
    def fake(self):
        return self.server.fake

    @property
    def path_only(self) -> str:
        return unquote(urlsplit(self.path).path).rstrip("/") or "/"

    @property
    def query(self) -> dict[str, str]:
        from urllib.parse import parse_qsl

        return dict(parse_qsl(urlsplit(self.path).query))

    # -- writers ---------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError as exc:
            raise ConnectionDropped() from exc

    def send_json(self, status: int, body: Any, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.close_connection = True
        self.write(data)

    def start_chunked(self, content_type: str, headers: dict | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.close_connection = True
        self.write(b"")

    def send_chunk(self, data: bytes, *, split_utf8: bool = False) -> None:
        """One HTTP chunk; with ``split_utf8`` the bytes go out as two chunks, cut inside
        the first multibyte character, with a pause in between."""
        cut = _multibyte_cut(data) if split_utf8 else None
        if cut is None:
            self.write(b"%X\r\n%s\r\n" % (len(data), data))
            return
        head, tail = data[:cut], data[cut:]
        self.write(b"%X\r\n%s\r\n" % (len(head), head))
        time.sleep(SPLIT_PAUSE_S)
        self.write(b"%X\r\n%s\r\n" % (len(tail), tail))

    def end_chunked(self) -> None:
        self.write(b"0\r\n\r\n")

    def die(self) -> None:
        """Drop the TCP connection mid-body."""
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def lower_headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def read_json(self) -> Any:
        """Read the request body, record it on the fake (a body that is not a JSON object
        as ``{"__invalid_json__": <text>}``) with its path and headers, and return the
        parsed JSON (None when it does not parse)."""
        raw = self.read_body()
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        recorded = body if isinstance(body, dict) else {"__invalid_json__": raw.decode("utf-8", "replace")}
        self.fake.record(self.path_only, recorded, self.lower_headers())
        return body


def _multibyte_cut(data: bytes) -> int | None:
    """An offset inside the first multibyte UTF-8 sequence of ``data`` (None if none)."""
    for i, byte in enumerate(data):
        if byte >= 0xC0:  # a lead byte of a 2-4 byte sequence
            return i + 1
    return None


class FakeServer:
    """Lifecycle, request recording and the iteration queue shared by the fakes.

    Subclasses set ``handler`` and ``url_suffix`` and implement ``fallback_iteration()``.
    """

    handler: type[BaseHandler]
    url_suffix = ""
    name = "Fake"
    # The address to listen on: loopback, unless a test serves other hosts (tests/multihost
    # binds its root-namespace address, which the hosts' namespaces reach over the bridge).
    bind_host = "127.0.0.1"

    def __init__(self, iterations=None, *, tls: tuple[str, str] | None = None, delay_s: float = 0.0,
                 split_utf8: bool = False) -> None:
        self.tls = tls
        # Set: the streams go on without delay_s (release()); a test that needs a stream to
        # outlast something slow (an admin's click, a restart) paces it, then lets it finish.
        self.released = threading.Event()
        self.delay_s = delay_s
        self.split_utf8 = split_utf8
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.paths: list[str] = []
        self.server_errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._script: list[Any] = []
        self._served = 0
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None
        self._base_url: str | None = None
        self.script(*(iterations or ()))

    # -- pacing ----------------------------------------------------------------------
    @property
    def delay_s(self) -> float:
        """Seconds between two streamed chunks; setting it undoes a :meth:`release`."""
        return self._delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        self.released.clear()
        self._delay_s = value

    def release(self) -> None:
        """Let every stream, those under way included, send the rest of its chunks at once."""
        self.released.set()

    def pause(self) -> None:
        """The wait between two streamed chunks: ``delay_s``, cut short by :meth:`release`."""
        if self.delay_s and not self.released.is_set():
            self.released.wait(self.delay_s)

    # -- scripting -------------------------------------------------------------------
    def script(self, *iterations) -> None:
        with self._lock:
            self._script.extend(iterations)

    @property
    def remaining(self) -> int:
        with self._lock:
            return max(0, len(self._script) - self._served)

    def next_iteration(self) -> tuple[int, Any]:
        with self._lock:
            self._served += 1
            n = self._served
            if n <= len(self._script):
                return n, self._script[n - 1]
        return n, self.fallback_iteration()

    def fallback_iteration(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def record(self, path: str, body: dict, headers: dict) -> None:
        with self._lock:
            self.paths.append(path)
            self.requests.append(body)
            self.headers.append(headers)

    # -- lifecycle -------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError(f"{self.name} is not started; call start() or use it as a context manager")
        return self._base_url

    @property
    def port(self) -> int:
        return int(urlsplit(self.base_url).port)

    def start(self):
        if self._server is not None:
            return self
        server = LoopbackServer((self.bind_host, 0), self.handler)
        server.fake = self
        scheme = "http"
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        host, port = server.server_address[:2]
        self._server = server
        self._base_url = f"{scheme}://{host}:{port}{self.url_suffix}"
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"{self.name}:{port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        self._base_url = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def self_signed_cert(directory: Path) -> tuple[str, str]:
    """A self-signed certificate for ``127.0.0.1``/``localhost``: ``(certfile, keyfile)``.

    Used to test TLS verification failures and ``SSL_CERT_FILE`` (the cert file doubles as
    the CA bundle that makes verification pass)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "chatplatform test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    certfile, keyfile = directory / "cert.pem", directory / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return str(certfile), str(keyfile)
