"""Importing files into the knowledge base (``manage.py import_knowledge``).

Formats: ``.md``/``.markdown``, ``.txt``, ``.rst`` (read as text), ``.html``/``.htm`` (text
extracted with Beautiful Soup: scripts, styles and navigation dropped, block elements become
paragraphs), ``.pdf`` (pypdf, pure Python: the text layer page by page; a scanned PDF without
one is an error). Idempotent by (workspace, source path, content hash): an unchanged file is
skipped, a changed one updates its item (and re-chunks it), a new one creates an item.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from chat.models import Workspace

from .models import KnowledgeItem
from .services import KnowledgeRejected, content_hash, knowledge_item_create, knowledge_item_update

TEXT_SUFFIXES = {".md", ".markdown", ".txt", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
PDF_SUFFIXES = {".pdf"}
SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES
MAX_FILE_BYTES = 20 * 1024 * 1024
_BLOCK_TAGS = [
    "p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote", "pre",
    "ul", "ol", "li", "dl", "dt", "dd", "table", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "figure",
]
_DROP_TAGS = ["script", "style", "noscript", "template", "nav", "svg", "iframe", "form", "head"]


class ImportFailed(Exception):
    """One file could not be imported; the message says why."""


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    @property
    def total(self) -> int:
        return self.created + self.updated + self.unchanged + len(self.failed)


def _tidy(text: str) -> str:
    """Trim lines, collapse runs of blank lines to one paragraph break."""
    lines = [" ".join(line.split()) if line.strip() else "" for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _text_title(text: str, suffix: str) -> str:
    lines = [ln.rstrip() for ln in text.splitlines()]
    for n, line in enumerate(lines[:50]):
        if suffix in (".md", ".markdown") and line.startswith("#"):
            return line.lstrip("#").strip()
        nxt = lines[n + 1] if n + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"([=\-~^*#+])\1{2,}", nxt.strip() or "x") and len(nxt.strip()) >= len(line.strip()) // 2:
            return line.strip()  # reStructuredText / setext heading
    return ""


def extract_html(raw: bytes) -> tuple[str, str]:
    """HTML bytes → ``(title, text)``; text keeps paragraphs, drops scripts and chrome."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(raw, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    if not title and soup.find("h1"):
        title = soup.find("h1").get_text(" ", strip=True)
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for br in soup.find_all("br"):
        br.replace_with("\n")
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    return title, _tidy(soup.get_text())


def extract_pdf(path: Path) -> tuple[str, str]:
    from pypdf import PdfReader

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            raise ImportFailed("the PDF is encrypted")
        pages = [(page.extract_text() or "") for page in reader.pages]
        title = str((reader.metadata or {}).get("/Title") or "").strip()
    except ImportFailed:
        raise
    except Exception as exc:  # pypdf raises many kinds for broken files
        raise ImportFailed(f"unreadable PDF ({type(exc).__name__}: {exc})") from exc
    return title, _tidy("\n\n".join(pages))


def extract(path: Path) -> tuple[str, str]:
    """``(title, text)`` of a supported file; the title falls back to the file name.
    Raises ImportFailed for unsupported, oversized, unreadable or empty files."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ImportFailed(f"unsupported file type {suffix or '(none)'}")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ImportFailed(f"cannot read: {exc.strerror or exc}") from exc
    if size > MAX_FILE_BYTES:
        raise ImportFailed(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    if suffix in PDF_SUFFIXES:
        title, text = extract_pdf(path)
    else:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ImportFailed(f"cannot read: {exc.strerror or exc}") from exc
        if suffix in HTML_SUFFIXES:
            title, text = extract_html(raw)
        else:
            text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
            title = _text_title(text, suffix)
            text = text.strip()
    if not text.strip():
        raise ImportFailed("no text found")
    fallback = path.stem.replace("_", " ").replace("-", " ").strip()
    return (" ".join(title.split())[:300] or fallback or path.name), text


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
