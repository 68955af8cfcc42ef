"""Temporary chats (issue 55): ``POST /api/v1/threads/ {"temporary": true}`` — never listed or
searched, no title call, only its owner sees it, deleted when closed or by the reaper after
``CHAT_TEMPORARY_TTL_S``; its usage records and budget spend outlive it. Against the fake
OpenAI upstream (real wire format) and the real reaper pass."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Run, ToolCall
from agents.runs.executors import drain_embedded
from agents.runs.reaper import reaper_pass
from agents.services import run_create
from chat.models import Message, Thread
from tests.fakes.openai_server import text_chunks, usage_chunk
from usage.models import Budget, BudgetWindow, UsageRecord

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "Zanzibar-quartz-41"


def create(client, **body) -> dict:
    response = client.post("/api/v1/threads/", {"workspace": "demo", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def answer(thread_id, user, content, sink_for):
    thread = Thread.objects.get(pk=thread_id)
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=user, content=content)
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.completed"
    assert drain_embedded(10) == 0  # a title would be asked in the turn's thread, after run.completed
    return created.run


def test_a_temporary_chat_is_its_owners_alone(users, workspaces, openai_provider, api_for):
    alice = api_for(users["alice"])
    made = create(alice, temporary=True, provider="fake-openai")
    assert made["temporary"] is True
    url = f"/api/v1/threads/{made['id']}/"
    assert alice.get(url).status_code == 200
    assert alice.get(url + "export/?as=markdown").status_code == 200  # export works while it exists
    page = api_for()
    page.force_login(users["alice"])
    assert page.get(f"/chat/{made['id']}/").status_code == 200
    # Another member, the workspace's admin (who may read members' saved chats), another
    # workspace's member: a 404, the answer for an unknown id.
    for name in ("bob", "admin", "dave"):
        other = api_for(users[name])
        assert other.get(url).status_code == 404, name
        assert other.get(url + "messages/").status_code == 404, name
        assert other.get(url + "export/?as=json").status_code == 404, name
        assert other.delete(url).status_code == 404, name
        other.force_login(users[name])
        assert other.get(f"/chat/{made['id']}/").status_code == 404, name  # the page too
    # A saved chat stays readable by the admin, as before.
    saved = create(alice, provider="fake-openai")
    assert saved["temporary"] is False
    assert api_for(users["admin"]).get(f"/api/v1/threads/{saved['id']}/").status_code == 200
    assert Thread.objects.filter(pk=made["id"]).exists() is False  # starting another chat closed it


@pytest.mark.parametrize("value", ["true", "yes", 1, 0, None, [], {"on": True}])
def test_temporary_must_be_a_json_boolean(users, workspaces, openai_provider, api_for, value):
    response = api_for(users["alice"]).post("/api/v1/threads/", {"workspace": "demo", "temporary": value},
                                            format="json")
    assert response.status_code == 400, response.content
    assert "temporary" in response.content.decode()
    assert Thread.objects.count() == 0


def test_a_temporary_chat_is_not_listed_searched_or_titled(users, workspaces, openai_provider, fake_openai,
                                                             sink_for, api_for, settings):
    settings.CHAT_TITLE_GENERATION = True
    alice = api_for(users["alice"])
    saved = create(alice, provider="fake-openai", title="Saved one")
    made = create(alice, temporary=True, provider="fake-openai")
    fake_openai.script(text_chunks("An answer."))
    answer(made["id"], users["alice"], f"Tell me about {SECRET} please", sink_for)
    assert len(fake_openai.requests) == 1  # the answer only: no title request
    assert Thread.objects.get(pk=made["id"]).title == f"Tell me about {SECRET} please"  # the cut question
    for query in ("", f"?search={SECRET}", "?search=Tell", "?archived=all"):
        listed = [t["id"] for t in alice.get("/api/v1/threads/" + query).json()["results"]]
        assert made["id"] not in listed, query
    assert [t["id"] for t in alice.get("/api/v1/threads/").json()["results"]] == [saved["id"]]
    # The rail of the pages (server-rendered) leaves it out too; its own page marks it.
    client = api_for()
    client.force_login(users["alice"])
    page = client.get(f"/chat/{made['id']}/").content.decode()
    assert "Temporary chat — not saved" in page and 'data-temporary="1"' in page
    assert f'data-thread-id="{made["id"]}" data-pinned' not in page
    assert f'data-thread-id="{saved["id"]}" data-pinned' in page
    assert "Temporary chat — not saved" not in client.get(f"/chat/{saved['id']}/").content.decode()
    assert made["id"] not in client.get(f"/chat/?q={SECRET}").content.decode()


def test_the_reaper_deletes_it_after_its_ttl_and_its_usage_stays(users, workspaces, openai_provider, fake_openai,
                                                                  sink_for, api_for, settings):
    settings.CHAT_TEMPORARY_TTL_S = 600
    budget = Budget.objects.create(workspace=workspaces["demo"], metric="tokens", period="day", hard_limit=100_000)
    alice = api_for(users["alice"])
    made = create(alice, temporary=True, provider="fake-openai")
    fake_openai.script([*text_chunks("Counted."), usage_chunk(1200, 30)])
    run = answer(made["id"], users["alice"], "Count me", sink_for)
    record = UsageRecord.objects.get(thread_id=made["id"])
    assert (record.run_id, record.input_tokens, record.output_tokens) == (run.pk, 1200, 30)
    assert BudgetWindow.objects.get(budget=budget).spent == 1230

    # Within its time: a pass keeps it and is next due when it expires.
    last = Thread.objects.get(pk=made["id"]).updated_at
    due = reaper_pass()
    assert Thread.objects.filter(pk=made["id"]).exists()
    assert due <= (last + timedelta(seconds=600)).timestamp() + 1

    # Past its time: gone for its owner at once (404), and deleted by the next pass.
    Thread.objects.filter(pk=made["id"]).update(updated_at=timezone.now() - timedelta(seconds=601))
    url = f"/api/v1/threads/{made['id']}/"
    assert alice.get(url).status_code == 404
    assert alice.get(url + "export/").status_code == 404
    reaper_pass()
    assert not Thread.objects.filter(pk=made["id"]).exists()
    assert not Message.objects.filter(thread_id=made["id"]).exists()
    assert not Run.objects.filter(pk=run.pk).exists()
    assert alice.get(url).status_code == 404
    # The metering holds: the record (its run and message now gone) and the budget's spend.
    record.refresh_from_db()
    assert (str(record.thread_id), record.run_id, record.message_id, record.input_tokens, record.output_tokens,
            record.user_id) == (made["id"], None, None, 1200, 30, users["alice"].pk)
    assert BudgetWindow.objects.get(budget=budget).spent == 1230


def test_closing_deletes_it_unless_a_run_is_unfinished(users, workspaces, offline, api_for, settings):
    settings.CHAT_TEMPORARY_TTL_S = 600
    alice = api_for(users["alice"])
    left = create(alice, temporary=True, provider="offline")
    assert alice.delete(f"/api/v1/threads/{left['id']}/").status_code == 204  # the page was left
    assert not Thread.objects.filter(pk=left["id"]).exists()

    busy = create(alice, temporary=True, provider="offline")
    run = Run.objects.create(thread_id=busy["id"], user=users["alice"], status=Run.Status.AWAITING_APPROVAL)
    assert alice.delete(f"/api/v1/threads/{busy['id']}/").status_code == 204
    create(alice, provider="offline")  # starting another chat
    Thread.objects.filter(pk=busy["id"]).update(updated_at=timezone.now() - timedelta(seconds=601))
    reaper_pass()
    assert Thread.objects.filter(pk=busy["id"]).exists()  # its run waits for a person: not taken from under it
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED, finished_at=timezone.now())
    reaper_pass()
    assert not Thread.objects.filter(pk=busy["id"]).exists()
    # POST /chat/new/ (the form way to start a chat) closes them too.
    page = api_for()
    page.force_login(users["alice"])
    form_closed = create(alice, temporary=True, provider="offline")
    assert page.post("/chat/new/", {"workspace": "demo"}).status_code == 302
    assert not Thread.objects.filter(pk=form_closed["id"]).exists()
    # A saved chat is never the reaper's, however old.
    assert Thread.objects.filter(temporary=False).update(updated_at=timezone.now() - timedelta(days=400)) == 2
    reaper_pass()
    assert Thread.objects.filter(temporary=False).count() == 2


def test_a_closed_chat_whose_tool_calls_count_towards_a_limit_is_erased_not_deleted(users, workspaces, offline,
                                                                                     api_for, settings):
    """Deleting a temporary chat deleted its ledger, and per-tool limits count the ledger: a
    person could reset a tool's quota by closing temporary chats. Such a chat is erased (gone
    for everyone, its words and files removed) and deleted once the limit's month has turned."""
    from agents.models import ToolCall
    from usage.models import ToolLimit
    from usage.services import tool_limit_reason

    settings.CHAT_TEMPORARY_TTL_S = 600
    ToolLimit.objects.create(tool_name="ui_write", max_calls=1, period="month")
    alice = api_for(users["alice"])
    made = create(alice, temporary=True, provider="offline")
    thread = Thread.objects.get(pk=made["id"])
    run = Run.objects.create(thread=thread, user=users["alice"], status=Run.Status.COMPLETED,
                             finished_at=timezone.now())
    asked = Message.objects.create(thread=thread, run=run, position=1, role="user", content=SECRET)
    call = ToolCall.objects.create(run=run, message=asked, call_id="c1", tool_name="ui_write",
                                   arguments={"setting": "x"}, status=ToolCall.Status.SUCCEEDED)
    over = dict(user_id=users["alice"].pk, workspace_id=workspaces["demo"].pk, tool_name="ui_write")
    assert tool_limit_reason(**over)  # the one call the month allows is made

    assert alice.delete(f"/api/v1/threads/{made['id']}/").status_code == 204  # left
    assert alice.get(f"/api/v1/threads/{made['id']}/").status_code == 404
    assert Message.objects.get(pk=asked.pk).content == ""  # its words are gone …
    assert ToolCall.objects.filter(pk=call.pk).exists()  # … its ledger is not
    assert tool_limit_reason(**over)  # the quota was not reset by closing it
    reaper_pass()
    assert Thread.objects.filter(pk=made["id"]).exists()  # still counted this month

    # The month has turned: the call no longer counts, and the reaper deletes the chat.
    ToolCall.objects.filter(pk=call.pk).update(created_at=timezone.now() - timedelta(days=40))
    reaper_pass()
    assert not Thread.objects.filter(pk=made["id"]).exists()
    assert not tool_limit_reason(**over)


def test_the_tool_call_list_shows_a_temporary_chats_calls_to_its_owner_only(users, workspaces, offline, api_for):
    """A workspace admin lists the tool calls of members' saved chats (their arguments and
    results too), but a temporary chat is its owner's alone: it listed them before."""
    from tests.conftest import make_thread

    calls = {}
    for temporary in (False, True):
        thread = make_thread(users["alice"], workspaces["demo"], offline, temporary=temporary)
        question = Message.objects.create(thread=thread, position=1, role="user", content="q")
        answer_ = Message.objects.create(thread=thread, position=2, role="assistant", content="", parent=question)
        run = Run.objects.create(thread=thread, user=users["alice"], user_message=question, status="succeeded")
        calls[temporary] = str(ToolCall.objects.create(run=run, message=answer_, call_id="c", tool_name="search_knowledge",
                                                       arguments={"query": "private words"}, status="succeeded").pk)

    def listed(name):
        response = api_for(users[name]).get("/api/v1/tool-calls/")
        assert response.status_code == 200
        return {row["id"] for row in response.json()["results"]}

    assert listed("alice") == {calls[False], calls[True]}
    assert listed("admin") == {calls[False]}
    assert listed("bob") == set()
