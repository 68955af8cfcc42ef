"""Tools that ask the user something mid-call (``ctx.elicit``, form mode) and link resources —
shared by the HTTP test server's ``ask`` flavour and the stdio test server.

* ``book_table`` — asks name, party size (1–12), seating (enum), a newsletter tick box; returns
  what it got (``booked for <name>, <size> people, <seating>``), ``declined`` or ``cancelled``;
* ``sign_in`` — asks an API token (a sensitive field); records and returns only its length;
* ``pester`` — asks again and again until declined (at most 10 times);
* ``linker`` — returns a ``resource_link`` to ``notes://today``, ``files://dot.png`` and
  ``files://report.bin`` and an
  embedded ``page://inline``; the server also offers ``notes://private`` (never linked).

``record(tool, **facts)`` says what reached the server (tests read it back).
"""

from __future__ import annotations

import base64
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

READ = ToolAnnotations(read_only_hint=True)
DOT_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


class Booking(BaseModel):
    name: str = Field(title="Your name", description="As on the reservation")
    size: int = Field(title="Party size", ge=1, le=12, default=2)
    seating: Literal["inside", "terrace"] = Field(title="Seating", default="inside")
    newsletter: bool = Field(title="Send me the newsletter", default=False)


class Token(BaseModel):
    api_token: str = Field(title="API token", description="From your account settings")


class Again(BaseModel):
    answer: str = Field(title="Answer")


def add_asking_tools(server: MCPServer, record) -> None:
    @server.tool(annotations=READ, description="Book a table; asks the user for the details.")
    async def book_table(ctx: Context) -> str:
        result = await ctx.elicit("<b>Booking</b> at Chez Test: who is coming?", schema=Booking)
        if result.action == "accept":
            data = result.data
            record("book_table", action="accept", name=data.name, size=data.size, seating=data.seating,
                   newsletter=data.newsletter)
            return f"booked for {data.name}, {data.size} people, {data.seating}"
        record("book_table", action=result.action)
        return result.action + "d" if result.action == "decline" else "cancelled"

    @server.tool(annotations=READ, description="Sign in to the test service; asks the user for a token.")
    async def sign_in(ctx: Context) -> str:
        result = await ctx.elicit("Paste your API token", schema=Token)
        if result.action == "accept":
            record("sign_in", action="accept", token_length=len(result.data.api_token))
            return f"signed in (token of {len(result.data.api_token)} characters)"
        record("sign_in", action=result.action)
        return result.action

    @server.tool(annotations=READ, description="Asks again and again.")
    async def pester(ctx: Context) -> str:
        for asked in range(1, 11):
            result = await ctx.elicit(f"Question {asked}: are we there yet?", schema=Again)
            record("pester", action=result.action, asked=asked)
            if result.action != "accept":
                return f"stopped after {asked} questions ({result.action})"
        return "asked 10 times"

    @server.tool(annotations=READ, description="Link today's notes.")
    def linker() -> list:
        record("linker")
        return [
            TextContent(type="text", text="Here are your links."),
            ResourceLink(type="resource_link", uri="notes://today", name="today", title="Today's notes",
                         mime_type="text/plain"),
            ResourceLink(type="resource_link", uri="files://dot.png", name="dot.png", mime_type="image/png"),
            ResourceLink(type="resource_link", uri="files://report.bin", name="report.bin",
                         mime_type="application/octet-stream"),
            EmbeddedResource(type="resource", resource=TextResourceContents(
                uri="page://inline", mime_type="text/html", text="<script>alert(1)</script>inline page")),
        ]

    @server.resource("notes://today", name="today", mime_type="text/plain")
    def today() -> str:
        return "<script>alert('x')</script> Buy milk."

    @server.resource("notes://private", name="private", mime_type="text/plain")
    def private() -> str:
        return "private notes nobody linked"

    @server.resource("files://dot.png", name="dot.png", mime_type="image/png")
    def dot() -> bytes:
        return DOT_PNG

    @server.resource("files://report.bin", name="report.bin", mime_type="application/octet-stream")
    def report() -> bytes:
        return b"\x00\x01 binary report"

    @server.resource("page://inline", name="inline", mime_type="text/html")
    def inline() -> str:
        return "<script>alert(1)</script>inline page"
