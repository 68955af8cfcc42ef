"""Parsing untrusted documents without letting one take the process down.

A small file can expand enormously when parsed: a 300 KB ``.docx`` whose ``document.xml``
inflates to hundreds of MB, a PDF whose FlateDecode stream inflates to gigabytes, HTML
nested a million tags deep. Two layers, for every parsed format (``.docx``, ``.pdf``,
``.html``/``.htm``):

1. **Before decompression** (zip-based formats: ``.docx``) the zip's central directory is
   read with ``zipfile`` — nothing is inflated — and the file is refused when its entries
   declare more than ``KNOWLEDGE_ARCHIVE_MAX_BYTES`` in total, more than
   ``KNOWLEDGE_ARCHIVE_MAX_ENTRIES`` entries, an expansion ratio above
   ``KNOWLEDGE_ARCHIVE_MAX_RATIO`` (for archives expanding beyond 1 MiB), or a nested archive
   over that ratio. ``zipfile`` (which python-docx reads with) never inflates an entry past
   its declared size, so the declared sizes bound what the parser can see.
2. **The parse itself** runs in a fresh interpreter (``knowledge.parse_child``, started with
   ``subprocess`` so it works the same from a web process, a thread of the embedded pool and
   a daemonic Celery worker process) limited to ``KNOWLEDGE_PARSE_MEMORY_MB`` of address
   space and ``KNOWLEDGE_PARSE_CPU_S`` of CPU time, and ended after
   ``KNOWLEDGE_PARSE_TIMEOUT_S`` of wall-clock time. The calling process holds only the
   file's bytes (at most ``KNOWLEDGE_MAX_FILE_BYTES``) and the extracted text (at most
   ``knowledge.services.MAX_CONTENT_CHARS`` characters: the child refuses longer).

Every refusal is an ``ImportFailed`` whose message says which limit was hit; nothing is
stored.
"""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .extractors import ImportFailed

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
ZIP_SUFFIXES = {".docx"}
NESTED_ARCHIVE_SUFFIXES = (".zip", ".docx", ".xlsx", ".pptx", ".odt", ".ods", ".odp", ".jar", ".gz", ".bz2", ".xz",
                           ".7z", ".rar", ".tar")
_RATIO_FLOOR_BYTES = 1024 * 1024  # below this a high ratio (tiny repetitive XML) is harmless


@dataclass(frozen=True)
class Limits:
    archive_max_bytes: int
    archive_max_entries: int
    archive_max_ratio: float
    memory_mb: int
    cpu_s: int
    timeout_s: float
    max_chars: int

    @classmethod
    def from_settings(cls) -> Limits:
        from django.conf import settings

        from .services import MAX_CONTENT_CHARS

        return cls(
            archive_max_bytes=int(getattr(settings, "KNOWLEDGE_ARCHIVE_MAX_BYTES", 100 * 1024 * 1024)),
            archive_max_entries=int(getattr(settings, "KNOWLEDGE_ARCHIVE_MAX_ENTRIES", 2000)),
            archive_max_ratio=float(getattr(settings, "KNOWLEDGE_ARCHIVE_MAX_RATIO", 100)),
            memory_mb=int(getattr(settings, "KNOWLEDGE_PARSE_MEMORY_MB", 512)),
            cpu_s=int(getattr(settings, "KNOWLEDGE_PARSE_CPU_S", 20)),
            timeout_s=float(getattr(settings, "KNOWLEDGE_PARSE_TIMEOUT_S", 30)),
            max_chars=MAX_CONTENT_CHARS,
        )


def _mib(n: float) -> str:
    return f"{n / (1024 * 1024):,.0f} MB"


