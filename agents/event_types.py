"""The streaming vocabulary, declared once (docs/design.md "Events"; DESIGN §7).

Every event a run publishes, and the websocket's ``error`` event, is declared here with its
fields. The emitter refuses an undeclared type or field (a bug, not a client error); the
websocket consumer, the SSE view, ``manage.py ask``, the replay cursor and the browser (the
chat page embeds :func:`vocabulary` as JSON) read the terminal set and the names from here,
and a test holds this table against docs/design.md and against every ``emit`` call in the code.

Every run event also carries ``type``, ``run_id`` and ``seq`` (1, 2, 3… per run, no gaps).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EventType:
    """``fields``: always present; ``optional``: present when they apply."""

    name: str
    fields: tuple[str, ...]
    optional: tuple[str, ...] = ()
    terminal: bool = False
    run_event: bool = True  # carries run_id and seq (all but ``error``)


_ALL = (
    EventType("run.started", ("thread_id", "user_message_id", "assistant_message_id")),
    EventType("text.delta", ("delta",)),
    EventType("tool.started", ("tool_call_id", "name", "arguments_summary")),
    EventType("tool.progress", ("tool_call_id", "label", "status")),
    EventType("tool.retry", ("tool_call_id", "attempt")),
    EventType("tool.completed", ("tool_call_id", "name", "status", "summary", "is_error")),
    EventType("tool.timeout", ("tool_call_id", "retryable", "status_unknown")),
    EventType("permission.denied", ("tool", "required_role", "alternatives")),
    # rule: the approval rule that fired (its name); approvers: who may approve, in plain words;
    # approver_names: usernames who may decide now; expires_at: ISO 8601 or null (never);
    # waiting_text: the card's sentence ("Production write: needs 1 approval from …").
    EventType("approval.requested", ("tool_call_id", "tool", "arguments_summary", "risk", "risk_level",
                                     "env_context", "dangerous", "countdown_s", "rule", "approvers",
                                     "approver_names", "approvals_needed", "approvals_so_far", "expires_at",
                                     "requester", "waiting_text"),
              # description: an agent's own reason for asking (agent_runs); reason: a per-tool
              # call limit sent the call to approval (usage); connect: {server, name, url} — the
              # person must connect their account to an OAuth MCP server (mcp_client.oauth)
              optional=("description", "reason", "connect")),
    # An MCP server asks the run's person something during a call (mcp_client.elicitation): the
    # card's form. fields: [{name, type (string|number|integer|boolean), title, description,
    # required, sensitive, default?, enum?, enum_names?, minimum?, maximum?, min_length?,
    # max_length?, format?}] — a sensitive field has no default here; message: the server's own
    # text (untrusted: shown as text); expires_at: ISO 8601.
    EventType("elicitation.requested", ("tool_call_id", "elicitation_id", "server", "server_name", "message",
                                        "fields", "expires_at")),
    # action: accept | decline | cancel (what the server was told); reason: answered |
    # expired | unattended (no person watches the run: API, schedule) | limit (too many
    # questions in one call) | unsupported (a schema or mode the card cannot show) |
    # cancelled (the run gave up on the call). content: the accepted values, sensitive ones as
    # "***". server_name/message: when no requested event came first (declined at once).
    EventType("elicitation.resolved", ("tool_call_id", "elicitation_id", "action", "reason"),
              optional=("server", "server_name", "message", "content")),
    # An MCP tool's result linked resources (mcp_client.resources): links: [{name, uri,
    # mime_type, url}] — url is /mcp-resources/<server id>/?uri=… (read with the person's access).
    EventType("resource.linked", ("tool_call_id", "links")),
    # One approval of two (two-person rule): the call keeps waiting for the next person.
    EventType("approval.progress", ("tool_call_id", "approvals_so_far", "approvals_needed", "approved_by",
                                    "waiting_text")),
    # decision: approve | deny | expired (nobody decided in time) | superseded | cancelled
    EventType("approval.resolved", ("tool_call_id", "decision", "decided_by")),
    EventType("knowledge.saved", ("item_id", "title")),
    EventType("knowledge.changed", ("item_ids",)),
    EventType("message.completed", ("message_id", "status")),
    # A budget's soft limit (or, without one, its hard limit) reached: once per budget window.
    EventType("budget.warning", ("budget_id", "scope", "metric", "period", "spent", "soft_limit", "hard_limit",
                                 "currency", "resets_at")),
    # truncated: null, or {code, message} when the final answer was cut off (output_limit: a
    # tool call cut by the output limit was not run), as stored on that message.
    EventType("run.completed", ("status", "truncated"), terminal=True),
    EventType("run.failed", ("status", "error", "retryable"), terminal=True),
    EventType("run.cancelled", ("status",), terminal=True),
    # Sent to one socket: a bad frame, a refused action, missing events. Extra fields by
    # code: events_missing → run_id, from_seq, to_seq; rate_limited → retry_after; a refused
    # decision → status, tool_call_id; budget_exceeded → retry_after, resets_at.
    # Sent to every socket of a person who may decide a call (their per-user group), its
    # requester and its earlier approvers: state pending | progress | closed. Clients re-read
    # GET /api/v1/approvals/ (the inbox, the rail badge).
    EventType("inbox.changed", ("tool_call_id", "state"), run_event=False),
    # To a thread's sockets: its title was written by the model after the first answer
    # (agents.titles); pages show it in the header, the rail and the tab title.
    EventType("thread.renamed", ("thread_id", "title"), run_event=False),
    # The reply to this socket's message.send: the run was created and waits for a worker
    # (run.started follows when one takes it up). user_message_id: null for a send of tool
    # results only.
    EventType("run.queued", ("run_id", "user_message_id"), run_event=False),
    EventType("error", ("code", "message"),
              optional=("run_id", "from_seq", "to_seq", "retry_after", "status", "tool_call_id", "resets_at"),
              run_event=False),
)

EVENT_TYPES: dict[str, EventType] = {e.name: e for e in _ALL}
TERMINAL_TYPES: frozenset[str] = frozenset(e.name for e in _ALL if e.terminal)


def check_event(name: str, fields) -> None:
    """Raise ValueError when ``name`` is not declared or ``fields`` (the names given besides
    ``type``/``run_id``/``seq``) do not match its declaration."""
    spec = EVENT_TYPES.get(name)
    if spec is None:
        raise ValueError(f"undeclared event type {name!r} (agents/event_types.py)")
    given = set(fields)
    missing = set(spec.fields) - given
    extra = given - set(spec.fields) - set(spec.optional)
    if missing or extra:
        raise ValueError(f"event {name!r}: missing {sorted(missing)}, undeclared {sorted(extra)}")


def vocabulary() -> dict:
    """The vocabulary as JSON-safe data for clients:
    ``{"types": {name: {"fields": [...], "optional": [...], "terminal": bool}}, "terminal": [...]}``."""
    return {
        "types": {e.name: {"fields": list(e.fields), "optional": list(e.optional), "terminal": e.terminal}
                  for e in _ALL},
        "terminal": sorted(TERMINAL_TYPES),
    }
