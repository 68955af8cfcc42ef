"""Message branches: edit and regenerate keep every version, the provider receives the
selected branch only, and the REST API exposes the structure (parent_id, versions)."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from agents.models import Run, ToolPolicy
from chat.models import Message, Thread
from tests.conftest import make_thread
from tests.fakes.openai_server import Failure, text_chunks, tool_call_chunks
from tests.policy.tooltest import call, scoped_toolbox

pytestmark = pytest.mark.django_db(transaction=True)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def alice_thread(users, workspaces, openai_provider):
    return make_thread(users["alice"], workspaces["demo"], openai_provider, title="Branches")


def sent_texts(request: dict) -> list[tuple[str, str]]:
    """(role, content) of the user/assistant messages a provider request carried."""
    return [(m["role"], m.get("content") or "") for m in request["messages"] if m["role"] in ("user", "assistant")]


def ask(fake, sink_for, thread, user, content, answer):
    fake.script(text_chunks(answer))
    sink = sink_for(thread.pk)
    from agents.services import run_create

    created = run_create(thread=thread, user=user, content=content)
    events = sink.until_terminal(created.run.pk)
    assert events[-1]["type"] == "run.completed", events[-1]
    return created


def via_api(fake, sink_for, thread, user, url, body, answer):
    """POST ``url``; expect 202 and wait for the run it started to complete."""
    fake.script(text_chunks(answer))
    sink = sink_for(thread.pk)
    response = api(user).post(url, body, format="json")
    assert response.status_code == 202, response.content
    events = sink.until_terminal(response.json()["run_id"])
    assert events[-1]["type"] == "run.completed", events[-1]
    return response.json()


def branch(user, thread) -> list[dict]:
    response = api(user).get(f"/api/v1/threads/{thread.pk}/messages/")
    assert response.status_code == 200
    return response.json()


def test_edit_keeps_the_original_and_the_provider_sees_only_the_edited_branch(users, alice_thread, fake_openai, sink_for):
    alice = users["alice"]
    ask(fake_openai, sink_for, alice_thread, alice, "First question", "First answer")
    second = ask(fake_openai, sink_for, alice_thread, alice, "Second question", "Second answer")
    created = via_api(fake_openai, sink_for, alice_thread, alice, f"/api/v1/messages/{second.user_message.pk}/edit/",
                      {"content": "Second question, edited"}, "Edited answer")

    assert sent_texts(fake_openai.requests[-1]) == [
        ("user", "First question"), ("assistant", "First answer"), ("user", "Second question, edited"),
    ]
    shown = branch(alice, alice_thread)
    assert [(m["role"], m["content"]) for m in shown] == [
        ("user", "First question"), ("assistant", "First answer"),
        ("user", "Second question, edited"), ("assistant", "Edited answer"),
    ]
    edited = shown[2]
    assert edited["id"] == created["user_message_id"]
    assert edited["parent_id"] == shown[1]["id"]
    assert edited["versions"]["count"] == 2 and edited["versions"]["index"] == 2
    assert edited["versions"]["ids"][0] == str(second.user_message.pk)
    # Nothing was destroyed: the original question and its answer are still stored.
    assert Message.objects.filter(thread=alice_thread, content="Second answer").exists()
    assert Message.objects.filter(thread=alice_thread, role="user").count() == 3


def test_selecting_a_version_shows_its_branch_and_the_next_turn_continues_it(users, alice_thread, fake_openai, sink_for):
    alice = users["alice"]
    ask(fake_openai, sink_for, alice_thread, alice, "Question", "Answer one")
    first_q = Message.objects.get(thread=alice_thread, role="user")
    via_api(fake_openai, sink_for, alice_thread, alice, f"/api/v1/messages/{first_q.pk}/edit/",
            {"content": "Question, take two"}, "Answer two")
    assert [m["content"] for m in branch(alice, alice_thread)] == ["Question, take two", "Answer two"]

    response = api(alice).post(f"/api/v1/threads/{alice_thread.pk}/branch/", {"message_id": str(first_q.pk)}, format="json")
    assert response.status_code == 200
    shown = branch(alice, alice_thread)
    assert [m["content"] for m in shown] == ["Question", "Answer one"]
    assert response.json()["leaf_id"] == shown[-1]["id"]
    assert shown[0]["versions"] == {"index": 1, "count": 2, "ids": [str(first_q.pk), shown[0]["versions"]["ids"][1]]}

    ask(fake_openai, sink_for, alice_thread, alice, "Follow-up", "Follow-up answer")
    assert sent_texts(fake_openai.requests[-1]) == [("user", "Question"), ("assistant", "Answer one"), ("user", "Follow-up")]
    assert [m["content"] for m in branch(alice, alice_thread)] == ["Question", "Answer one", "Follow-up", "Follow-up answer"]
    # ?all=true lists every version in append order.
    every = api(alice).get(f"/api/v1/threads/{alice_thread.pk}/messages/?all=true").json()
    assert [m["content"] for m in every] == ["Question", "Answer one", "Question, take two", "Answer two",
                                             "Follow-up", "Follow-up answer"]


def test_regenerate_reruns_the_same_turn_without_a_new_question(users, alice_thread, fake_openai, sink_for):
    alice = users["alice"]
    ask(fake_openai, sink_for, alice_thread, alice, "Tell me a fact", "Fact one")
    answer = Message.objects.get(thread=alice_thread, role="assistant")
    created = via_api(fake_openai, sink_for, alice_thread, alice, f"/api/v1/messages/{answer.pk}/regenerate/", {}, "Fact two")

    question = Message.objects.get(thread=alice_thread, role="user")  # still exactly one question
    assert created["user_message_id"] == str(question.pk)
    assert Run.objects.get(pk=created["run_id"]).user_message_id == question.pk
    assert sent_texts(fake_openai.requests[-1]) == [("user", "Tell me a fact")]
    shown = branch(alice, alice_thread)
    assert [m["content"] for m in shown] == ["Tell me a fact", "Fact two"]
    assert shown[1]["versions"]["count"] == 2 and shown[1]["versions"]["ids"][0] == str(answer.pk)
    assert shown[1]["parent_id"] == str(question.pk)


def test_retry_after_a_provider_failure_answers_the_same_question(users, alice_thread, fake_openai, sink_for):
    from agents.services import run_create

    alice = users["alice"]
    fake_openai.script(Failure(status=401, message="invalid key"))
    sink = sink_for(alice_thread.pk)
    created = run_create(thread=alice_thread, user=alice, content="Are you there?")
    events = sink.until_terminal(created.run.pk)
    assert events[-1]["type"] == "run.failed"
    failed = Message.objects.get(thread=alice_thread, role="assistant")
    assert failed.status == "error"
    via_api(fake_openai, sink_for, alice_thread, alice, f"/api/v1/messages/{failed.pk}/regenerate/", {}, "Yes, here.")
    assert list(Message.objects.filter(thread=alice_thread, role="user").values_list("content", flat=True)) == [
        "Are you there?"]
    assert [m["content"] for m in branch(alice, alice_thread)] == ["Are you there?", "Yes, here."]
    assert sent_texts(fake_openai.requests[-1]) == [("user", "Are you there?")]


def test_branch_actions_are_refused_while_a_reply_is_open(users, alice_thread, fake_openai, sink_for):
    alice = users["alice"]
    created = ask(fake_openai, sink_for, alice_thread, alice, "Q", "A")
    Run.objects.create(thread=alice_thread, user=alice, status=Run.Status.RUNNING, provider=alice_thread.provider)
    client = api(alice)
    for url, body in [(f"/api/v1/messages/{created.user_message.pk}/edit/", {"content": "Q2"}),
                      (f"/api/v1/messages/{created.user_message.pk}/regenerate/", {}),
                      (f"/api/v1/threads/{alice_thread.pk}/branch/", {"message_id": str(created.user_message.pk)})]:
        response = client.post(url, body, format="json")
        assert response.status_code == 409, url
        assert response.json()["error"]["code"] == "run_in_progress"
    assert Message.objects.filter(thread=alice_thread).count() == 2  # nothing was added


def test_bad_edits_lose_nothing_and_say_why(users, alice_thread, fake_openai, sink_for):
    alice = users["alice"]
    created = ask(fake_openai, sink_for, alice_thread, alice, "Q", "A")
    answer = Message.objects.get(thread=alice_thread, role="assistant")
    client = api(alice)
    before = list(Message.objects.filter(thread=alice_thread).values_list("pk", flat=True))
    leaf = Thread.objects.get(pk=alice_thread.pk).leaf_id
    empty = client.post(f"/api/v1/messages/{created.user_message.pk}/edit/", {"content": "  "}, format="json")
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "empty_message"
    long = client.post(f"/api/v1/messages/{created.user_message.pk}/edit/", {"content": "x" * 32_001}, format="json")
    assert long.status_code == 413 and long.json()["error"]["code"] == "message_too_long"
    not_mine = client.post(f"/api/v1/messages/{answer.pk}/edit/", {"content": "hi"}, format="json")
    assert not_mine.status_code == 400 and not_mine.json()["error"]["code"] == "not_a_question"
    assert list(Message.objects.filter(thread=alice_thread).values_list("pk", flat=True)) == before
    assert Thread.objects.get(pk=alice_thread.pk).leaf_id == leaf


def test_other_users_cannot_branch_or_see_versions(users, alice_thread, fake_openai, sink_for):
    created = ask(fake_openai, sink_for, alice_thread, users["alice"], "Q", "A")
    mid = created.user_message.pk
    for user in (users["bob"], users["dave"]):
        client = api(user)
        assert client.post(f"/api/v1/messages/{mid}/edit/", {"content": "x"}, format="json").status_code == 404
        assert client.post(f"/api/v1/messages/{mid}/regenerate/", {}, format="json").status_code == 404
        assert client.post(f"/api/v1/threads/{alice_thread.pk}/branch/", {"message_id": str(mid)},
                           format="json").status_code == 404
        assert client.get(f"/api/v1/threads/{alice_thread.pk}/export/").status_code == 404
    # A workspace admin may read the thread but not change which branch its owner sees.
    admin = api(users["admin"])
    assert admin.get(f"/api/v1/threads/{alice_thread.pk}/messages/").status_code == 200
    assert admin.post(f"/api/v1/threads/{alice_thread.pk}/branch/", {"message_id": str(mid)},
                      format="json").status_code == 404
    # A message id of another thread is not selectable in this one.
    other = make_thread(users["alice"], alice_thread.workspace, alice_thread.provider)
    response = api(users["alice"]).post(f"/api/v1/threads/{other.pk}/branch/", {"message_id": str(mid)}, format="json")
    assert response.status_code == 404


@pytest.fixture
def box(roles):
    toolbox, scope = scoped_toolbox()
    with scope:
        ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="always")
        yield toolbox


def test_duplicate_keeps_tool_call_outcomes_arguments_and_branches(box, users, alice_thread, fake_openai, sink_for):
    alice = users["alice"]
    fake_openai.script(tool_call_chunks([call("c1", "kb_lookup", {"query": "vpn setup"})]), text_chunks("Found it."))
    sink = sink_for(alice_thread.pk)
    from agents.services import run_create

    created = run_create(thread=alice_thread, user=alice, content="How do I set up the VPN?")
    assert sink.until_terminal(created.run.pk)[-1]["type"] == "run.completed"
    answer = Message.objects.filter(thread=alice_thread, role="assistant", content="Found it.").get()
    via_api(fake_openai, sink_for, alice_thread, alice, f"/api/v1/messages/{answer.pk}/regenerate/", {}, "Second try.")

    copy_id = api(alice).post(f"/api/v1/threads/{alice_thread.pk}/duplicate/").json()["id"]
    original, copied = branch(alice, alice_thread), branch(alice, Thread.objects.get(pk=copy_id))
    assert [m["content"] for m in copied] == [m["content"] for m in original]
    tool_row = next(m for m in api(alice).get(f"/api/v1/threads/{copy_id}/messages/?all=true").json() if m["tool_calls"])
    [copied_call] = tool_row["tool_calls"]
    assert copied_call["status"] == "succeeded"
    assert copied_call["name"] == "kb_lookup"
    assert "vpn setup" in copied_call["arguments_summary"]
    assert json.loads(copied_call["arguments"]) == {"query": "vpn setup"}
    # The versions are copied too: the regenerated answer is version 2 of 2 in the copy.
    assert copied[-1]["versions"]["count"] == 2 and copied[-1]["versions"]["index"] == 2


def test_deleting_a_message_by_hand_does_not_cut_the_branch(users, alice_thread, fake_openai, sink_for):
    alice = users["alice"]
    ask(fake_openai, sink_for, alice_thread, alice, "One", "Answer one")
    ask(fake_openai, sink_for, alice_thread, alice, "Two", "Answer two")
    Message.objects.filter(thread=alice_thread, content="Answer one").delete()
    assert [m["content"] for m in branch(alice, alice_thread)] == ["One", "Two", "Answer two"]
    ask(fake_openai, sink_for, alice_thread, alice, "Three", "Answer three")
    assert sent_texts(fake_openai.requests[-1]) == [("user", "One"), ("user", "Two"), ("assistant", "Answer two"),
                                                    ("user", "Three")]
