"""The lease heartbeat saves what each turn has streamed so far (agents/runs/lease.py,
``RunLease.persist_stream``; chat.services.messages_save_streamed): one UPDATE for all the
process's streaming messages per beat, only text that changed, never over a message already
closed, never for a run another worker owns, and a text the database refuses costs no run its
renewal; the renewal (agents.runs.lifecycle.run_leases_renew) saves each run's seq without ever
lowering it. Both are ``executemany`` batches (chatplatform.db.update_rows). Marked
``db_backends``: SQLite here, PostgreSQL in the services pass."""

from __future__ import annotations

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from agents.models import Run
from agents.runs import lifecycle
from agents.runs.lease import RunLease, _alias, _Heartbeat
from agents.services import run_create
from chat.models import Message
from chat.services import message_create, messages_save_streamed
from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


@pytest.fixture
def claimed(users, workspaces, offline, settings):
    """Two runs claimed by this worker, each with a streaming assistant message."""
    settings.RUN_EXECUTOR = "none"
    out = []
    for i in range(2):
        thread = make_thread(users["alice"], workspaces["demo"], offline)
        run = run_create(thread=thread, user=users["alice"], content=f"question {i}").run
        owner = f"test-worker:{i}"
        assert lifecycle.run_claim(run_id=run.pk, owner=owner)
        message = message_create(thread_id=thread.pk, run=run, role=Message.Role.ASSISTANT,
                                 status=Message.Status.STREAMING)
        out.append((RunLease(run_id=run.pk, owner=owner), message))
    return out


def message_updates(queries) -> list[int]:
    """The UPDATEs of chat_message a beat sent, as the number of rows each one carried (an
    ``executemany`` is logged once, as "<rows> times: <sql>")."""
    out = []
    for query in queries:
        rows, _, sql = query["sql"].partition(" times: ") if " times: " in query["sql"] else ("1", "", query["sql"])
        if sql.startswith("UPDATE") and "chat_message" in sql:
            out.append(int(rows))
    return out


def test_one_beat_saves_every_streamed_text_in_one_statement(claimed):
    (lease_a, message_a), (lease_b, message_b) = claimed
    text_a, text_b = ["Hello", ", wor"], ["Bonjour"]
    lease_a.persist_stream(message_a.pk, lambda: {"content": "".join(text_a)})
    lease_b.persist_stream(message_b.pk, lambda: {"content": "".join(text_b), "reasoning": "thinking"})
    with CaptureQueriesContext(connections[_alias()]) as queries:
        _Heartbeat._beat([lease_a, lease_b])
    assert message_updates(queries) == [2]  # one statement, both messages
    message_a.refresh_from_db()
    message_b.refresh_from_db()
    assert (message_a.content, message_a.reasoning) == ("Hello, wor", "")
    assert (message_b.content, message_b.reasoning) == ("Bonjour", "thinking")

    text_a.append("ld")  # only a's text changed: the next beat writes it alone
    with CaptureQueriesContext(connections[_alias()]) as queries:
        _Heartbeat._beat([lease_a, lease_b])
    assert message_updates(queries) == [1]
    assert Message.objects.get(pk=message_a.pk).content == "Hello, world"

    with CaptureQueriesContext(connections[_alias()]) as queries:  # nothing changed: no message write
        _Heartbeat._beat([lease_a, lease_b])
    assert message_updates(queries) == []
    assert Run.objects.filter(pk__in=[lease_a.run_id, lease_b.run_id], lease_owner__startswith="test-worker").count() == 2


def test_a_closed_message_keeps_its_own_text(claimed):
    (lease, message), _ = claimed
    lease.persist_stream(message.pk, lambda: {"content": "half an ans"})
    # The turn closed the message (its own final save) before this beat's write landed.
    Message.objects.filter(pk=message.pk).update(content="half an answer, whole.", status=Message.Status.COMPLETE)
    _Heartbeat._beat([lease])
    message.refresh_from_db()
    assert (message.content, message.status) == ("half an answer, whole.", Message.Status.COMPLETE)


