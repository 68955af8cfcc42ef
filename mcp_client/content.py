"""MCP results → model-facing text. Text stays text; images and audio become a short
description (never their bytes); embedded resources give their text (binary ones: a
description); resource links name their URI."""

from __future__ import annotations

import base64
import binascii

import mcp_types as types


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def resource_text(contents: types.TextResourceContents | types.BlobResourceContents) -> str:
    mime = contents.mime_type or "unknown type"
    if isinstance(contents, types.TextResourceContents):
        return contents.text
    return f"[binary resource {contents.uri} ({mime}, {_size(contents.blob)} bytes) — not shown]"


def block_text(block) -> str:
    """One content block as text."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[image ({block.mime_type}, {_size(block.data)} bytes) — not shown]"
    if isinstance(block, types.AudioContent):
        return f"[audio ({block.mime_type}, {_size(block.data)} bytes) — not shown]"
    if isinstance(block, types.EmbeddedResource):
        return resource_text(block.resource)
    if isinstance(block, types.ResourceLink):
        label = f" ({block.name})" if block.name else ""
        return f"[resource link: {block.uri}{label}]"
    return f"[{getattr(block, 'type', type(block).__name__)} content — not shown]"


def result_text(result: types.CallToolResult) -> str:
    """All content blocks of a tool result, joined by blank lines. With no content blocks,
    the structured content (JSON) if any."""
    parts = [block_text(b) for b in result.content or []]
    if not parts and result.structured_content is not None:
        import json

        return json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return "\n\n".join(p for p in parts if p)
