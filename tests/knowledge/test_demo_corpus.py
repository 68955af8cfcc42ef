"""The demo's promise on the real corpus (the Python Language Reference topics): questions
find the topic they name, and the offline assistant quotes it (both database backends)."""

import pytest

from knowledge.pydoc_import import import_python_reference
from knowledge.selectors import knowledge_search
from llm.offline import md_escape, quote

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]


@pytest.fixture
def reference(workspaces, users):
    import_python_reference(workspace=workspaces["demo"], owner=users["admin"])
    return workspaces["demo"]


@pytest.mark.parametrize(("question", "title"), [
    ("How does the with statement work?", "The with statement"),
    ("what is a lambda", "Lambdas"),
    ("what does yield do in a generator", "The yield statement"),
    ("How does the try statement handle exceptions?", "The try statement"),
    ("what is the global statement", "The global statement"),
])
def test_questions_find_the_topic_they_name(reference, question, title):
    hits = knowledge_search(workspace=reference, query=question, top_k=3, per_item=1)
    assert hits[0].title == title, [h.title for h in hits]


def test_the_best_passage_is_the_topics_introduction(reference):
    hit = knowledge_search(workspace=reference, query="How does the with statement work?", top_k=1, per_item=1)[0]
    assert hit.snippet.startswith('The "with" statement')


def test_quotes_are_literal_markdown():
    assert md_escape("__exit__() *args") == r"\_\_exit\_\_() \*args"
    text = quote("1. The context expression is evaluated.\n\n2. The manager's __enter__() is loaded. " + "x" * 800)
    assert text.startswith("> 1. The context expression is evaluated.")
    assert not text.rstrip().endswith("2.")


@pytest.mark.django_db(transaction=True)
def test_offline_quotes_the_grounding_block_when_search_is_disabled(users, workspaces, offline, converse):
    from agents.models import ToolPolicy
    from agents.pipeline import tool_policies_sync
    from tests.conftest import joined_text, make_thread, types

    import_python_reference(workspace=workspaces["demo"], owner=users["admin"])
    tool_policies_sync()
    ToolPolicy.objects.filter(tool_name="search_knowledge").update(enabled=False)
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    run, events = converse(thread, users["alice"], "How does the with statement work?")
    assert "tool.started" not in types(events)
    text = joined_text(events)
    assert "From the reference material, **The with statement** [1]" in text
    assert 'The "with" statement is used to wrap the execution of a block' in text
    from chat.models import Message

    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert final.citations[0]["title"] == "The with statement" and final.citations[0]["n"] == 1