def test_a_run_another_worker_took_over_gets_no_text_from_this_one(claimed):
    (lease, message), (other_lease, other_message) = claimed
    lease.persist_stream(message.pk, lambda: {"content": "stale words"})
    other_lease.persist_stream(other_message.pk, lambda: {"content": "fresh words"})
    Run.objects.filter(pk=lease.run_id).update(lease_owner="usurper:1:1")
    _Heartbeat._beat([lease, other_lease])
    assert Message.objects.get(pk=message.pk).content == ""
    assert lease.lost  # the renewal found another owner
    assert Message.objects.get(pk=other_message.pk).content == "fresh words"
    assert not other_lease.lost


def test_a_stopped_stream_is_not_saved_again(claimed):
    (lease, message), _ = claimed
    lease.persist_stream(message.pk, lambda: {"content": "so far"})
    lease.persist_stream()  # the turn takes over the message's save
    _Heartbeat._beat([lease])
    assert Message.objects.get(pk=message.pk).content == ""


def test_a_text_the_database_refuses_costs_no_run_its_renewal(claimed, caplog):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite stores NUL characters; PostgreSQL refuses them in text")
    (lease, message), (other_lease, other_message) = claimed
    lease.persist_stream(message.pk, lambda: {"content": "a\x00b"})
    other_lease.persist_stream(other_message.pk, lambda: {"content": "fine"})
    before = Run.objects.get(pk=lease.run_id).lease_expires_at
    _Heartbeat._beat([lease, other_lease])
    assert Run.objects.get(pk=lease.run_id).lease_expires_at > before  # renewed all the same
    assert not lease.lost and not other_lease.lost
    assert "streamed text of 2 messages not saved" in caplog.text
    # The one statement failed as a whole; the next beat tries again (the text is unsaved).
    assert lease._saved is None and other_lease._saved is None


def test_messages_save_streamed_writes_only_streaming_messages(claimed):
    (_, streaming), (_, closed) = claimed
    Message.objects.filter(pk=closed.pk).update(status=Message.Status.CANCELLED, content="kept")
    written = messages_save_streamed(texts={streaming.pk: {"content": "new"}, closed.pk: {"content": "late"}},
                                     using=_alias())
    assert written == 1
    assert Message.objects.get(pk=streaming.pk).content == "new"
    assert Message.objects.get(pk=closed.pk).content == "kept"
    assert messages_save_streamed(texts={}) == 0


def test_renewals_save_each_runs_seq_and_never_lower_it(claimed):
    (lease_a, _), (lease_b, _) = claimed
    Run.objects.filter(pk=lease_b.run_id).update(last_event_seq=9)
    before = Run.objects.get(pk=lease_a.run_id).lease_expires_at
    renewed = lifecycle.run_leases_renew(
        leases=[(lease_a.run_id, lease_a.owner, 7), (lease_b.run_id, lease_b.owner, 4)], using=_alias())
    assert renewed == {str(lease_a.run_id), str(lease_b.run_id)}
    assert Run.objects.get(pk=lease_a.run_id).lease_expires_at > before
    assert Run.objects.get(pk=lease_a.run_id).last_event_seq == 7
    assert Run.objects.get(pk=lease_b.run_id).last_event_seq == 9  # 4 is behind what the row holds

    # A seq behind the saved one, and a renewal without a seq: both keep 7.
    assert lifecycle.run_leases_renew(leases=[(lease_a.run_id, lease_a.owner, 3)], using=_alias())
    assert lifecycle.run_leases_renew(leases=[(lease_a.run_id, lease_a.owner, None)], using=_alias())
    assert Run.objects.get(pk=lease_a.run_id).last_event_seq == 7


def test_a_renewal_skips_a_run_under_another_owner_and_renews_the_rest(claimed):
    (lease_a, _), (lease_b, _) = claimed
    Run.objects.filter(pk=lease_a.run_id).update(lease_owner="usurper:1:1", last_event_seq=2)
    renewed = lifecycle.run_leases_renew(
        leases=[(lease_a.run_id, lease_a.owner, 5), (lease_b.run_id, lease_b.owner, 5)], using=_alias())
    assert renewed == {str(lease_b.run_id)}
    assert Run.objects.get(pk=lease_a.run_id).last_event_seq == 2  # the usurper's run is not touched
    assert Run.objects.get(pk=lease_b.run_id).last_event_seq == 5
