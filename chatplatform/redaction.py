"""Keeping provider keys out of everything a person or a log can read.

An upstream error may echo the key it was given, often transformed: the prefix dropped
(``sk-`` / ``sk-ant-api03-``), upper- or lower-cased, cut short, quoted inside a JSON body.
:func:`redact` removes, case-insensitively,

* every known key (the one passed in, plus every key this process has used —
  :func:`remember` is called whenever a provider key is read), its body without a known
  prefix, and any run of 12 or more of its body's characters;
* a known key in a transformed form: percent-encoded (once or twice), chunked by separators
  (``.``, ``:``, ``-``, ``_``, spaces, line breaks …), hex-encoded (plain or colon-hex) or
  base64-encoded (standard or URL-safe, at any byte offset) — :func:`_redact_transformed`
  compares a letters-and-digits view of the text with the same view of each form, in runs of
  ``FRAGMENT`` key characters (``2 × FRAGMENT`` hex digits, ``B64_FRAGMENT`` base64
  characters: 12 bytes of the key either way), and redacts the whole original span;
* whatever *looks* like a key even when it is unknown: ``sk-…``/``sk_…``/``pk-…``/``key-…``
  tokens, the platform's own API keys (``cp_…``), ``Bearer <token>`` / ``x-api-key: <token>`` values, and long opaque tokens (32+
  letters and digits, both present).

:class:`RedactingFilter` applies it to every log record (``LOGGING`` in settings).
"""

from __future__ import annotations

import base64
import functools
import logging
import re
import threading

REDACTED = "[redacted]"
FRAGMENT = 12  # a run of this many key characters is treated as the key
_PREFIXES = re.compile(r"^(?:sk-ant-api\d+-|sk-ant-|sk-proj-|sk-or-v\d+-|sk-|sk_live_|sk_test_|pk-|key-)", re.I)
# (pattern, replacement): what looks like a key even when it is not a known one.
_LOOKS_LIKE = [
    (re.compile(r"\b(?:sk|pk|rk|cp)[-_][A-Za-z0-9_\-]{12,}", re.I), REDACTED),
    (re.compile(r"\b(bearer|token|api[-_ ]?key|x-api-key|authorization)"
                r"([\"']?\s*[:=]?\s*[\"']?(?:bearer\s+)?)[A-Za-z0-9_\-\.]{12,}", re.I), r"\1\2" + REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{32,}(?![A-Za-z0-9])"),
     REDACTED),
]
_TOKEN = re.compile(rf"[A-Za-z0-9_\-]{{{FRAGMENT},}}")

_known: set[str] = set()
_lock = threading.Lock()


def remember(key: str | None) -> None:
    """Add ``key`` to the keys this process redacts everywhere (ignored below 8 chars)."""
    if key and len(key) >= 8:
        with _lock:
            _known.add(key)


def _bodies(keys) -> list[str]:
    out = []
    for key in keys:
        if not key or len(key) < 8:
            continue
        out.append(key)
        body = _PREFIXES.sub("", key)
        if len(body) >= 8 and body != key:
            out.append(body)
    return sorted(set(out), key=len, reverse=True)


def _shares_fragment(token: str, bodies: list[str]) -> bool:
    low = token.lower()
    for body in bodies:
        b = body.lower()
        if len(b) < FRAGMENT:
            continue
        for i in range(len(b) - FRAGMENT + 1):
            if b[i:i + FRAGMENT] in low:
                return True
    return False


def redact(text: str, keys=()) -> str:
    """``text`` with every known or key-looking secret replaced by ``[redacted]``."""
    if not text:
        return text
    with _lock:
        known = list(_known)
    bodies = _bodies([*keys, *known])
    for body in bodies:  # exact (any case)
        text = re.sub(re.escape(body), REDACTED, text, flags=re.I)
    if bodies:  # fragments: cut, or embedded in a longer token
        text = _TOKEN.sub(lambda m: REDACTED if _shares_fragment(m.group(0), bodies) else m.group(0), text)
    if bodies:
        text = _redact_transformed(text, bodies)
    for pattern, replacement in _LOOKS_LIKE:
        text = pattern.sub(replacement, text)
    return text


