"""Snippets for lists and search results: the item's text as a reader sees it, with the
searched words marked.

``snippet_html(text, query=..., markup=...)`` → a safe HTML fragment (Django ``SafeString``):

1. The markup is rendered and reduced to its text, so ``## Setup`` or ``**bold**`` or a
   reST ``.. note::`` directive show as words, not syntax: Markdown through markdown-it-py
   (the renderer of the item page), reStructuredText through docutils (raw HTML and file
   inclusion off), HTML-imported and plain text as they are.
2. A window of ``chars`` characters is cut around the first match (the start when nothing
   matches), on word boundaries, with "…" where text was cut.
3. The text is HTML-escaped and each word of the query (also with a suffix: "backup"
   marks "backups") is wrapped in ``<mark>``. Nothing of the item's own text is ever
   emitted as markup.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache

from bs4 import BeautifulSoup
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from .search import query_terms

SNIPPET_CHARS = 300
# Render at most this much source per snippet: a 500 KB document needs only its head (or the
# part around a match) for 300 characters of snippet.
RENDER_SOURCE_CHARS = 6000
_md = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough")
_BLOCKS = re.compile(r"\s+")
_NEGATED = re.compile(r'(?:^|\s)-("[^"]*"|\S+)')


def markup_of(source_path: str) -> str:
    """``"rst"`` for items imported from ``.rst`` files, else ``"markdown"`` (typed items,
    saved messages and ``.md`` files are Markdown; plain text renders the same)."""
    return "rst" if (source_path or "").lower().endswith(".rst") else "markdown"


_BLOCK_TAGS = ["p", "div", "section", "li", "dt", "dd", "tr", "td", "th", "pre", "blockquote", "aside",
               "h1", "h2", "h3", "h4", "h5", "h6", "hr", "br", "table", "caption", "figure"]


def _text_of_html(fragment: str) -> str:
    """Text of an HTML fragment: blocks separated by a space, inline elements joined as
    written ("*30 days*." stays "30 days.")."""
    soup = BeautifulSoup(fragment, "html.parser")
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_after(" ")
    return _BLOCKS.sub(" ", soup.get_text("")).strip()


@lru_cache(maxsize=512)
def _rst_text(source: str) -> str:
    from docutils.core import publish_parts

    parts = publish_parts(
        source,
        writer="html5",
        settings_overrides={
            "report_level": 5, "halt_level": 5, "raw_enabled": False, "file_insertion_enabled": False,
            "warning_stream": False, "input_encoding": "unicode", "syntax_highlight": "none",
        },
    )
    return _text_of_html(parts["title"] + " " + parts["body"])


def plain_text(text: str, *, markup: str = "markdown") -> str:
    """Rendered text of ``text`` on one line (whitespace collapsed)."""
    source = (text or "")[:RENDER_SOURCE_CHARS]
    if markup == "rst":
        try:
            return _rst_text(source)
        except Exception:  # docutils on a fragment cut mid-construct: fall back to Markdown
            pass
    return _text_of_html(_md.render(source))


def positive_terms(query: str) -> list[str]:
    """The query's words that should be marked (negated ``-word`` ones are not)."""
    negated = {w for m in _NEGATED.findall(query or "") for w in query_terms(m)}
    return [t for t in query_terms(query) if t not in negated and t != "or"]


def _pattern(terms: list[str]) -> re.Pattern | None:
    if not terms:
        return None
    stems = sorted({t[:-1] if len(t) > 3 and t.endswith("s") else t for t in terms}, key=len, reverse=True)
    return re.compile(r"(?<![^\W_])(?:" + "|".join(re.escape(s) for s in stems) + r")[^\W_]*", re.IGNORECASE)


def _window(text: str, start: int, chars: int) -> tuple[str, bool, bool]:
    if len(text) <= chars:
        return text, False, False
    lo = max(0, start - chars // 4)
    if lo:
        space = text.rfind(" ", 0, lo + 1)
        lo = space + 1 if space > 0 and lo - space < 40 else lo
    hi = min(len(text), lo + chars)
    if hi < len(text):
        space = text.rfind(" ", lo, hi)
        hi = space if space > lo + chars // 2 else hi
    return text[lo:hi], lo > 0, hi < len(text)


def snippet_html(text: str, *, query: str = "", markup: str = "markdown", chars: int = SNIPPET_CHARS) -> SafeString:
    """A rendered, escaped, highlighted snippet of ``text`` (see the module docstring)."""
    plain = plain_text(text, markup=markup)
    pattern = _pattern(positive_terms(query))
    first = pattern.search(plain) if pattern else None
    window, cut_start, cut_end = _window(plain, first.start() if first else 0, chars)
    out: list[str] = ["… "] if cut_start else []
    pos = 0
    for match in pattern.finditer(window) if pattern else ():
        out.append(html.escape(window[pos:match.start()]))
        out.append(f"<mark>{html.escape(match.group(0))}</mark>")
        pos = match.end()
    out.append(html.escape(window[pos:]))
    if cut_end:
        out.append(" …")
    return mark_safe("".join(out))  # every piece of the text is escaped above
