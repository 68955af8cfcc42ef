"""Importing files into the knowledge base (``manage.py import_knowledge``).

Formats: ``.md``/``.markdown``, ``.txt``, ``.rst`` (read as text), ``.html``/``.htm`` (text
extracted with Beautiful Soup: scripts, styles and navigation dropped, block elements become
paragraphs), ``.pdf`` (pypdf, pure Python: the text layer page by page; a scanned PDF without
one is an error, a password-protected one too), ``.docx`` (python-docx: paragraphs and table
cells, headings as Markdown headings). Idempotent by (workspace, source path, content hash):
an unchanged file is skipped, a changed one updates its item (and re-chunks it), a new one
creates an item. ``extract_bytes`` is shared with uploads from the browser
(``knowledge/uploads.py``), so both paths parse a file the same way.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from chat.models import Workspace

from . import parse_guard
from .extractors import ImportFailed, _tidy, extract_docx, extract_html, extract_pdf  # noqa: F401  (re-exported)
from .models import KnowledgeItem
from .services import KnowledgeRejected, content_hash, knowledge_item_create, knowledge_item_update

TEXT_SUFFIXES = {".md", ".markdown", ".txt", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
PDF_SUFFIXES = {".pdf"}
DOCX_SUFFIXES = {".docx"}
SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES | DOCX_SUFFIXES
MAX_FILE_BYTES = 20 * 1024 * 1024  # default of settings.KNOWLEDGE_MAX_FILE_BYTES


def max_file_bytes() -> int:
    """Largest file imported or uploaded, in bytes (``KNOWLEDGE_MAX_FILE_BYTES``, 20 MiB)."""
    from django.conf import settings

    return int(getattr(settings, "KNOWLEDGE_MAX_FILE_BYTES", MAX_FILE_BYTES))


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    @property
    def total(self) -> int:
        return self.created + self.updated + self.unchanged + len(self.failed)


def _text_title(text: str, suffix: str) -> str:
    lines = [ln.rstrip() for ln in text.splitlines()]
    for n, line in enumerate(lines[:50]):
        if suffix in (".md", ".markdown") and line.startswith("#"):
            return line.lstrip("#").strip()
        nxt = lines[n + 1] if n + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"([=\-~^*#+])\1{2,}", nxt.strip() or "x") and len(nxt.strip()) >= len(line.strip()) // 2:
            return line.strip()  # reStructuredText / setext heading
    return ""


# Byte-order marks a text editor writes first (Windows Notepad saves "Unicode" as UTF-16 LE
# with a BOM): such a file is text even though UTF-16 puts NUL bytes between ASCII letters.
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def text_encoding(raw: bytes) -> str | None:
    """The encoding a text file's byte-order mark names (``utf-8-sig``, ``utf-16``,
    ``utf-32``), or ``None`` without one. UTF-32 LE is checked before UTF-16 LE, whose BOM
    it starts with."""
    return next((name for bom, name in _BOMS if raw.startswith(bom)), None)


def decode_text(raw: bytes) -> str:
    """A text file's bytes as ``str``: by its byte-order mark when it has one, else UTF-8
    (undecodable bytes replaced). Raises ImportFailed for binary content (NUL bytes in the
    first 4 KiB of a file without a BOM, or bytes its BOM's encoding cannot decode)."""
    encoding = text_encoding(raw)
    if encoding:
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            raise ImportFailed(f"not a text file (invalid {encoding.upper()} after its byte-order mark)") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if b"\x00" in raw[:4096]:
            raise ImportFailed("not a text file (binary content)") from None
        return raw.decode("utf-8", errors="replace")


def extract_bytes(name: str, raw: bytes) -> tuple[str, str]:
    """``(title, text)`` of a supported file given its name (for the type) and its bytes;
    the title falls back to the file name. Raises ImportFailed for an unsupported type,
    an oversized, unreadable, password-protected or empty file, and for one whose parsing
    would exceed the limits of ``knowledge.parse_guard`` (a decompression bomb)."""
    suffix = Path(name).suffix.lower()
    if suffix not in SUFFIXES:
        raise ImportFailed(f"unsupported file type {suffix or '(none)'}")
    if len(raw) > max_file_bytes():
        raise ImportFailed(f"larger than {max_file_bytes() // (1024 * 1024)} MB")
    if suffix in PDF_SUFFIXES | DOCX_SUFFIXES | HTML_SUFFIXES:
        # Parsers a hostile file can attack (decompression bombs, deep nesting): a zip's
        # declared sizes are checked first, then the parser runs in a separate process with
        # memory, CPU and wall-clock limits (knowledge.parse_guard).
        title, text = parse_guard.parse(suffix, raw)
    else:
        text = decode_text(raw)
        text = text.replace("\r\n", "\n")
        title = _text_title(text, suffix)
        text = text.strip()
    if not text.strip():
        raise ImportFailed("no text found")
    stem = Path(name).stem
    fallback = stem.replace("_", " ").replace("-", " ").strip()
    return (" ".join(title.split())[:300] or fallback or name), text


def extract(path: Path) -> tuple[str, str]:
    """``(title, text)`` of a supported file on disk (see ``extract_bytes``)."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ImportFailed(f"unsupported file type {suffix or '(none)'}")
    try:
        size = path.stat().st_size
        if size > max_file_bytes():
            raise ImportFailed(f"larger than {max_file_bytes() // (1024 * 1024)} MB")
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFailed(f"cannot read: {exc.strerror or exc}") from exc
    return extract_bytes(path.name, raw)


def iter_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    """Files named, and supported files under directories named (sorted, recursive); each
    file once."""
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES) if path.is_dir() else [path]
        for file in found:
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                yield file


def knowledge_import_file(
    *, workspace: Workspace, path: Path, owner=None, type: str = "document", tags: list[str] | None = None
) -> str:
    """Import one file; returns ``"created"``, ``"updated"`` or ``"unchanged"``. Raises
    ImportFailed. The source path is the resolved absolute path."""
    source = str(path.resolve())
    title, text = extract(path)
    try:
        existing = KnowledgeItem.objects.filter(workspace=workspace, source_path=source).first()
        if existing is None:
            knowledge_item_create(workspace=workspace, owner=owner, title=title, content=text, type=type,
                                  tags=tags, source_path=source)
            return "created"
        if existing.content_hash == content_hash(title, text):
            return "unchanged"
        knowledge_item_update(item=existing, title=title, content=text)
        return "updated"
    except KnowledgeRejected as exc:
        raise ImportFailed(exc.message) from exc


def knowledge_import_paths(
    *,
    workspace: Workspace,
    paths: Iterable[str | Path],
    owner=None,
    type: str = "document",
    tags: list[str] | None = None,
    on_file: Callable[[Path, str], None] | None = None,
) -> ImportReport:
    """Import every file of ``paths``; a failing file is recorded and the rest go on.
    ``on_file(path, outcome)`` is called after each file (progress)."""
    report = ImportReport()
    for path in iter_files(paths):
        try:
            outcome = knowledge_import_file(workspace=workspace, path=path, owner=owner, type=type, tags=tags)
        except ImportFailed as exc:
            report.failed.append((str(path), str(exc)))
            outcome = "failed"
        except Exception as exc:  # a bug or a database error on one file must not stop the rest
            report.failed.append((str(path), f"{exc.__class__.__name__}: {exc}"))
            outcome = "failed"
        else:
            setattr(report, outcome, getattr(report, outcome) + 1)
        if on_file:
            on_file(path, outcome)
    return report
