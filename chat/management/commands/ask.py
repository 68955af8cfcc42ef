"""``manage.py ask --user alice [--thread ID] "question"``: one turn from the shell.

Runs through the same path as the UI (``run_create`` → executor → ``run_turn`` → events on
the thread's group) and prints the events as they arrive: text as it streams, other events
as one line each (``--json``: every event as a JSON line).

Exit status: 0 the run completed; 1 it failed, was cancelled or timed out; **3 it waits for
approval** — nobody watches a shell run, so it never auto-approves: the pending request
(tool, arguments, rule, who may approve, expiry, the decision URL) is printed and the
command exits; the run stays parked and its request is in the approvers' inbox
(``/chat/approvals/``) until someone decides it or it expires.
"""

from __future__ import annotations

import json
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from agents.catalogue import provider_health
from agents.event_types import TERMINAL_TYPES
from agents.selectors import provider_list
from agents.services import RunRejected, run_create
from agents.streams import run_event_stream
from chat.selectors import memberships_for_user, thread_get_for_user, workspace_get_for_user
from chat.services import thread_create
from chatplatform.loops import run_coroutine

EXIT_OK, EXIT_FAILED, EXIT_AWAITING_APPROVAL = 0, 1, 3


class Command(BaseCommand):
    help = "Ask a question as a user and print the run's events as they stream."

    def add_arguments(self, parser):
        parser.add_argument("question")
        parser.add_argument("--user", required=True)
        parser.add_argument("--thread", help="continue this thread (default: a new one)")
        parser.add_argument("--workspace", help="workspace slug for a new thread (default: the user's first)")
        parser.add_argument("--provider", help="provider slug for a new thread (default: offline)")
        parser.add_argument("--model", default="")
        parser.add_argument("--json", action="store_true", help="print every event as a JSON line")
        parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the run")

    def handle(self, *args, **opts):
        user = get_user_model().objects.filter(username=opts["user"]).first()
        if user is None:
            raise CommandError(f"no user {opts['user']!r}")
        thread = self._thread(user, opts)
        try:
            created = run_create(thread=thread, user=user, content=opts["question"])
        except RunRejected as exc:
            raise CommandError(exc.message) from exc
        run_id = str(created.run.pk)
        if not opts["json"]:
            self.stderr.write(f"thread {thread.pk} · run {run_id} · {thread.provider.slug if thread.provider else '-'}")
        status = self._follow(thread.pk, run_id, opts)
        if status:
            sys.exit(status)

    def _thread(self, user, opts):
        if opts["thread"]:
            try:
                return thread_get_for_user(user=user, thread_id=opts["thread"], write=True)
            except Http404 as exc:
                raise CommandError("no such thread for this user") from exc
        if opts["workspace"]:
            workspace = workspace_get_for_user(user=user, workspace=opts["workspace"])
        else:
            membership = memberships_for_user(user=user).first()
            if membership is None:
                raise CommandError(f"{user.username} belongs to no workspace")
            workspace = membership.workspace
        slug = opts["provider"] or "offline"
        provider = next((p for p in provider_list() if p.slug == slug), None)
        if provider is None:
            raise CommandError(f"no enabled provider {slug!r}")
        health = provider_health(provider)
        if health != "ok":
            self.stderr.write(f"warning: provider {slug}: {health}")
        return thread_create(workspace=workspace, owner=user, provider=provider, model=opts["model"])

    def _follow(self, thread_id, run_id, opts) -> int:
        """The exit status: 0 completed, 1 failed/cancelled/timed out, 3 waiting for approval.
        The run's events come through ``agents.streams.run_event_stream`` (from the log first,
        so nothing sent before this follows is missed), on the process's event loop."""
        events = run_event_stream(run_id, thread_id, stop_at_park=True, wait_s=opts["timeout"])
        try:
            return self._print_events(events, thread_id, opts)
        finally:  # leave the thread's group on the loop the stream ran on, not at garbage collection
            run_coroutine(events.aclose())

    def _print_events(self, events, thread_id, opts) -> int:
        out = self.stdout
        while True:
            try:
                event = run_coroutine(anext(events))
            except StopAsyncIteration:
                self.stderr.write("the run's events ended early; read its thread")
                return EXIT_FAILED
            kind = event["type"]
            if kind == "wait.timeout":
                self.stderr.write("timed out waiting for the run")
                return EXIT_FAILED
            if kind == "error" and event.get("code") == "events_missing":
                self.stderr.write(f"{event['message']} (thread {thread_id})")
                return EXIT_FAILED
            if opts["json"]:
                out.write(json.dumps(event))
            elif kind == "text.delta":
                out.write(event["delta"], ending="")
                out.flush()
            elif kind == "tool.started":
                out.write(f"\n[tool] {event['name']}({event['arguments_summary']})")
            elif kind == "tool.completed":
                out.write(f"[tool] {event['name']}: {event['status']} — {event['summary']}")
            elif kind == "permission.denied":
                out.write(f"[denied] {event['tool']} needs role {event['required_role'] or '?'}")
            elif kind == "knowledge.saved":
                out.write(f"[saved] {event['title']} ({event['item_id']})")
            elif kind == "run.failed":
                out.write(f"\n[failed] {event['error']['message']}")
            elif kind == "run.completed" and event.get("truncated"):
                out.write(f"\n[completed, truncated] {event['truncated']['message']}")
            elif kind in ("run.completed", "run.cancelled"):
                out.write(f"\n[{kind.split('.')[1]}]")
            elif kind == "approval.requested":
                expires = event["expires_at"] or "never"
                out.write(f"\n[approval] {event['tool']}({event['arguments_summary']}) — {event['waiting_text']}")
                out.write(f"[approval] may approve: {', '.join(event['approver_names']) or event['approvers']}; "
                          f"expires {expires}")
                out.write(f"[approval] decide: POST /api/v1/tool-calls/{event['tool_call_id']}/decision/ "
                          '{"decision": "approve"|"deny"} or the inbox at /chat/approvals/')
            if kind == "approval.requested":
                return EXIT_AWAITING_APPROVAL
            if kind in TERMINAL_TYPES:
                return EXIT_OK if kind == "run.completed" else EXIT_FAILED
