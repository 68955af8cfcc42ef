"""Model output → safe HTML: Markdown rendered by markdown-it-py, then sanitised by nh3.

Raw HTML in the source is not rendered (``html=False``); nh3 then allows only a fixed set of
tags and attributes and forces ``rel="noopener noreferrer nofollow"`` on links.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable("table").enable("strikethrough")

ALLOWED_TAGS = {
    "p", "br", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li", "a",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td", "sup",
}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "th": {"align"}, "td": {"align"}, "ol": {"start"}}


def render_markdown(text: str) -> str:
    """Markdown text → sanitised HTML fragment (str). Never raises for odd input."""
    html = _md.render(text or "")
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
