"""The OpenAI-compatible API's request handling without HTTP (``openai_api/services.py``)."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agents.models import LLMModel, Provider, Run
from chat.models import Message, Thread
from openai_api.models import ApiRun, ApiThread
from openai_api.services import (
    ApiRejected,
    completion_outcome,
    completion_start,
    conversation_remember,
    digest,
    model_list,
    model_resolve,
    normalise_messages,
)
from tests.conftest import make_thread


@pytest.fixture
def no_executor(settings):
    settings.RUN_EXECUTOR = "none"


@pytest.mark.django_db
def test_model_names(offline, openai_provider):
    LLMModel.objects.create(provider=openai_provider, name="fake-large")
    LLMModel.objects.create(provider=openai_provider, name="retired", enabled=False)
    assert model_resolve(name="fake-openai") == (openai_provider, "fake-model")
    assert model_resolve(name="fake-openai/other") == (openai_provider, "other")
    assert model_resolve(name="fake-large") == (openai_provider, "fake-large")
    assert model_resolve(name="fake-model") == (openai_provider, "fake-model")  # its default model, no row
    assert model_resolve(name="rule-based") == (offline, "rule-based")
    assert model_resolve(name="offline") == (offline, "rule-based")
    for bad, code in (("fake-openai/retired", "model_not_found"), ("nope", "model_not_found"), ("", "invalid_request_error")):
        with pytest.raises(ApiRejected) as exc:
            model_resolve(name=bad)
        assert exc.value.code == code


@pytest.mark.django_db
def test_default_is_the_first_provider_that_is_set_up_and_allowed(offline, openai_provider, users, roles, monkeypatch,
                                                                  settings):
    settings.COMPAT_API_DEFAULT_MODEL = ""
    monkeypatch.delenv("TEST_MISSING_ANTHROPIC_KEY", raising=False)
    # First by name, but its key is missing: a run on it could only fail (the demo's case).
    Provider.objects.create(slug="anthropic", name="Anthropic", kind="anthropic", default_model="claude-x",
                            api_key_env="TEST_MISSING_ANTHROPIC_KEY")
    assert model_resolve(name="default") == (openai_provider, "fake-model")
    # Fake OpenAI's default model is for admins only: a member's default is the next one.
    row = LLMModel.objects.create(provider=openai_provider, name="fake-model")
    row.allowed_roles.set([roles["admin"]])
    assert model_resolve(name="default", user=users["admin"]) == (openai_provider, "fake-model")
    assert model_resolve(name="default", user=users["alice"]) == (offline, "rule-based")
    # Nothing set up and allowed: a precise 404, not a run that fails later.
    Provider.objects.filter(slug="offline").update(enabled=False)
    with pytest.raises(ApiRejected) as exc:
        model_resolve(name="default", user=users["alice"])
    assert exc.value.code == "model_not_found" and "set up for you" in str(exc.value)
    settings.COMPAT_API_DEFAULT_MODEL = "anthropic"  # named by the operator: taken as named, once set up
    with pytest.raises(ApiRejected) as exc:
        model_resolve(name="default")
    assert exc.value.code == "model_not_found" and "not set up" in str(exc.value)
    monkeypatch.setenv("TEST_MISSING_ANTHROPIC_KEY", "sk-test")
    assert model_resolve(name="default") == (Provider.objects.get(slug="anthropic"), "claude-x")


@pytest.mark.django_db
def test_default_costs_no_more_queries_than_naming_the_provider(offline, openai_provider, users, settings):
    """"default" is resolved once: the provider it picks is not looked up and checked again."""
    settings.COMPAT_API_DEFAULT_MODEL = ""
    Provider.objects.filter(slug="offline").update(name="A offline")

    def queries(name):
        with CaptureQueriesContext(connection) as captured:
            resolved = model_resolve(name=name, user=users["alice"])
        return resolved, len(captured)

    queries("default"), queries("fake-openai")  # the per-process configuration cache is filled
    by_default, default_queries = queries("default")
    by_name, named_queries = queries("fake-openai")
    # A real model before Offline, although Offline comes first by name.
    assert by_default == by_name == (openai_provider, "fake-model")
    # "default" also reads who the caller is and what they and their workspace chose (their
    # memberships, preferences, the workspace row, their roles there): four reads, no more.
    assert default_queries <= named_queries + 4


@pytest.mark.django_db
def test_v1_models_leaves_out_providers_whose_key_is_missing(offline, openai_provider, users, monkeypatch):
    monkeypatch.delenv("TEST_MISSING_ANTHROPIC_KEY", raising=False)
    keyless = Provider.objects.create(slug="anthropic", name="Anthropic", kind="anthropic", default_model="claude-x",
                                      api_key_env="TEST_MISSING_ANTHROPIC_KEY")
    LLMModel.objects.create(provider=keyless, name="claude-y")
    ids = [m["id"] for m in model_list(user=users["alice"])]
    assert "offline" in ids and not any(i.startswith("anthropic") for i in ids)
    monkeypatch.setenv("TEST_MISSING_ANTHROPIC_KEY", "sk-test")  # set up now: listed
    ids = [m["id"] for m in model_list(user=users["alice"])]
    assert "anthropic" in ids and "anthropic/claude-y" in ids


@pytest.mark.django_db(transaction=True)
def test_a_model_whose_provider_has_no_key_is_refused_before_anything_is_written(users, offline, no_executor,
                                                                                  monkeypatch):
    """A run on it could only fail ``not_configured``: the client gets the 404 ``/v1/models``
    implies (it is not listed there), and no thread or run is left behind."""
    monkeypatch.delenv("TEST_MISSING_ANTHROPIC_KEY", raising=False)
    Provider.objects.create(slug="anthropic", name="Anthropic", kind="anthropic", default_model="claude-x",
                            api_key_env="TEST_MISSING_ANTHROPIC_KEY")
    before = (Thread.objects.count(), Run.objects.count(), Message.objects.count())
    for name in ("anthropic", "anthropic/claude-x"):
        with pytest.raises(ApiRejected) as exc:
            completion_start(user=users["alice"], body={"model": name, "messages": [{"role": "user", "content": "Hi"}]})
        assert (exc.value.code, exc.value.status) == ("model_not_found", 404)
        assert "not set up" in str(exc.value) and "TEST_MISSING_ANTHROPIC_KEY" not in str(exc.value)
    assert (Thread.objects.count(), Run.objects.count(), Message.objects.count()) == before
    monkeypatch.setenv("TEST_MISSING_ANTHROPIC_KEY", "sk-test")  # the administrator adds the key
    started = completion_start(user=users["alice"], body={"model": "anthropic/claude-x",
                                                          "messages": [{"role": "user", "content": "Hi"}]})
    assert Run.objects.get(pk=started.run_id).model == "claude-x"


@pytest.mark.django_db
def test_an_unknown_model_name_is_echoed_cut_short(offline):
    with pytest.raises(ApiRejected) as exc:
        model_resolve(name="no-such-model-" + "x" * 10_000)
    message = str(exc.value)
    assert exc.value.code == "model_not_found" and "'no-such-model-" in message and "x…'" in message
    assert len(message) < 300


def test_messages_are_normalised_and_bad_shapes_refused():
    assert normalise_messages([
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]) == [
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f", "arguments": '{"x": 1}'}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
    ]
    for bad, message in (([], "non-empty"), ([{"role": "robot", "content": "x"}], "role must be"),
                         ([{"role": "tool", "content": "x"}], "tool_call_id"),
                         ([{"role": "user", "content": [{"type": "input_audio"}]}], "only text and image_url"),
                         ([{"role": "user", "content": [{"type": "image_url", "image_url": {
                             "url": "https://example.com/cat.png"}}]}], "does not fetch image URLs"),
                         ([{"role": "user", "content": [{"type": "image_url", "image_url": {
                             "url": "data:image/png;base64,PGh0bWw+"}}]}], "not a PNG, JPEG, WebP or GIF"),
                         ([{"role": "assistant", "content": [{"type": "image_url", "image_url": {
                             "url": "data:image/png;base64,AAAA"}}]}], "user messages only")):
        with pytest.raises(ApiRejected, match=message):
            normalise_messages(bad)


def test_the_digest_ignores_surrounding_whitespace_but_not_content():
    a = [{"role": "user", "content": "hi "}, {"role": "assistant", "content": "\nhello"}]
    b = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    c = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}]
    assert digest(a) == digest(b) != digest(c)


@pytest.mark.django_db(transaction=True)
def test_a_new_conversation_imports_the_history_and_tools_ride_on_the_run(users, offline, no_executor):
    started = completion_start(user=users["alice"], body={"model": "offline", "tools": [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}], "messages": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "What is 2+2?"}]})
    thread = Thread.objects.get(pk=started.thread_id)
    assert ApiThread.objects.filter(thread=thread).exists() and thread.title == "Hi"
    rows = [(m.role, m.content) for m in Message.objects.filter(thread=thread).order_by("position")]
    # The client's system message leads the new user message: stored system messages never
    # reach the model (the platform builds its own system prompt).
    assert rows == [("user", "Hi"), ("assistant", "Hello!"),
                    ("user", "Instructions from the API client:\nAnswer in French.\n\n---\n\nWhat is 2+2?")]
    assert ApiRun.objects.get(run_id=started.run_id).tools[0]["name"] == "lookup"
    # The same history plus the answer, as the client resends it, finds the thread again.
    conversation_remember(thread_id=started.thread_id, messages=started.messages,
                          answer={"role": "assistant", "content": "4", "tool_calls": []})
    Run.objects.filter(pk=started.run_id).update(status=Run.Status.COMPLETED)
    again = completion_start(user=users["alice"], body={"model": "offline", "messages": [
        *started.messages, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]})
    assert again.thread_id == started.thread_id
    # bob resending alice's conversation does not get her thread
    Run.objects.filter(pk=again.run_id).update(status=Run.Status.COMPLETED)
    conversation_remember(thread_id=started.thread_id, messages=started.messages,
                          answer={"role": "assistant", "content": "4", "tool_calls": []})
    bobs = completion_start(user=users["bob"], body={"model": "offline", "messages": [
        *started.messages, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]})
    assert bobs.thread_id != started.thread_id


@pytest.mark.django_db
def test_the_answer_leaves_out_a_lost_attempts_half_answer(users, offline, no_executor):
    """A worker died mid-answer and the round was asked again: the response is the rounds'
    texts without the half answer (which stays in the thread, ``truncated``)."""
    from chat.services import message_create

    started = completion_start(user=users["alice"], body={"model": "offline", "messages": [
        {"role": "user", "content": "Look it up"}]})
    run = Run.objects.get(pk=started.run_id)
    for status, content, calls in (("complete", "Let me look.", [{"id": "c1", "name": "lookup", "arguments": "{}"}]),
                                   ("truncated", "The answer is fo", []),  # the lost worker's
                                   ("complete", "The answer is four.", [])):
        message_create(thread_id=run.thread_id, run=run, role="assistant", status=status, content=content,
                       tool_calls=calls)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED)
    outcome = completion_outcome(run_id=started.run_id, client_tool_names=set())
    assert (outcome.text, outcome.finish_reason) == ("Let me look.\n\nThe answer is four.", "stop")
    assert Message.objects.filter(run=run, status="truncated").count() == 1


@pytest.mark.django_db
def test_threads_named_by_the_client_must_be_its_own(users, offline, no_executor):
    alices = make_thread(users["alice"], users["alice"].memberships.first().workspace, offline)
    body = {"model": "offline", "messages": [{"role": "user", "content": "hi"}]}
    with transaction.atomic():
        assert completion_start(user=users["alice"], body=body, thread_header=str(alices.pk)).thread_id == str(alices.pk)
    for kwargs in ({"thread_header": str(alices.pk)}, {"thread_header": "not-a-uuid"}):
        with pytest.raises(ApiRejected) as exc:
            completion_start(user=users["bob"], body=body, **kwargs)
        assert exc.value.status == 404


@pytest.mark.django_db
def test_tool_results_must_answer_the_last_assistant_calls(users, offline, no_executor):
    thread = make_thread(users["alice"], users["alice"].memberships.first().workspace, offline)
    body = {"model": "offline", "metadata": {"thread_id": str(thread.pk)}, "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c9", "content": "r"}]}
    with pytest.raises(ApiRejected, match="unknown calls: c9"):
        completion_start(user=users["alice"], body=body)


@pytest.mark.django_db(transaction=True)
def test_a_new_thread_goes_to_the_first_workspace_whose_role_may_use_the_model(users, workspaces, roles, offline,
                                                                              no_executor):
    from chat.models import Membership

    # carol: a viewer in demo (her first workspace), an admin in other; the model is for admins only.
    Membership.objects.create(user=users["carol"], workspace=workspaces["other"], role=roles["admin"])
    LLMModel.objects.create(provider=offline, name="rule-based").allowed_roles.set([roles["admin"]])
    body = {"model": "offline", "messages": [{"role": "user", "content": "hi"}]}
    started = completion_start(user=users["carol"], body=body)
    assert Thread.objects.get(pk=started.thread_id).workspace == workspaces["other"]
    # A workspace named by the client is taken as named: there the model is refused as before.
    with pytest.raises(ApiRejected) as exc:
        completion_start(user=users["carol"], body={**body, "messages": [{"role": "user", "content": "again"}]},
                         workspace_header="demo")
    assert (exc.value.code, exc.value.status) == ("model_not_allowed", 403)
    # bob (member of demo only) may not use it anywhere: 404 before any thread is made.
    threads = Thread.objects.count()
    with pytest.raises(ApiRejected) as exc:
        completion_start(user=users["bob"], body=body)
    assert (exc.value.code, exc.value.status) == ("model_not_found", 404)
    assert Thread.objects.count() == threads


@pytest.mark.django_db
def test_v1_models_lists_default_first_owned_by_the_model_it_runs(offline, openai_provider, users, django_user_model):
    """A client that offers only listed ids (model pickers of OpenAI-compatible apps) can
    follow the platform's default: ``default`` comes first, owned by the provider
    ``model="default"`` runs; a caller for whom it names nothing does not see it."""
    entries = model_list(user=users["alice"])
    provider, _ = model_resolve(name="default", user=users["alice"])
    assert entries[0]["id"] == "default" and entries[0]["owned_by"] == provider.slug
    assert [e["id"] for e in entries].count("default") == 1
    loner = django_user_model.objects.create_user("loner", password="x")  # no workspace: no default
    assert "default" not in {e["id"] for e in model_list(user=loner)}
