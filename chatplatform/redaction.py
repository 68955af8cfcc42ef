"""Keeping provider keys out of everything a person or a log can read.

An upstream error may echo the key it was given, often transformed: the prefix dropped
(``sk-`` / ``sk-ant-api03-``), upper- or lower-cased, cut short, quoted inside a JSON body.
:func:`redact` removes, case-insensitively,

* every known key (the one passed in, plus every key this process has used —
  :func:`remember` is called whenever a provider key is read), its body without a known
  prefix, and any run of 12 or more of its body's characters;
* whatever *looks* like a key even when it is unknown: ``sk-…``/``sk_…``/``pk-…``/``key-…``
  tokens, ``Bearer <token>`` / ``x-api-key: <token>`` values, and long opaque tokens (32+
  letters and digits, both present).

:class:`RedactingFilter` applies it to every log record (``LOGGING`` in settings).
"""

from __future__ import annotations

import logging
import re
import threading

REDACTED = "[redacted]"
FRAGMENT = 12  # a run of this many key characters is treated as the key
_PREFIXES = re.compile(r"^(?:sk-ant-api\d+-|sk-ant-|sk-proj-|sk-or-v\d+-|sk-|sk_live_|sk_test_|pk-|key-)", re.I)
# (pattern, replacement): what looks like a key even when it is not a known one.
_LOOKS_LIKE = [
    (re.compile(r"\b(?:sk|pk|rk)[-_][A-Za-z0-9_\-]{12,}", re.I), REDACTED),
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
    for pattern, replacement in _LOOKS_LIKE:
        text = pattern.sub(replacement, text)
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
