"""Decompression bombs against the knowledge parser guard (``knowledge.parse_guard``), with
the default limits: time to refusal, the importing (parent) process's peak RSS growth and
the parse (child) process's peak RSS, read from ``/proc/<pid>/status`` (VmHWM) while it runs.

    DJANGO_SETTINGS_MODULE=config.settings.test .venv/bin/python bench/parse_bombs.py

On the 2-core bench box (shared), default limits (512 MB, 20 s CPU, 30 s wall):

    bomb.docx   1426 KB → 401 MB unpacked: refused in 0.00 s (zip directory), no parse process
    bomb.pdf    1433 KB → 480 MB of content streams: refused in 11.5 s (pypdf's own token
                limit, before the CPU limit); parse process peak 416 MB
    deep.html   9766 KB, 2,000,000 nested <div>: refused in 10.9 s (memory limit); parse
                process peak 504 MB
    bomb2.docx  the .docx with the zip check off: refused in 0.45 s (memory limit); parse
                process peak 429 MB
    the importing process's peak RSS grew by 0 MB in every case (it stayed at the 278 MB it
    reached building the bombs). Before the guard, in-process parsing of the same .docx held
    a pytest process at 3.9 GB RSS after 12 minutes, still parsing.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")

import django  # noqa: E402

django.setup()

from knowledge import parse_guard  # noqa: E402
from knowledge.importing import ImportFailed, extract_bytes  # noqa: E402
from tests.fakes.bombs import docx_bomb, html_bomb, pdf_bomb  # noqa: E402


def _children_hwm_kb(seen: dict[int, int]) -> None:
    me = os.getpid()
    for task in Path(f"/proc/{me}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in map(int, kids):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        seen[pid] = max(seen.get(pid, 0), int(line.split()[1]))
            except OSError:
                pass


def measure(name: str, raw: bytes) -> None:
    seen: dict[int, int] = {}
    done = threading.Event()

    def poll():
        while not done.is_set():
            _children_hwm_kb(seen)
            time.sleep(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    before, started = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic()
    try:
        extract_bytes(name, raw)
        outcome = "ACCEPTED"
    except ImportFailed as exc:
        outcome = str(exc)
    elapsed = time.monotonic() - started
    done.set()
    poller.join()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    grown = after - before
    child = max(seen.values()) if seen else 0
    print(f"{name:12} {len(raw) / 1024:8.0f} KB  refused in {elapsed:5.2f} s  parent peak {after / 1024:.0f} MB (+{grown / 1024:.0f})  "
          f"child peak {child / 1024:.0f} MB  — {outcome}")


def main() -> None:
    limits = parse_guard.Limits.from_settings()
    print(f"limits: archive {limits.archive_max_bytes >> 20} MB / ratio {limits.archive_max_ratio:g}; "
          f"parse {limits.memory_mb} MB, {limits.cpu_s} s CPU, {limits.timeout_s:g} s wall")
    bombs = [("bomb.docx", docx_bomb(400)), ("bomb.pdf", pdf_bomb(pages=8, page_mb=60)),
             ("deep.html", html_bomb(2_000_000))]
    for name, raw in bombs:
        measure(name, raw)
    # bomb2.docx: the same .docx as if its central directory had not given it away: the parse limits stop it.
    from django.conf import settings

    settings.KNOWLEDGE_ARCHIVE_MAX_BYTES, settings.KNOWLEDGE_ARCHIVE_MAX_RATIO = 10**12, 10**9
    measure("bomb2.docx", bombs[0][1])


if __name__ == "__main__":
    main()
