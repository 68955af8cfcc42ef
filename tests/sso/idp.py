"""Runs the test OpenID Connect provider (``tests/oidc_idp``: django-oidc-provider) as a
subprocess on a free loopback port, with its own SQLite database in a temporary directory.

``start()`` migrates, creates the RSA signing key and waits until discovery answers;
``client(...)``/``user(...)`` configure it through its management command; ``stop()``
terminates it. Its log is kept for failing tests (``log_tail()``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.e2e.harness import free_port

REPO = Path(__file__).resolve().parents[2]
CLIENT_ID = "chatplatform-test"
CLIENT_SECRET = "chatplatform-test-secret"  # noqa: S105 — the throwaway provider's client


class IdentityProvider:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="chatplatform-idp-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.tmp / "idp.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HTTP_PROXY", "HTTPS_PROXY"))}
        self.env.update({
            "DJANGO_SETTINGS_MODULE": "tests.oidc_idp.settings",
            "IDP_DB": str(self.tmp / "idp.sqlite3"),
            "IDP_SITE_URL": self.base_url,
            "PYTHONPATH": str(REPO),
        })

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/openid"

    def manage(self, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "django", *args], cwd=REPO, env=self.env, check=True,
                       capture_output=True, timeout=120)

    def start(self) -> IdentityProvider:
        self.manage("migrate", "--noinput")
        self.manage("creatersakey")
        log = open(self.log, "wb")  # noqa: SIM115 — closed with the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"identity provider did not start:\n{tail}")
            time.sleep(0.2)

    def client(self, *redirect_uris: str) -> None:
        args = ["idp_setup", "client", "--client-id", CLIENT_ID, "--secret", CLIENT_SECRET]
        for uri in redirect_uris:
            args += ["--redirect-uri", uri]
        self.manage(*args)

    def user(self, name: str, *, password: str = "", email: str = "", groups: list[str] | None = None,
             first_name: str = "") -> None:
        args = ["idp_setup", "user", name]
        if password:
            args += ["--password", password]
        if email:
            args += ["--email", email]
        if first_name:
            args += ["--first-name", first_name]
        if groups is not None:
            args += ["--groups", ",".join(groups)]
        self.manage(*args)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)
