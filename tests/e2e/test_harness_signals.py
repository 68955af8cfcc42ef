"""The harness's process hygiene: a bench or test that is terminated (``timeout``, ``kill``)
stops the servers it started, which run in sessions of their own and would otherwise outlive
it — an orphaned Celery worker then takes the next run's turns from the shared Redis queue."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from .harness import REPO

CHILD = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from tests.e2e.harness import exit_on_sigterm
    if sys.argv[4] == "on":
        exit_on_sigterm()
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    open(sys.argv[2], "w").write(str(server.pid))
    try:
        print("ready", flush=True)
        time.sleep(120)
    finally:  # what Platform.stop() does
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
        open(sys.argv[3], "w").write("stopped")
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is not running
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def _terminate(tmp_path, handler: str) -> tuple[int, bool, int]:
    pid_file, marker = tmp_path / f"server-{handler}", tmp_path / f"stopped-{handler}"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), str(pid_file), str(marker), handler],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    status = proc.wait(timeout=30)
    return status, marker.exists(), int(pid_file.read_text())


def test_sigterm_unwinds_so_the_servers_are_stopped(tmp_path):
    status, stopped, server = _terminate(tmp_path, "on")
    assert status == 128 + signal.SIGTERM and stopped
    deadline = time.monotonic() + 10
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server)


def test_without_it_a_terminated_run_leaves_its_server_behind(tmp_path):
    """The case the helper exists for: Python's default SIGTERM skips ``finally``."""
    status, stopped, server = _terminate(tmp_path, "off")
    try:
        assert status == -signal.SIGTERM and not stopped and _alive(server)
    finally:
        os.killpg(server, signal.SIGKILL)
