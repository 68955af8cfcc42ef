"""Paragraph-aware chunking: ~1500-char chunks with ~200 chars of overlap.

Chunks end at paragraph boundaries where possible so a retrieved passage reads whole; a
paragraph longer than the target is split at sentence boundaries.
"""

from __future__ import annotations

import re

TARGET_CHARS = 1500
OVERLAP_CHARS = 200


def _pieces(text: str, target: int) -> list[str]:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    out: list[str] = []
    for para in paragraphs:
        if len(para) <= target:
            out.append(para)
            continue
        sentences = re.split(r"(?<=[.!?])\s+", para)
        current = ""
        for sentence in sentences:
            while len(sentence) > target:  # no sentence boundary: hard split
                out.append(sentence[:target])
                sentence = sentence[target:]
            if current and len(current) + len(sentence) + 1 > target:
                out.append(current)
                current = sentence
            else:
                current = f"{current} {sentence}".strip()
        if current:
            out.append(current)
    return out


def _tail(text: str, size: int) -> str:
    """The last ~``size`` chars of ``text``, starting at a word (never mid-word)."""
    if len(text) <= size:
        return text
    tail = text[-size:]
    # Start the overlap at a sentence if one begins inside it (a retrieved passage then
    # reads whole), else at a word.
    sentence = re.search(r"[.!?]\s+(?=\S)", tail)
    if sentence and sentence.end() < len(tail) - 1:
        return tail[sentence.end():]
    cut = tail.find(" ")
    return tail[cut + 1:] if 0 <= cut < len(tail) - 1 else tail


def chunk_text(text: str, *, target: int = TARGET_CHARS, overlap: int = OVERLAP_CHARS) -> list[str]:
    """Split ``text`` into chunks of at most ~``target`` chars (+ up to ``overlap`` chars
    carried over from the previous chunk's last paragraph). Empty text → ``[]``."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for piece in _pieces(text, target):
        if current and size + len(piece) + 2 > target:
            chunks.append("\n\n".join(current))
            tail = _tail(current[-1], overlap) if overlap else ""
            current = [tail] if tail and len(tail) < len(piece) * 4 else []
            size = len(tail) if current else 0
        current.append(piece)
        size += len(piece) + 2
    if current:
        chunks.append("\n\n".join(current))
    return chunks
