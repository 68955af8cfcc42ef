"""Full-text retrieval: ranking, visibility inside the SQL, query-syntax safety.

Marked ``db_backends``: runs on SQLite in the default suite and again on PostgreSQL.
"""

import pytest

from knowledge.selectors import knowledge_search, query_terms
from knowledge.services import knowledge_item_create, knowledge_item_update

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]


@pytest.fixture
def corpus(workspaces, users):
    demo, other = workspaces["demo"], workspaces["other"]
    make = knowledge_item_create
    return {
        "with": make(workspace=demo, owner=users["admin"], title="The with statement",
                     content="The with statement wraps the execution of a block with methods of a context manager."),
        "for": make(workspace=demo, owner=users["admin"], title="The for statement",
                    content="The for statement iterates over the elements of a sequence."),
        "hidden": make(workspace=demo, owner=users["admin"], title="Escalation runbook", is_hidden=True,
                       content="Escalate pager incidents to the on-call lead within fifteen minutes."),
        "alice_private": make(workspace=demo, owner=users["alice"], title="Alice salary notes", is_private=True,
                              content="Pager duty allowance negotiated at a fixed rate."),
        "bob_private": make(workspace=demo, owner=users["bob"], title="Bob private pager notes", is_private=True,
                            content="Pager rotation swap with carol."),
        "other_ws": make(workspace=other, owner=users["dave"], title="Other team pager policy",
                         content="Pager incidents in the other team go to dave."),
    }


def titles(hits):
    return [h.title for h in hits]


def test_question_finds_the_topic_by_its_title_phrase(corpus, workspaces):
    hits = knowledge_search(workspace=workspaces["demo"].pk, user=None, query="How does the with statement work?")
    assert hits[0].item_id == str(corpus["with"].pk)


def test_workspace_and_visibility_filters(corpus, workspaces, users):
    demo = workspaces["demo"].pk
    plain = titles(knowledge_search(workspace=demo, user=users["alice"].pk, query="pager"))
    assert plain == ["Escalation runbook"]  # hidden is AI-OK; private excluded; other workspace never
    with_private = titles(knowledge_search(workspace=demo, user=users["alice"].pk, query="pager",
                                           include_private=True))
    assert sorted(with_private) == ["Alice salary notes", "Escalation runbook"]  # never Bob's


@pytest.mark.parametrize("query", ['"', "*", "NEAR(a b)", "-pager", "title:pager", "a AND OR NOT", "(", "'; DROP TABLE x; --"])
def test_query_syntax_characters_never_raise(corpus, workspaces, query):
    knowledge_search(workspace=workspaces["demo"].pk, user=None, query=query)


@pytest.mark.parametrize("query", ["", "   ", "?!", "___"])
def test_queries_without_words_return_nothing(corpus, workspaces, query):
    assert knowledge_search(workspace=workspaces["demo"].pk, user=None, query=query) == []


def test_edit_rechunks_and_reindexes(corpus, workspaces):
    knowledge_item_update(item=corpus["for"], content="Loops over an iterable; the else clause runs after.")
    demo = workspaces["demo"].pk
    stale = knowledge_search(workspace=demo, user=None, query="sequence elements")
    assert str(corpus["for"].pk) not in [h.item_id for h in stale]
    assert knowledge_search(workspace=demo, user=None, query="iterable")[0].item_id == str(corpus["for"].pk)


def test_query_terms_are_words_only():
    assert query_terms('How "does" the with-statement work? NEAR*') == ["how", "does", "the", "with", "statement", "work", "near"]