B64_FRAGMENT = 16  # base64 characters: 12 bytes of the key
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def _alnum(text: str) -> str:
    return _NOT_ALNUM.sub("", text.lower())


def _forms(body: str) -> list[tuple[str, int]]:
    """The letters-and-digits views of ``body``'s transformed forms, each with the run length
    (in its characters) that counts as the key: the body itself (separators between chunks
    fall away in the view), its hex, and its base64 from each of the three byte offsets (an
    encoding of a longer text that contains the key lines the key up at any of them; the last
    characters, which depend on what follows, are left out)."""
    raw = body.encode()
    forms = [(_alnum(body), FRAGMENT), (raw.hex(), 2 * FRAGMENT)]
    for offset in range(3):
        encoded = base64.b64encode(raw[offset:]).decode().rstrip("=")
        forms.append((_alnum(encoded[:-3]), B64_FRAGMENT))
    return [(form, size) for form, size in forms if len(form) >= size]


def _view(text: str) -> tuple[str, list[tuple[int, int]]]:
    """``text`` percent-decoded (twice: a value encoded again inside a URL) and reduced to
    lower-case ASCII letters and digits, with each view character's span in ``text``."""
    chars = [(c, i, i + 1) for i, c in enumerate(text)]
    for _ in range(2):
        if "%" not in text:
            break
        out, i = [], 0
        while i < len(chars):
            if chars[i][0] == "%" and i + 2 < len(chars):
                code = chars[i + 1][0] + chars[i + 2][0]
                if all(c in _HEX for c in code) and int(code, 16) < 0x80:
                    out.append((chr(int(code, 16)), chars[i][1], chars[i + 2][2]))
                    i += 3
                    continue
            out.append(chars[i])
            i += 1
        chars = out
    kept = [(c.lower(), start, end) for c, start, end in chars if c.isascii() and c.isalnum()]
    return "".join(c for c, _s, _e in kept), [(start, end) for _c, start, end in kept]


_HEX = frozenset("0123456789abcdefABCDEF")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")


@functools.lru_cache(maxsize=32)
def _grams(bodies: tuple[str, ...]) -> dict[int, frozenset[str]]:
    """Run length → every run of that length of the known keys' form views (cached: the log
    filter asks for the same keys on every record)."""
    grams: dict[int, set[str]] = {}
    for body in bodies:
        for form, size in _forms(body):
            grams.setdefault(size, set()).update(form[i:i + size] for i in range(len(form) - size + 1))
    return {size: frozenset(found) for size, found in grams.items()}


def _redact_transformed(text: str, bodies: list[str]) -> str:
    """Redact every span of ``text`` whose view (:func:`_view`) shares a run of key characters
    with a view of a known key's form (:func:`_forms`)."""
    grams = _grams(tuple(bodies))
    if not grams:
        return text
    view, spans = _view(text)
    hit = [False] * len(view)
    for size, wanted in grams.items():
        for j in range(len(view) - size + 1):
            if view[j:j + size] in wanted:
                hit[j:j + size] = [True] * size
    if not any(hit):
        return text
    cuts, j = [], 0
    while j < len(view):
        if hit[j]:
            k = j
            while k + 1 < len(view) and hit[k + 1]:
                k += 1
            start, end = spans[j][0], spans[k][1]
            while start > 0 and text[start - 1] in _TOKEN_CHARS:  # the rest of the token it is in:
                start -= 1  # a base64 text's first and last characters mix in other bytes
            while end < len(text) and (text[end] in _TOKEN_CHARS or text[end] == "="):
                end += 1
            cuts.append((start, end))
            j = k + 1
        else:
            j += 1
    merged: list[tuple[int, int]] = []
    for start, end in cuts:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    for start, end in reversed(merged):
        text = text[:start] + REDACTED + text[end:]
    return text


class RedactingFilter(logging.Filter):
    """Redacts the formatted message (and exception text) of every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler
            return True
        cleaned = redact(message)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        return True
