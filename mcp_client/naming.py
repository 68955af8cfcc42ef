"""Exposed tool names: unique across every source and accepted by every provider.

Rules (``shared/cases/platform/05``):

* a tool keeps its own name while that name is valid (``^[a-zA-Z0-9_-]{1,64}$``, what the
  OpenAI, Anthropic and Ollama wire formats all accept) and no other source offers it;
* a name offered by two sources (a built-in and a server, or two enabled servers) becomes
  ``<server>__<tool>`` for every server offering it (built-ins keep theirs);
* a name providers reject becomes ``<server>__<tool>`` with the rejected characters replaced
  by ``_``;
* a result longer than 64 characters is cut and ends in ``_`` + 8 hex characters of a hash
  of ``server/tool``, so it stays unique and stable.

Nothing is dropped: every (server, tool) pair gets exactly one exposed name, and calls map
back to the pair (the policy row and the invocation both use the pair, see ``mcp_client.sync``).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable

from agents.tools.api import TOOL_NAME_RE

MAX_LEN = 64
_BAD = re.compile(r"[^a-zA-Z0-9_-]")


def _hashed(text: str, key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{text[: MAX_LEN - 9]}_{digest}"


def prefixed(server: str, tool: str) -> str:
    """``<server>__<tool>`` sanitised; hashed suffix when longer than 64 characters."""
    name = _BAD.sub("_", f"{server}__{tool}")
    return name if len(name) <= MAX_LEN else _hashed(name, f"{server}/{tool}")


def exposed_names(pairs: Iterable[tuple[str, str]], reserved: Iterable[str] = ()) -> dict[tuple[str, str], str]:
    """``{(server, tool): exposed_name}`` for every pair; ``reserved``: names taken by
    built-in tools (never renamed). The result's names are unique and all match
    ``TOOL_NAME_RE``."""
    pairs = list(dict.fromkeys(pairs))
    reserved = set(reserved)
    counts = Counter(tool for _, tool in pairs)
    out: dict[tuple[str, str], str] = {}
    for server, tool in pairs:
        keeps = TOOL_NAME_RE.match(tool) and counts[tool] == 1 and tool not in reserved
        out[(server, tool)] = tool if keeps else prefixed(server, tool)
    # A prefixed name could still meet another (``a__b`` offered as a plain name): hash it.
    taken = Counter(out.values())
    for pair, name in list(out.items()):
        if taken[name] > 1 or (name in reserved):
            out[pair] = _hashed(_BAD.sub("_", f"{pair[0]}__{pair[1]}"), f"{pair[0]}/{pair[1]}")
    return out
