"""Knowledge tools offered to the model. Scope (workspace, user) comes from the run.

``search_knowledge`` applies the run's visibility (hidden items in; private items only when
the run includes them, and only the caller's own) and numbers its passages in the run's
citation sequence (``knowledge/grounding.py``), so its [n] never collides with the grounding
block's. ``save_to_knowledge`` is offered only when the thread allows model saves (the tool
pipeline) and refuses for roles that may not change the knowledge base.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

from agents.presets import preset_knowledge_scope
from agents.tools import ToolContext, ToolError, ToolOutput, tool
from chat.models import Thread, Workspace

from .grounding import run_sources_number
from .selectors import knowledge_can_create, knowledge_search
from .services import KnowledgeRejected, knowledge_item_create

SNIPPET_CHARS = 900


def _assistant_scope(ctx: ToolContext) -> dict | None:
    """The knowledge scope of the chat's assistant (``agents.presets``), None for none."""
    try:
        thread = Thread.objects.filter(pk=ctx.thread_id).only("id", "assistant_id", "workspace_id").first()
    except ValidationError:  # not a thread id (a tool called outside a chat): no assistant
        thread = None
    if thread is None or thread.assistant_id is None:
        return None
    return preset_knowledge_scope(thread=thread, user=_user(ctx.user_id))


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
            "type": {"type": "string", "description": "Only items of this type (note, fact, decision, howto, reference, …)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
def search_knowledge(*, ctx: ToolContext, query: str, top_k: int = 8, type: str | None = None) -> ToolOutput:
    """``{"query", "hits": [{"n", "item_id", "title", "type", "snippet"}], "summary"}``;
    snippets ≤ 900 chars. Citations ``[{"n", "item_id", "chunk_id", "title"}]`` go to the
    answer."""
    hits = knowledge_search(
        workspace=ctx.workspace_id, user=ctx.user_id, query=query, top_k=top_k,
        include_private=ctx.include_private, include_hidden=True, types=[type] if type else None,
        mode="question", per_item=1, scope=_assistant_scope(ctx),
    )
    numbers = run_sources_number(run_id=ctx.run_id, hits=hits)
    numbered = [
        {"n": n, "item_id": h.item_id, "title": h.title, "type": h.type, "snippet": h.snippet[:SNIPPET_CHARS]}
        for n, h in zip(numbers, hits, strict=True)
    ]
    return ToolOutput(
        result={"query": query, "hits": numbered, "summary": f"{len(hits)} passage(s) found"},
        citations=[{"n": n, "item_id": h.item_id, "chunk_id": h.chunk_id, "title": h.title}
                   for n, h in zip(numbers, hits, strict=True)],
    )


@tool(
    name="save_to_knowledge",
    description=("Save a note, fact or decision to the team's knowledge base. Saved items are shared: "
                 "every member of the workspace can read them; tell the user so."),
    risk="write",
    mutates_knowledge=True,
    # The thread's "allow model saves" switch is the user's consent; no per-call approval.
    default_approval="never",
    requires_model_save=True,
    default_roles=("member", "admin"),
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
    """Create an item owned by the run's user in the run's workspace. ToolError when the
    user's role may not change the knowledge base or the arguments are unusable."""
    user = _user(ctx.user_id)
    if not knowledge_can_create(user=user, workspace=ctx.workspace_id):
        raise ToolError("Your role in this workspace can read the knowledge base but not save to it.")
    workspace = Workspace.objects.get(pk=ctx.workspace_id)
    try:
        item = knowledge_item_create(
            workspace=workspace, owner=user, title=title, content=content, type=type, tags=tags or []
        )
    except KnowledgeRejected as exc:
        raise ToolError(f"Not saved: {exc.message} Fix the arguments and call the tool again.") from exc
    shared_with = f"every member of {workspace.name}"
    return ToolOutput(
        result={"item_id": str(item.pk), "title": item.title, "shared_with": shared_with,
                "summary": f"saved “{item.title}”, readable by {shared_with}"},
        knowledge_saved=[(str(item.pk), item.title)],
        changed_item_ids=[str(item.pk)],
    )


def _user(user_id: int):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=user_id)


EDITORS = ("member", "admin")  # viewers read the knowledge base; they are not offered changes


def _item_in_run_scope(ctx: ToolContext, item_id: str):
    """The item if the run's user may see it *in the run's workspace*; ToolError otherwise
    (an id from another workspace is "not found", never an escape from the thread's scope)."""
    from django.http import Http404

    from .selectors import knowledge_item_get_for_user

    try:
        item = knowledge_item_get_for_user(user=_user(ctx.user_id), item_id=item_id)
    except Http404 as exc:
        raise ToolError(f"No knowledge item {item_id!r} in this workspace.") from exc
    if item.workspace_id != ctx.workspace_id:
        raise ToolError(f"No knowledge item {item_id!r} in this workspace.")
    return item


ITEM_ID = {"type": "string", "description": "The item's id (from search_knowledge results)."}


def _item_by_title(*, user_id: int, workspace_id: int, args: dict) -> dict:
    """The arguments as people see them (``ToolSpec.name_arguments``): ``item_id`` becomes
    ``item`` = the item's title when the requester may see the item in the run's workspace and
    it is not private — the call is also shown to workspace admins (its thread) and to approvers
    (the inbox), who may see any item of the workspace but nobody's private ones. Otherwise
    (another workspace, not visible, private, a malformed id) the id stays as the model wrote
    it: a title is never leaked."""
    from django.http import Http404

    from .selectors import knowledge_item_get_for_user

    item_id = args.get("item_id")
    if not isinstance(item_id, str):
        return args
    try:
        item = knowledge_item_get_for_user(user=_user(user_id), item_id=item_id)
    except Http404:
        return args
    if item.workspace_id != workspace_id or item.is_private:
        return args
    return {("item" if key == "item_id" else key): (item.title if key == "item_id" else value)
            for key, value in args.items()}


def _editable_item_in_run_scope(ctx: ToolContext, item_id: str, **_changes):
    """The item if it is in the run's workspace and the run's user may change it; ToolError
    otherwise. Used as the precheck of the write tools, so a foreign or read-only item is
    refused before any approval card, and again by the tool itself when it runs."""
    from .selectors import knowledge_item_can_edit

    item = _item_in_run_scope(ctx, item_id)
    if not knowledge_item_can_edit(user=_user(ctx.user_id), item=item):
        raise ToolError(f"Knowledge item {item_id!r} can only be changed by its owner or a workspace admin.")
    return item


@tool(
    name="get_knowledge_item",
    description="Read one knowledge item in full: title, type, tags, content and link.",
    risk="read",
    name_arguments=_item_by_title,
    parameters={"type": "object", "properties": {"item_id": ITEM_ID}, "required": ["item_id"],
                "additionalProperties": False},
)
def get_knowledge_item(*, ctx: ToolContext, item_id: str) -> dict:
    """``{"item_id", "title", "type", "tags", "url", "content", "hidden", "private", "summary"}``."""
    item = _item_in_run_scope(ctx, item_id)
    return {
        "item_id": str(item.pk), "title": item.title, "type": item.type, "tags": item.tags, "url": item.url,
        "content": item.content, "hidden": item.is_hidden, "private": item.is_private,
        "summary": f"read “{item.title}” ({len(item.content)} chars)",
    }


@tool(
    name="list_knowledge_tags",
    description="List the tags used in this workspace's knowledge base, with how many items carry each.",
    risk="read",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)
def list_knowledge_tags(*, ctx: ToolContext) -> dict:
    """``{"tags": [{"tag", "items"}], "summary"}``, most used first, over the items the run's
    user may see."""
    from collections import Counter

    from .selectors import knowledge_item_list_for_user

    counts: Counter[str] = Counter()
    items = knowledge_item_list_for_user(user=_user(ctx.user_id), workspace=ctx.workspace_id, include_hidden=True)
    for tags in items.values_list("tags", flat=True):
        counts.update(tags or [])
    tags = [{"tag": t, "items": n} for t, n in counts.most_common(200)]
    return {"tags": tags, "summary": f"{len(counts)} tag(s)"}


@tool(
    name="update_knowledge_item",
    description="Change a knowledge item's title, content, type or tags. Needs the user's approval.",
    risk="write",
    mutates_knowledge=True,
    default_roles=EDITORS,
    precheck=_editable_item_in_run_scope,
    name_arguments=_item_by_title,
    parameters={
        "type": "object",
        "properties": {
            "item_id": ITEM_ID,
            "title": {"type": "string", "maxLength": 300},
            "content": {"type": "string", "minLength": 1},
            "type": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["item_id"],
        "additionalProperties": False,
    },
)
def update_knowledge_item(*, ctx: ToolContext, item_id: str, **changes) -> ToolOutput:
    """Apply the given fields under the write policy (owner or workspace admin)."""
    from .services import knowledge_item_update_for_user

    item = _item_in_run_scope(ctx, item_id)
    if not changes:
        raise ToolError("Nothing to change: give at least one of title, content, type, tags.")
    try:
        item = knowledge_item_update_for_user(user=_user(ctx.user_id), item=item, **changes)
    except KnowledgeRejected as exc:
        raise ToolError(f"Not changed: {exc.message}") from exc
    return ToolOutput(
        result={"item_id": str(item.pk), "title": item.title, "changed": sorted(changes),
                "summary": f"updated “{item.title}” ({', '.join(sorted(changes))})"},
        changed_item_ids=[str(item.pk)],
    )


@tool(
    name="delete_knowledge_item",
    description="Delete a knowledge item for good. Dangerous: needs the user's approval after a countdown.",
    risk="dangerous",
    mutates_knowledge=True,
    default_roles=EDITORS,
    precheck=_editable_item_in_run_scope,
    name_arguments=_item_by_title,
    parameters={"type": "object", "properties": {"item_id": ITEM_ID}, "required": ["item_id"],
                "additionalProperties": False},
)
def delete_knowledge_item(*, ctx: ToolContext, item_id: str) -> ToolOutput:
    """Delete under the write policy (owner or workspace admin)."""
    from .services import knowledge_item_delete_for_user

    item = _item_in_run_scope(ctx, item_id)
    title = item.title
    try:
        knowledge_item_delete_for_user(user=_user(ctx.user_id), item=item)
    except KnowledgeRejected as exc:
        raise ToolError(f"Not deleted: {exc.message}") from exc
    return ToolOutput(result={"item_id": item_id, "summary": f"deleted “{title}”"}, changed_item_ids=[item_id])
