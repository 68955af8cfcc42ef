"""Model-facing tool results: serialised, and structurally truncated past 4000 chars.

4000 chars: structured truncation keeps the model's context useful (DESIGN §1, ss-tools
row); the full result stays in the ToolCall ledger.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_RESULT_CHARS = 4000


def to_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def truncate_for_model(result: Any, limit: int = MAX_RESULT_CHARS) -> str:
    """The text the model sees for ``result`` (any JSON-safe value), at most ~``limit`` chars.

    * JSON array → ``"Found N items:"`` + the first 5 + ``"+ N−5 more"``;
    * JSON object → its keys and sampled values (long values cut);
    * text → cut at a sentence boundary near ``limit`` + ``"…"``.
    """
    text = to_text(result)
    if len(text) <= limit:
        return text
    if isinstance(result, str):
        try:
            parsed = json.loads(result)
        except ValueError:
            return _cut_text(result, limit)
        if isinstance(parsed, list | dict):
            return truncate_for_model(parsed, limit)
        return _cut_text(result, limit)
    if isinstance(result, list):
        head = [_cut_text(to_text(x), limit // 6) for x in result[:5]]
        out = f"Found {len(result)} items:\n" + "\n".join(head)
        if len(result) > 5:
            out += f"\n+ {len(result) - 5} more"
        return out[: limit + 200]
    if isinstance(result, dict):
        budget = max(80, limit // max(1, min(len(result), 20)))
        lines = [f"Object with {len(result)} keys: {', '.join(list(map(str, result))[:50])}"]
        for key in list(result)[:20]:
            lines.append(f"{key}: {_cut_text(to_text(result[key]), budget)}")
        if len(result) > 20:
            lines.append(f"+ {len(result) - 20} more keys")
        return "\n".join(lines)[: limit + 200]
    return _cut_text(text, limit)


def _cut_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    window = text[:limit]
    ends = [m.end() for m in re.finditer(r"[.!?](\s|$)", window)]
    cut = ends[-1] if ends and ends[-1] > limit * 0.6 else limit
    return window[:cut].rstrip() + "…"
