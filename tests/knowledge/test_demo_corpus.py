"""The demo's promise on the real corpus (the Python Language Reference topics): questions
find the topic they name, and the offline assistant quotes it (both database backends)."""

import pytest

from agents.providers.offline import md_escape, quote
from knowledge.pydoc_import import import_python_reference
from knowledge.selectors import knowledge_search

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