def check_archive(raw: bytes, limits: Limits) -> None:
    """Refuse a zip-based file from its central directory alone (nothing is inflated).
    Raises ImportFailed naming the limit; a file that is not a zip is left to the parser
    (which reports it unreadable)."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return
    if len(entries) > limits.archive_max_entries:
        raise ImportFailed(f"refused: the archive holds {len(entries):,} entries "
                           f"(at most {limits.archive_max_entries:,})")
    total = sum(max(0, e.file_size) for e in entries)
    packed = max(1, sum(max(0, e.compress_size) for e in entries))
    if total > limits.archive_max_bytes:
        raise ImportFailed(f"refused: it expands to {_mib(total)} when unpacked "
                           f"(at most {_mib(limits.archive_max_bytes)}) — a decompression bomb?")
    if total > _RATIO_FLOOR_BYTES and total / packed > limits.archive_max_ratio:
        raise ImportFailed(f"refused: it expands {total / packed:,.0f} times when unpacked "
                           f"(at most {limits.archive_max_ratio:,.0f}) — a decompression bomb?")
    for entry in entries:
        if entry.filename.lower().endswith(NESTED_ARCHIVE_SUFFIXES) and entry.file_size > _RATIO_FLOOR_BYTES \
                and entry.file_size / max(1, entry.compress_size) > limits.archive_max_ratio:
            raise ImportFailed(f"refused: the nested archive {entry.filename[:100]!r} expands "
                               f"{entry.file_size / max(1, entry.compress_size):,.0f} times")


def _run_child(suffix: str, raw: bytes, limits: Limits) -> tuple[int, bytes, bytes]:
    cmd = [sys.executable, "-E", "-s", "-m", "knowledge.parse_child", suffix, str(limits.memory_mb),
           str(limits.cpu_s), str(limits.max_chars)]
    # A clean interpreter (-E: no PYTHON* variables, -s: no user site; ``-m`` from ROOT puts
    # the project on its path): no inherited descriptors, its own session, nothing from our
    # environment.
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                            close_fds=True, start_new_session=True)
    try:
        out, err = proc.communicate(raw, timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err


def parse(suffix: str, raw: bytes, limits: Limits | None = None) -> tuple[str, str]:
    """``(title, text)`` of a ``.docx``/``.pdf``/``.html``/``.htm`` file's bytes, parsed within
    the limits above. Raises ImportFailed: unreadable (the parser's reason), too large when
    unpacked, over the memory, CPU or time limit, or text longer than the content limit."""
    limits = limits or Limits.from_settings()
    if suffix in ZIP_SUFFIXES:
        check_archive(raw, limits)
    started = time.monotonic()
    try:
        code, out, err = _run_child(suffix, raw, limits)
    except subprocess.TimeoutExpired:
        logger.warning("knowledge: parsing a %s file took over %s s; stopped", suffix, limits.timeout_s)
        raise ImportFailed(f"refused: reading it took longer than {limits.timeout_s:g} s "
                           "(KNOWLEDGE_PARSE_TIMEOUT_S) — a decompression bomb?") from None
    elapsed = time.monotonic() - started
    try:
        answer = json.loads(out) if code in (0, 3) and out else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and answer.get("ok"):
        return str(answer.get("title") or ""), str(answer.get("text") or "")
    if isinstance(answer, dict) and answer.get("kind") in ("unreadable", "too_long"):
        raise ImportFailed(str(answer.get("error") or "unreadable"))
    if code in (-signal.SIGXCPU, -signal.SIGKILL) and answer is None:
        logger.warning("knowledge: parsing a %s file used over %s s of CPU; stopped", suffix, limits.cpu_s)
        raise ImportFailed(f"refused: reading it needed more than {limits.cpu_s} s of CPU time "
                           "(KNOWLEDGE_PARSE_CPU_S) — a decompression bomb?")
    if (isinstance(answer, dict) and answer.get("kind") == "memory") or code != 0:
        # An allocation the limit refused: a MemoryError, or a C library aborting on it.
        logger.warning("knowledge: parsing a %s file hit the %s MB memory limit after %.1f s (exit %s): %s",
                       suffix, limits.memory_mb, elapsed, code, err[-300:].decode("utf-8", "replace"))
        raise ImportFailed(f"refused: reading it needed more than {limits.memory_mb} MB of memory "
                           "(KNOWLEDGE_PARSE_MEMORY_MB) — a decompression bomb?")
    raise ImportFailed("unreadable file (the parser gave no answer)")
