"""The offline provider: a deterministic, clearly labelled rule-based assistant.

No LLM and no network. It drives the real agent loop the way a model would: a question
becomes a ``search_knowledge`` tool call, the tool result becomes an answer that quotes the
best passages with numbered citations; "remember: …" becomes a ``save_to_knowledge`` call.
The answer streams in small deltas (``OFFLINE_DELTA_DELAY_S`` seconds apart).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

from .base import ChatMessage, ChatRequest, Finish, StreamedToolCall, StreamEvent, TextDelta, Usage

LABEL = "*Offline assistant (rule-based, no LLM)*"
REMEMBER_RE = re.compile(r"^\s*remember\s*:\s*(?P<body>.+)$", re.IGNORECASE | re.DOTALL)
QUOTE_CHARS = 700
# A document attached to the user's message, as the prompt builder writes it before the
# question (``agents.loop.prompt.document_block``): a header sentence, then the text between
# markers. This adapter knows no app, so it reads the markers, not the builder.
ATTACHED_FILE_RE = re.compile(
    r"The user attached the file [^\n]*\n<<<file (?P<name>[^\n]*)\n(?P<text>.*?)\n>>>end of file (?P=name)(?:\n\n)?",
    re.DOTALL)
FILE_QUOTE_CHARS = 300


def split_attached_files(content: str) -> tuple[str, list[tuple[str, str]]]:
    """``(question, [(file name, text), …])``: the user's own words apart from the documents
    attached to them."""
    files = [(m.group("name"), m.group("text")) for m in ATTACHED_FILE_RE.finditer(content)]
    return ATTACHED_FILE_RE.sub("", content).strip(), files


def split_deltas(text: str) -> list[str]:
    """Small streaming pieces: a word and the whitespace after it."""
    return re.findall(r"\S+\s*|\s+", text)


def quote(snippet: str, limit: int = QUOTE_CHARS) -> str:
    """The first paragraphs of ``snippet`` (heading underlines dropped) as a Markdown quote."""
    lines = [ln for ln in snippet.splitlines() if not re.fullmatch(r"\s*[*=\-~^]{3,}\s*", ln)]
    text = "\n".join(lines).strip()
    if len(text) > limit:
        # The last sentence end before the limit ("2. The…" is a list number, not an end).
        ends = [m.end() for m in re.finditer(r"(?<=[^\W\d_]|[)\]\"'”])[.!?](?=\s)", text[:limit])]
        cut = ends[-1] if ends and ends[-1] > limit // 2 else 0
        text = text[:cut] if cut else text[:limit].rstrip() + "…"
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n>\n".join("> " + md_escape(" ".join(p.split())) for p in paragraphs)


def md_escape(text: str) -> str:
    """Quoted source text is literal: ``__exit__()`` must not turn bold, ``*`` not emphasis."""
    return re.sub(r"([\\`*_\[\]<>#|~])", r"\\\1", text)


class OfflineAdapter:
    def __init__(self, *, delta_delay_s: float = 0.0) -> None:
        self.delta_delay_s = delta_delay_s

    @classmethod
    def from_provider(cls, provider, **ignored) -> OfflineAdapter:
        """No key, no client, no network: only the demo's streaming pace (a setting)."""
        from django.conf import settings

        return cls(delta_delay_s=settings.OFFLINE_DELTA_DELAY_S)

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        tool_names = {t.name for t in request.tools}
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool":
            yield from self._say(self._answer_from_tool_results(request.messages))
            return
        question = last.content.strip() if last is not None and last.role == "user" else ""
        question, files = split_attached_files(question)
        if files:  # the files are what the question is about: no search in the knowledge base
            yield from self._say(self._answer_about_files(files))
            return
        call_no = sum(1 for m in request.messages if m.role == "assistant" and m.tool_calls) + 1
        remember = REMEMBER_RE.match(question)
        if remember and "save_to_knowledge" in tool_names:
            body = remember.group("body").strip()
            title = body.splitlines()[0][:80]
            args = {"type": "note", "title": title, "content": body, "tags": ["remembered"]}
            yield StreamedToolCall(f"offline_call_{call_no}", "save_to_knowledge", json.dumps(args))
            yield Finish("tool_calls", Usage(len(question.split()), 0))
            return
        if remember:
            yield from self._say(
                f"{LABEL}\n\nI can't save to the knowledge base in this thread: model saves are "
                "off. Turn on *Allow model saves* in the thread settings, or use *Save to "
                "knowledge* on a message."
            )
            return
        if question and "search_knowledge" in tool_names:
            args = {"query": question, "top_k": 3}
            yield StreamedToolCall(f"offline_call_{call_no}", "search_knowledge", json.dumps(args))
            yield Finish("tool_calls", Usage(len(question.split()), 0))
            return
        sources = request.grounding
        if question and sources:  # no search tool here, but the run was grounded: quote that
            yield from self._say(self._answer_from_sources(sources, "From the reference material"))
            return
        yield from self._say(
            f"{LABEL}\n\nI answer from the team's knowledge base, but knowledge search is not "
            "available to you here. Ask an admin to enable the *search_knowledge* tool, or "
            "pick a provider backed by a language model."
        )

    @staticmethod
    def _answer_about_files(files: list[tuple[str, str]]) -> str:
        lines = [LABEL, "I can't summarise, but here is how your attached "
                 + ("file begins:" if len(files) == 1 else f"{len(files)} files begin:")]
        for name, text in files:
            lines.append(f"**{md_escape(name)}** ({len(text):,} characters):")
            lines.append(quote(text, FILE_QUOTE_CHARS) if text.strip() else "> (no text)")
        return "\n\n".join(lines)

    def _say(self, text: str) -> Iterator[StreamEvent]:
        pieces = split_deltas(text)
        for n, piece in enumerate(pieces):
            if n and self.delta_delay_s:
                time.sleep(self.delta_delay_s)
            yield TextDelta(piece)
        yield Finish("stop", Usage(0, len(pieces)))

    @staticmethod
    def _answer_from_sources(sources: list[dict], lead: str) -> str:
        best = sources[0]
        lines = [LABEL, f"{lead}, **{best['title']}** [{best['n']}]:", quote(best.get("snippet", ""))]
        seen = {best["title"]}
        others = []
        for source in sources[1:]:
            if source["title"] not in seen:
                seen.add(source["title"])
                others.append(f"**{source['title']}** [{source['n']}]")
        if others:
            lines.append("See also " + ", ".join(others[:3]) + ".")
        return "\n\n".join(lines)

    def _answer_from_tool_results(self, messages: list[ChatMessage]) -> str:
        results: list[ChatMessage] = []
        for msg in reversed(messages):
            if msg.role != "tool":
                break
            results.insert(0, msg)
        calls = {}
        for msg in messages:
            for call in msg.tool_calls:
                calls[call["id"]] = call["name"]
        parts = [LABEL]
        for result in results:
            name = calls.get(result.tool_call_id, "")
            parts.append(self._describe(name, result))
        return "\n\n".join(parts)

    def _describe(self, name: str, result: ChatMessage) -> str:
        try:
            data = json.loads(result.content)
        except ValueError:
            data = None
        if result.is_error or not isinstance(data, dict):
            return f"The {name or 'tool'} call did not work: {result.content[:300]}"
        if name == "save_to_knowledge":
            shared = f" — {data['shared_with']} can read it" if data.get("shared_with") else ""
            return f"Saved **{data.get('title', 'the note')}** to the knowledge base{shared}."
        hits = data.get("hits") or []
        if not hits:
            return f"I found nothing in the knowledge base about “{data.get('query', '')}”."
        best = hits[0]
        lines = [
            f"From the knowledge base, **{best['title']}** [{best['n']}]:",
            quote(best.get("snippet", "")),
        ]
        others = [f"**{h['title']}** [{h['n']}]" for h in hits[1:]]
        if others:
            lines.append("See also " + ", ".join(others) + ".")
        return "\n\n".join(lines)
