"""A chat as a file: Markdown (the selected branch, for reading) and JSON (everything).

Both are plain functions of a thread the caller may read (``thread_get_for_user``).
"""

from __future__ import annotations

import re

from django.utils import timezone

from .models import Message, Thread
from .selectors import (
    attachments_for_messages,
    message_branch_for_thread,
    message_list_for_thread,
    message_versions_for_thread,
)

EXPORT_VERSION = 1
_CITE = re.compile(r"\[(\d{1,3})\]")


def cited_sources(citations: list[dict], text: str) -> tuple[list[tuple[str, list]], int]:
    """What an answer shows under it: ``([(title, [n, …]) for each cited item, in order of
    first citation number], number of other retrieved items)`` — a citation counts when its
    ``[n]`` appears in ``text``; an item cited through any of its passages is listed once with
    all its cited numbers, and is not counted as "more retrieved". The chat page draws the
    same (templates/static/chat/app/citations.js)."""
    numbers = set(_CITE.findall(text or ""))
    cited: dict = {}
    for c in citations or []:
        if str(c.get("n")) in numbers:
            cited.setdefault(c.get("item_id"), (c.get("title") or "untitled", []))[1].append(c.get("n"))
    others = {c.get("item_id") for c in citations or []} - set(cited)
    return list(cited.values()), len(others)


def thread_export_json(*, thread: Thread, viewer=None) -> dict:
    """``{"format": "chatplatform.thread", "version": 1, "exported_at", "thread": {…},
    "leaf_id", "messages": [every message in append order, with parent_id, versions,
    tool_calls (with outcome), citations]}`` — the REST shapes of threads and messages.
    ``viewer``: who exports (the thread's folder and tags are its owner's only)."""
    from .api.serializers import MessageSerializer, ThreadSerializer, ledger_by_call

    messages = list(message_list_for_thread(thread=thread).select_related("run"))
    context = {"ledger": ledger_by_call(messages), "versions": message_versions_for_thread(thread_id=thread.pk),
               "attachments": attachments_for_messages(m.pk for m in messages)}
    data = MessageSerializer(messages, many=True, context=context).data
    for item in data:
        item.pop("content_html", None)  # the source text is what an export keeps
    return {
        "format": "chatplatform.thread",
        "version": EXPORT_VERSION,
        "exported_at": timezone.now().isoformat(),
        "thread": ThreadSerializer(thread, context={"viewer": viewer} if viewer is not None else {}).data,
        "leaf_id": str(thread.leaf_id) if thread.leaf_id else None,
        "messages": data,
    }


def thread_export_markdown(*, thread: Thread) -> str:
    """The selected branch as Markdown: a title, then each question and answer with its
    time, tool calls as a list, the answer's sources, and a note on other versions."""
    from .api.serializers import MessageSerializer, ledger_by_call

    branch = message_branch_for_thread(thread_id=thread.pk, leaf_id=thread.leaf_id)
    versions = message_versions_for_thread(thread_id=thread.pk)
    rows = MessageSerializer(branch, many=True, context={"ledger": ledger_by_call(branch), "versions": versions,
                                                         "attachments": attachments_for_messages(m.pk for m in branch)}).data
    out = [f"# {thread.title or 'Chat'}", ""]
    meta = [f"Workspace: {thread.workspace.name}"]
    if thread.provider_id:
        meta.append(f"Model: {thread.provider.slug}/{thread.model}" if thread.model else f"Provider: {thread.provider.slug}")
    meta.append(f"Exported: {timezone.now():%Y-%m-%d %H:%M} UTC")
    out += [" · ".join(meta), ""]
    for row in rows:
        if row["role"] == Message.Role.USER:
            stamp = row["created_at"][:16].replace("T", " ")
            head = f"## You · {stamp}"
            if row["versions"]["count"] > 1:
                head += f" (version {row['versions']['index']} of {row['versions']['count']})"
            out += [head, ""]
            if row["content"]:
                out += [row["content"], ""]
            if row["attachments"]:
                # Links relative to the server (the export is read beside it); names as given.
                out += ["Attached:", ""]
                out += [f"- {_attachment_line(a)}" for a in row["attachments"]]
                out.append("")
        elif row["role"] == Message.Role.ASSISTANT:
            if not row["content"] and not row["tool_calls"]:
                continue
            head = "### Assistant"
            if row["versions"]["count"] > 1:
                head += f" (version {row['versions']['index']} of {row['versions']['count']})"
            out += [head, ""]
            for call in row["tool_calls"]:
                line = f"- tool `{call['name']}`"
                if call.get("arguments_summary"):
                    line += f" ({call['arguments_summary']})"
                line += f": {call.get('status') or 'unknown'}"
                if call.get("decided_by"):
                    line += f", {call.get('decision') or 'decided'} by {call['decided_by']}"
                out.append(line)
            if row["tool_calls"]:
                out.append("")
            if row["content"]:
                out += [row["content"], ""]
            if row["status"] not in ("complete", "streaming"):
                out += [f"*({row['status']}{': ' + row['error'].get('message', '') if row['error'] else ''})*", ""]
            cited, more = cited_sources(row["citations"], row["content"])
            if cited:
                out += ["Sources:", ""]
                out += [f"- {''.join(f'[{n}]' for n in ns)} {title}" for title, ns in cited]
                out.append("")
            if more:
                out += [f"*{more} more retrieved, not cited*", ""]
    return "\n".join(out).rstrip() + "\n"


def _attachment_line(a: dict) -> str:
    name = a["filename"].replace("[", "\\[").replace("]", "\\]")
    size = a["size"]
    shown = f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{max(1, size // 1024)} KB"
    what = f"image, {a['width']}×{a['height']}" if a["kind"] == "image" else a["content_type"]
    return f"[{name}]({a['url']}) ({what}, {shown})"
