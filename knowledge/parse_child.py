"""The parse process: ``python -E -s -m knowledge.parse_child SUFFIX MEMORY_MB CPU_S MAX_CHARS``
reads a file's bytes on stdin and writes one JSON object on stdout:

* ``{"ok": true, "title": str, "text": str, "peak_rss_kb": int}``;
* ``{"ok": false, "error": str, "kind": "unreadable" | "memory" | "too_long"}``.

Its limits are set first, before any parser is imported: address space (``RLIMIT_AS``,
MEMORY_MB) and CPU time (``RLIMIT_CPU``, CPU_S; the kernel ends the process with SIGXCPU,
then SIGKILL). The parent (``knowledge.parse_guard``) adds a wall-clock timeout. No Django is
loaded here: the process holds nothing but the file.
"""

from __future__ import annotations

import json
import resource
import sys


def _limit(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # Soft limit: SIGXCPU (ends the process); the hard limit a second later: SIGKILL.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))


def _peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _answer(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload))
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    suffix, memory_mb, cpu_s, max_chars = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    raw = sys.stdin.buffer.read()
    _limit(memory_mb, cpu_s)
    try:
        from knowledge.extractors import ImportFailed, extract_docx, extract_html, extract_pdf

        parser = {".pdf": extract_pdf, ".docx": extract_docx, ".html": extract_html, ".htm": extract_html}[suffix]
        try:
            title, text = parser(raw)
        except ImportFailed as exc:
            # A parser that wraps every error (pypdf, python-docx) may have wrapped a MemoryError.
            if isinstance(exc.__cause__, MemoryError):
                raise exc.__cause__ from None
            _answer({"ok": False, "error": str(exc), "kind": "unreadable", "peak_rss_kb": _peak_kb()})
            return 0
        except RecursionError:
            _answer({"ok": False, "error": "the file is nested too deeply to read", "kind": "unreadable"})
            return 0
        del raw
        if len(text) > max_chars:
            _answer({"ok": False, "error": f"its text is longer than {max_chars:,} characters", "kind": "too_long"})
            return 0
        _answer({"ok": True, "title": title, "text": text, "peak_rss_kb": _peak_kb()})
        return 0
    except MemoryError:
        # Free what the parser held so the answer can be written at all.
        raw = title = text = None  # noqa: F841
        _answer({"ok": False, "error": "memory", "kind": "memory"})
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
