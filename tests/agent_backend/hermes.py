"""The real Hermes agent gateway for tests: its own cached venv, a throwaway home, a port.

``ensure_hermes()`` installs ``hermes-agent==0.19.0`` (+ ``aiohttp``, which its API server
needs but does not declare) into ``$CHATPLATFORM_CACHE/hermes-0.19.0`` (default
``~/.cache/chatplatform``) once and reuses it afterwards; it returns the ``hermes`` executable
or raises :class:`HermesUnavailable` with the installer's output. The agent gets a venv of its
own because it pins openai/anthropic/mcp versions that clash with the platform's.

:class:`HermesGateway` runs ``hermes gateway run`` with ``HOME``/``HERMES_HOME`` in a
temporary folder, ``config.yaml`` pointing its model at a scripted OpenAI-compatible fake on
loopback, manual approvals, and the API server on a free loopback port; ``start()`` waits
until ``/health`` answers, ``stop()`` sends SIGTERM (SIGKILL after a grace period),
``kill()`` SIGKILLs it at once (a gateway lost mid-run).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

HERMES_VERSION = "0.19.0"


class HermesUnavailable(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("CHATPLATFORM_CACHE") or Path.home() / ".cache" / "chatplatform")


def ensure_hermes() -> Path:
    venv = cache_dir() / f"hermes-{HERMES_VERSION}"
    exe = venv / "bin" / "hermes"
    marker = venv / ".installed"
    if exe.exists() and marker.exists():
        return exe
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"hermes-agent=={HERMES_VERSION}", "aiohttp"],
        capture_output=True, text=True, timeout=1500,
    )
    if proc.returncode != 0 or not exe.exists():
        raise HermesUnavailable(f"pip install hermes-agent=={HERMES_VERSION} failed: {proc.stderr[-2000:]}")
    marker.write_text(HERMES_VERSION)
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HermesGateway:
    """One ``hermes gateway run`` process. ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, exe: Path, home: Path, *, model_base_url: str, model: str = "fake-model",
                 model_key: str = "sk-test", approval_timeout_s: int = 600) -> None:
        self.exe = exe
        self.home = home
        self.port = free_port()
        self.key = "test-key-" + secrets.token_hex(12)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.workdir = home / "work"
        self.log_path = home / "gateway.log"
        self.proc: subprocess.Popen | None = None
        hermes_home = home / ".hermes"
        hermes_home.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (hermes_home / "config.yaml").write_text(
            "model:\n"
            "  provider: custom\n"
            f"  base_url: {model_base_url}\n"
            f"  default: {model}\n"
            f"  api_key: {model_key}\n"
            "  api_mode: chat_completions\n"
            "approvals:\n"
            "  mode: manual\n"
            f"  timeout: {approval_timeout_s}\n"
            "terminal:\n"
            "  backend: local\n"
            f"  cwd: {self.workdir}\n"
        )
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HERMES_HOME": str(hermes_home),
            "API_SERVER_ENABLED": "true",
            "API_SERVER_KEY": self.key,
            "API_SERVER_HOST": "127.0.0.1",
            "API_SERVER_PORT": str(self.port),
            "OPENAI_API_KEY": model_key,
            "TERMINAL_CWD": str(self.workdir),
            "LANG": "C.UTF-8",
        }

    def start(self, timeout_s: float = 90.0) -> HermesGateway:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(self.exe), "gateway", "run"], cwd=self.workdir, env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HermesUnavailable(f"hermes gateway exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise HermesUnavailable(f"hermes gateway did not answer /health in {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if not self.proc or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
