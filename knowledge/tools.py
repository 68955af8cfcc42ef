"""Knowledge tools offered to the model. Scope (workspace, user) comes from the run."""

from __future__ import annotations

from agents.tools import ToolContext, ToolOutput, tool
from chat.models import Workspace

from .selectors import knowledge_search
from .services import knowledge_item_create

SNIPPET_CHARS = 900


@tool(
    name="search_knowledge",
    description=(
        "Search the team's knowledge base. Returns the best matching passages with numbers "
        "[n] to cite. Use it before answering questions about the team's material."
    ),
    risk="read",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in plain words."},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many passages (default 8)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
def search_knowledge(*, ctx: ToolContext, query: str, top_k: int = 8) -> ToolOutput:
    hits = knowledge_search(
        workspace_id=ctx.workspace_id, user_id=ctx.user_id, query=query, top_k=top_k,
        include_private=ctx.include_private, per_item=1,
    )
    numbered = [
        {"n": n, "item_id": h.item_id, "title": h.title, "snippet": h.snippet[:SNIPPET_CHARS]}
        for n, h in enumerate(hits, start=1)
    ]
    return ToolOutput(
        result={"query": query, "hits": numbered, "summary": f"{len(hits)} passage(s) found"},
        citations=[{"n": h["n"], "item_id": h["item_id"], "chunk_id": hit.chunk_id, "title": h["title"]}
                   for h, hit in zip(numbered, hits, strict=True)],
    )


@tool(
    name="save_to_knowledge",
    description="Save a note, fact or decision to the team's knowledge base.",
    risk="write",
    mutates_knowledge=True,
    # The thread's "allow model saves" switch is the user's consent; no per-call approval.
    default_approval="never",
    requires_model_save=True,
    parameters={
        "type": "object",
        "properties": {
            "type": {"type": "string", "description": "note, fact, decision, howto, …"},
            "title": {"type": "string", "maxLength": 300},
            "content": {"type": "string", "minLength": 1},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["title", "content"],
        "additionalProperties": False,
    },
)
def save_to_knowledge(*, ctx: ToolContext, title: str, content: str, type: str = "note", tags: list | None = None) -> ToolOutput:
    workspace = Workspace.objects.get(pk=ctx.workspace_id)
    item = knowledge_item_create(
        workspace=workspace, owner=_user(ctx.user_id), title=title, content=content, type=type, tags=tags or []
    )
    return ToolOutput(
        result={"item_id": str(item.pk), "title": item.title, "summary": f"saved “{item.title}”"},
        knowledge_saved=[(str(item.pk), item.title)],
        changed_item_ids=[str(item.pk)],
    )


def _user(user_id: int):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=user_id)
