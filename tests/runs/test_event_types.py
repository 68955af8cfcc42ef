"""The event vocabulary is declared once (agents/event_types.py): every emit site uses it,
docs/design.md lists exactly it, the emitter refuses anything else, and the chat page gives
it to the browser."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from agents.event_types import EVENT_TYPES, TERMINAL_TYPES, check_event
from agents.events import RunEmitter

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
# text.delta: sent by the emitter's coalescing (RunEmitter.text), not by emit(); inbox.changed:
# a per-user notice, not a run event (agents.approvals.requests.inbox_notify checks it);
# run.queued: the reply to a socket's message.send (chat.ws_actions.message_send checks it).
IMPLICIT = {"text.delta", "inbox.changed", "run.queued", "thread.renamed"}  # thread.renamed: agents/titles.py


def design_table() -> dict[str, tuple[set[str], set[str]]]:
    text = DESIGN.read_text()
    block = text[text.index("<!-- events-table"):text.index("<!-- /events-table -->")]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            split = lambda cell: {f.strip() for f in cell.split(",") if f.strip()}  # noqa: E731
            rows[cells[0].strip("`")] = (split(cells[1]), split(cells[2]))
    return rows


def test_docs_design_lists_exactly_the_declared_events():
    table = design_table()
    assert set(table) == set(EVENT_TYPES)
    for name, spec in EVENT_TYPES.items():
        assert table[name] == (set(spec.fields), set(spec.optional)), name


def emit_sites() -> list[tuple[str, str, set[str], bool]]:
    """``(where, type, keyword names, has **kwargs)`` for every ``….emit("type", …)`` and
    ``send_error(code, message, …)`` call in the application code."""
    sites = []
    for app in ("agents", "chat", "knowledge", "chatplatform", "usage", "mcp_client"):
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                names = {k.arg for k in node.keywords if k.arg}
                if app == "mcp_client":  # a tool's ctx.emit: the loop stamps the call's tool_call_id
                    names.add("tool_call_id")
                starred = any(k.arg is None for k in node.keywords)
                if node.func.attr == "emit" and node.args and isinstance(node.args[0], ast.Constant):
                    sites.append((where, node.args[0].value, names, starred))
                elif node.func.attr == "send_error" and len(node.args) >= 2:
                    sites.append((where, "error", names | {"code", "message"}, starred))
    return sites


def test_every_emit_site_uses_a_declared_type_with_its_declared_fields():
    sites = emit_sites()
    assert len(sites) >= 25  # the scan finds the emit calls (it would pass vacuously otherwise)
    emitted = set()
    for where, name, fields, starred in sites:
        assert name in EVENT_TYPES, f"{where}: undeclared event {name!r}"
        spec = EVENT_TYPES[name]
        assert fields <= set(spec.fields) | set(spec.optional), f"{where}: {name} fields {sorted(fields)}"
        if not starred:
            assert set(spec.fields) <= fields, f"{where}: {name} lacks {sorted(set(spec.fields) - fields)}"
        emitted.add(name)
    # Every declared event can actually be produced by the code.
    assert set(EVENT_TYPES) - emitted <= IMPLICIT


def test_the_emitter_refuses_undeclared_types_and_fields(db):
    emitter = RunEmitter(run_id="r", thread_id="t")
    with pytest.raises(ValueError, match="undeclared event type"):
        emitter.emit("tool.exploded", tool_call_id="x")
    with pytest.raises(ValueError, match="missing"):
        emitter.emit("message.completed", message_id="m")
    with pytest.raises(ValueError, match="undeclared"):
        emitter.emit("run.completed", status="completed", bonus=1)
    assert emitter.seq == 0  # nothing was sent
    check_event("error", {"code": "x", "message": "y", "retry_after": 1})


def test_the_terminal_set_is_the_three_run_endings():
    assert TERMINAL_TYPES == {"run.completed", "run.failed", "run.cancelled"}


def test_the_chat_page_embeds_the_vocabulary(client, users, workspaces, offline):
    from tests.conftest import make_thread

    thread = make_thread(users["alice"], workspaces["demo"], offline)
    client.force_login(users["alice"])
    html = client.get(reverse("chat:thread", kwargs={"thread_id": thread.pk})).content.decode()
    match = re.search(r'<script id="event-vocabulary" type="application/json">(.*?)</script>', html, re.S)
    assert match, "the vocabulary is not on the page"
    vocab = json.loads(match.group(1))
    assert set(vocab["types"]) == set(EVENT_TYPES)
    assert set(vocab["terminal"]) == TERMINAL_TYPES
