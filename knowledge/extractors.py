"""Text out of HTML, PDF and Word files — the parsers a hostile file can attack.

No Django here: these functions run in the resource-limited parse process
(``knowledge.parse_child``, started by ``knowledge.parse_guard``), never in a web or worker
process. Each takes the file's bytes and returns ``(title, text)`` or raises
:class:`ImportFailed` with a reason for the person who sent the file.
"""

from __future__ import annotations

import io
import re

_BLOCK_TAGS = [
    "p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote", "pre",
    "ul", "ol", "li", "dl", "dt", "dd", "table", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "figure",
]
_DROP_TAGS = ["script", "style", "noscript", "template", "nav", "svg", "iframe", "form", "head"]


class ImportFailed(Exception):
    """One file could not be imported; the message says why."""



def _tidy(text: str) -> str:
    """Trim lines, collapse runs of blank lines to one paragraph break."""
    lines = [" ".join(line.split()) if line.strip() else "" for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()



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


def extract_pdf(raw: bytes) -> tuple[str, str]:
    """PDF bytes → ``(title, text)``. An encrypted PDF that opens with the empty password
    (common for "no copying" flags) is read; one that needs a password is an ImportFailed."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ImportFailed("the PDF is password-protected")
        pages = [(page.extract_text() or "") for page in reader.pages]
        title = str((reader.metadata or {}).get("/Title") or "").strip()
    except ImportFailed:
        raise
    except Exception as exc:  # pypdf raises many kinds for broken files
        if "password" in str(exc).lower() or "decrypt" in str(exc).lower():
            raise ImportFailed("the PDF is password-protected") from exc
        raise ImportFailed(f"unreadable PDF ({type(exc).__name__}: {exc})") from exc
    return title, _tidy("\n\n".join(pages))


def extract_docx(raw: bytes) -> tuple[str, str]:
    """Word ``.docx`` bytes → ``(title, text)``: paragraphs in order (headings as Markdown
    ``#`` lines so chunking and titles work as for Markdown), then table rows with their
    cells joined by `` | ``. The title is the document's core "title" property, else its
    first heading."""
    import docx

    try:
        document = docx.Document(io.BytesIO(raw))
    except Exception as exc:  # not a zip, not a Word document, a broken part
        raise ImportFailed(f"unreadable Word document ({type(exc).__name__})") from exc
    lines: list[str] = []
    first_heading = ""
    for para in document.paragraphs:
        text = para.text.strip()
        if not text:
            continue
        style = (para.style.name or "") if para.style is not None else ""
        if style == "Title" or style.startswith("Heading"):
            level = 1 if style == "Title" else int("".join(c for c in style if c.isdigit()) or 1)
            first_heading = first_heading or text
            lines.append("#" * min(level, 6) + " " + text)
        else:
            lines.append(text)
    for table in document.tables:
        for row in table.rows:
            cells = [c.text.strip() for c in row.cells]
            if any(cells):
                lines.append(" | ".join(cells))
    title = (document.core_properties.title or "").strip() or first_heading
    return title, "\n\n".join(lines).strip()
