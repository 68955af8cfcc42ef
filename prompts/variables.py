"""``{{variables}}`` in a prompt's body: the one grammar, read by the server (the API's
``variables`` field, the limits) and mirrored by the composer
(``templates/static/chat/app/prompt-vars.js``; the same cases are tested on both sides).

Grammar: ``{{name}}`` or ``{{name|default}}``. ``name``: a letter or ``_`` then up to 39
letters, digits, spaces, ``_`` or ``-`` (surrounding spaces trimmed: ``{{ tone }}`` is
``tone``); ``default``: up to 200 characters without braces, trimmed (``{{tone|}}``: an
empty default, so the field may stay empty). Anything else between braces — ``{{<script>}}``,
``{{}}``, ``{{ 1st }}`` — is not a variable and stays as written. A name used twice is one
variable; the first default given wins. Filling is one pass: a value that itself contains
``{{x}}`` is inserted as it is, never expanded again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_MAX = 40
DEFAULT_MAX = 200

# {0,39}: NAME_MAX - 1 after the first character; {0,200}: DEFAULT_MAX.
VARIABLE = re.compile(r"\{\{\s*([^\W\d][\w \-]{0,39}?)\s*(?:\|([^{}]{0,200}))?\}\}")


@dataclass(frozen=True)
class Variable:
    name: str
    default: str | None  # None: no default given (the field starts empty and must be filled)


def prompt_variables(body: str) -> list[Variable]:
    """The distinct variables of ``body`` in order of first use."""
    seen: dict[str, Variable] = {}
    for match in VARIABLE.finditer(body or ""):
        name = match.group(1).strip()
        if name in seen:
            if seen[name].default is None and match.group(2) is not None:
                seen[name] = Variable(name, match.group(2).strip())
            continue
        default = match.group(2)
        seen[name] = Variable(name, None if default is None else default.strip())
    return list(seen.values())


def prompt_fill(body: str, values: dict[str, str]) -> str:
    """``body`` with each variable replaced by ``values[name]``, else its default, else left
    as written (so a missing value is visible, never silently dropped)."""
    defaults = {v.name: v.default for v in prompt_variables(body)}

    def replace(match: re.Match) -> str:
        name = match.group(1).strip()
        if name in values:
            return values[name]
        default = defaults.get(name)
        return default if default is not None else match.group(0)

    return VARIABLE.sub(replace, body or "")
