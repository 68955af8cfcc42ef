"""Hybrid (keyword + vector) retrieval against the real database and the real local model.

Marked ``db_backends``: runs on SQLite with sqlite-vec here and again on PostgreSQL with
pgvector in the services pass. The real all-MiniLM-L6-v2 (the packaged weights, offline) is
loaded once per test process; the corpus is small (a dozen chunks, embedded per test by the
real job). The other embedding backend — an OpenAI-compatible endpoint — is the fake server
of ``tests/fakes/embeddings_server.py`` on loopback, through the real ``openai`` SDK.
"""

from __future__ import annotations

import logging
import socket
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from knowledge.embedding_jobs import (
    embedding_model_for,
    embedding_status,
    query_model_for,
    workspace_embed,
)
from knowledge.embeddings import EmbeddingSpec, current_spec, embed_texts
from knowledge.models import ChunkSentenceVectors, ChunkVector, KnowledgeChunk, WorkspaceEmbedding
from knowledge.search import Filters, run_search
from knowledge.selectors import knowledge_search, knowledge_search_for_user, vector_rows
from knowledge.services import (
    knowledge_item_create,
    knowledge_item_delete_for_user,
    knowledge_item_update,
)
from knowledge.vectors import vectors_store
from tests.fakes.embeddings_server import FakeEmbeddings

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]

LOCAL = {"KNOWLEDGE_EMBEDDINGS": "local", "KNOWLEDGE_EMBEDDING_MODEL": "all-MiniLM-L6-v2"}


@pytest.fixture(scope="session")
def minilm():
    """The real local model, loaded once per test process."""
    with override_settings(**LOCAL):
        spec = current_spec()
        embed_texts(spec, ["warm up"])
    return spec


@pytest.fixture
def local(minilm):
    with override_settings(**LOCAL):
        yield minilm


TOPICS = {
    "break": ("The break statement", "break may only occur syntactically nested in a for or while loop. It terminates "
              "the nearest enclosing loop, skipping the optional else clause if the loop has one."),
    "with": ("The with statement", "The with statement is used to wrap the execution of a block with methods "
             "defined by a context manager."),
    "yield": ("The yield statement", "A yield statement is semantically equivalent to a yield expression. Generator "
              "functions produce a series of values lazily, suspending execution after each one."),
    "import": ("The import statement", "Modules are found and loaded by the import system; the names are bound in "
               "the local namespace."),
    "lambda": ("Lambdas", "Lambda expressions are used to create anonymous functions: lambda parameters: expression."),
    "strings": ("String methods", "str.split returns a list of the words in the string, using sep as the delimiter; "
                "str.strip removes leading and trailing characters."),
}
NATURAL = "How can I exit a loop early before it has gone through every item?"


@pytest.fixture
def corpus(workspaces, users):
    demo = workspaces["demo"]
    items = {key: knowledge_item_create(workspace=demo, owner=users["admin"], title=title, content=content)
             for key, (title, content) in TOPICS.items()}
    items["bob_private"] = knowledge_item_create(
        workspace=demo, owner=users["bob"], title="Bob's notes on leaving loops", is_private=True,
        content="How to exit a loop early before it has gone through every item: my private trick.")
    items["hidden"] = knowledge_item_create(
        workspace=demo, owner=users["admin"], title="Stopping iteration early (runbook)", is_hidden=True,
        content="To get out of a loop before it finishes, leave it at once.")
    items["other_ws"] = knowledge_item_create(
        workspace=workspaces["other"], owner=users["dave"], title="Exiting loops early",
        content="How can I exit a loop early before it has gone through every item? Other team's answer.")
    return items


def test_a_natural_question_finds_its_section_by_meaning_where_keywords_alone_miss(local, corpus, workspaces, users):
    demo = workspaces["demo"]
    assert workspace_embed(workspace_id=demo.pk) == "done"
    filters = Filters(workspace_id=demo.pk, user_id=users["alice"].pk, include_private=False, include_hidden=False)
    assert run_search(mode="websearch", query=NATURAL, filters=filters, limit=10) == []  # the former search box
    # Grounding and the model's tool (question mode): the break section among the first two.
    hits = knowledge_search(workspace=demo, user=users["alice"], query=NATURAL, top_k=5, mode="question", per_item=2)
    assert str(corpus["break"].pk) in [h.item_id for h in hits[:2]]
    # The search API / knowledge pages / MCP: never empty, the break section first of the visible.
    api_hits = knowledge_search_for_user(user=users["alice"], query=NATURAL, workspace=demo, top_k=5)
    assert api_hits and api_hits[0].item_id == str(corpus["break"].pk)
    vector_only = vector_rows(query="make a function produce values one at a time", filters=filters, fetch=3)
    assert str(vector_only[0][1]).replace("-", "") == corpus["yield"].pk.hex


def test_the_callers_visibility_is_applied_before_ranking(local, corpus, workspaces, users):
    demo = workspaces["demo"]
    workspace_embed(workspace_id=demo.pk)
    found = {h.item_id for h in knowledge_search(workspace=demo, user=users["alice"], query=NATURAL, top_k=50,
                                                 include_private=True, include_hidden=True)}
    assert str(corpus["bob_private"].pk) not in found  # another member's private item: never
    assert str(corpus["other_ws"].pk) not in found  # another workspace: never
    assert str(corpus["hidden"].pk) in found  # hidden: the AI's view uses it
    listed = {h.item_id for h in knowledge_search_for_user(user=users["alice"], query=NATURAL, workspace=demo, top_k=50)}
    assert str(corpus["hidden"].pk) not in listed  # the search box leaves hidden items out
    own = {h.item_id for h in knowledge_search_for_user(user=users["bob"], query=NATURAL, workspace=demo, top_k=50)}
    assert str(corpus["bob_private"].pk) in own


def test_the_search_api_answers_natural_questions_and_keeps_websearch_syntax(local, corpus, workspaces, api_for, users):
    workspace_embed(workspace_id=workspaces["demo"].pk)
    api = api_for(users["alice"])
    response = api.get("/api/v1/knowledge/search/", {"q": NATURAL, "workspace": workspaces["demo"].pk})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert results and results[0]["item_id"] == str(corpus["break"].pk)
    # Words that all occur in a section: that section first.
    response = api.get("/api/v1/knowledge/search/", {"q": "context manager", "workspace": workspaces["demo"].pk})
    assert response.json()["results"][0]["item_id"] == str(corpus["with"].pk)
    # A phrase asked for: only what holds it.
    response = api.get("/api/v1/knowledge/search/", {"q": '"context manager"', "workspace": workspaces["demo"].pk})
    assert [r["item_id"] for r in response.json()["results"]] == [str(corpus["with"].pk)]
    # Syntax is honoured: a negated word removes what it names.
    response = api.get("/api/v1/knowledge/search/", {"q": "statement -context", "workspace": workspaces["demo"].pk})
    titles = [r["title"] for r in response.json()["results"]]
    assert titles and "The with statement" not in titles


@pytest.mark.parametrize("query", ["", "   ", "x" * 10_000, "如何提前退出循环", "كيف أخرج من الحلقة مبكرا", "ループを早く抜ける"])
def test_odd_queries_never_raise(local, corpus, workspaces, users, query):
    workspace_embed(workspace_id=workspaces["demo"].pk)
    hits = knowledge_search_for_user(user=users["alice"], query=query, workspace=workspaces["demo"], top_k=5)
    assert hits == [] if not query.strip() else isinstance(hits, list)


def test_edits_and_deletes_keep_vectors_in_step(local, corpus, workspaces, users):
    demo = workspaces["demo"]
    workspace_embed(workspace_id=demo.pk)
    item = corpus["lambda"]
    knowledge_item_update(item=item, content="Anonymous functions are written inline with the lambda keyword. " * 3)
    assert workspace_embed(workspace_id=demo.pk) == "done"
    chunk_ids = set(KnowledgeChunk.objects.filter(item=item).values_list("pk", flat=True))
    assert chunk_ids and chunk_ids <= set(ChunkVector.objects.values_list("chunk_id", flat=True))
    knowledge_item_delete_for_user(user=users["admin"], item=item)
    assert not ChunkVector.objects.filter(chunk_id__in=chunk_ids).exists()
    status = embedding_status(workspace_id=demo.pk)
    assert status["state"] == "idle" and status["embedded"] == status["total"] == KnowledgeChunk.objects.filter(
        workspace=demo).count()


def test_a_vector_for_a_chunk_deleted_mid_batch_is_skipped(local, corpus, workspaces):
    model = embedding_model_for(current_spec())
    chunk = KnowledgeChunk.objects.filter(item=corpus["with"]).first()
    gone = chunk.pk
    corpus["with"].delete()
    assert vectors_store(model_id=model.pk, rows=[(gone, [0.1] * 384)]) == 0  # skipped, no error
    assert not ChunkVector.objects.filter(chunk_id=gone).exists()


# --- the OpenAI-compatible endpoint: model changes, failures, long inputs -----------------------------
def _endpoint(url: str, model: str = "fake-embed"):
    return override_settings(KNOWLEDGE_EMBEDDINGS="openai", KNOWLEDGE_EMBEDDING_MODEL=model,
                             KNOWLEDGE_EMBEDDING_BASE_URL=url, KNOWLEDGE_EMBEDDING_API_KEY="sk-test",
                             KNOWLEDGE_EMBEDDING_BATCH=3, KNOWLEDGE_EMBEDDING_RETRY_S=0.0)


def test_a_model_change_re_embeds_while_the_old_vectors_serve(local, corpus, workspaces, users):
    demo = workspaces["demo"]
    assert workspace_embed(workspace_id=demo.pk) == "done"
    old = WorkspaceEmbedding.objects.get(workspace=demo).serving_model
    seen = []

    with FakeEmbeddings(dimensions=24) as fake, _endpoint(fake.base_url):
        def during(_stored):
            # Mid-job: searches still embed the question with the old model and use its vectors.
            serving = query_model_for(demo.pk)
            seen.append((serving.model_id, serving.spec.key))
            hits = knowledge_search_for_user(user=users["alice"], query=NATURAL, workspace=demo, top_k=3)
            assert hits[0].item_id == str(corpus["break"].pk)

        assert workspace_embed(workspace_id=demo.pk, on_batch=during) == "done"
        assert seen and all(s == (old.pk, "local:all-MiniLM-L6-v2") for s in seen)
        state = WorkspaceEmbedding.objects.get(workspace=demo)
        assert state.serving_model.key == f"openai:fake-embed@{fake.base_url}"
        assert state.serving_model.dimensions == 24
        # The old model's vectors are gone once the new ones serve.
        assert not ChunkVector.objects.filter(model=old).exists()
        assert query_model_for(demo.pk).model_id == state.serving_model_id


def test_a_model_change_mid_job_stops_the_old_job_without_switching(local, corpus, workspaces):
    demo = workspaces["demo"]
    with FakeEmbeddings(dimensions=8) as fake, _endpoint(fake.base_url):
        newer = embedding_model_for(EmbeddingSpec("openai", "newer-model", fake.base_url))

        def model_changes(_stored):
            WorkspaceEmbedding.objects.filter(workspace=demo).update(target_model=newer)

        assert workspace_embed(workspace_id=demo.pk, on_batch=model_changes) == "superseded"
    state = WorkspaceEmbedding.objects.get(workspace=demo)
    assert state.serving_model_id is None and state.target_model_id == newer.pk
    assert ChunkVector.objects.filter(model__key__startswith="openai:fake-embed").count() == 3  # one batch only


def test_an_endpoint_that_is_down_leaves_keyword_search_answering(corpus, workspaces, users, caplog, client):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = workspaces["demo"]
    with _endpoint(f"http://127.0.0.1:{port}/v1"), caplog.at_level(logging.WARNING, logger="knowledge"):
        assert workspace_embed(workspace_id=demo.pk) == "failed"
        status = embedding_status(workspace_id=demo.pk)
        assert status["state"] == "failed" and "APIConnectionError" in status["error"]
        assert any("keyword search answers meanwhile" in r.getMessage() for r in caplog.records)
        hits = knowledge_search_for_user(user=users["alice"], query="with statement", workspace=demo, top_k=3)
        assert hits[0].item_id == str(corpus["with"].pk)
        client.force_login(users["alice"])
        page = client.get("/knowledge/", {"workspace": demo.pk}).content.decode()
        assert "Search by meaning is paused" in page and "keyword" in page


def test_a_chunk_too_long_for_the_endpoint_is_truncated_not_dropped(corpus, workspaces):
    demo = workspaces["demo"]
    with FakeEmbeddings(dimensions=16, max_chars=120) as fake, _endpoint(fake.base_url):
        assert workspace_embed(workspace_id=demo.pk) == "done"
    total = KnowledgeChunk.objects.filter(workspace=demo).count()
    assert ChunkVector.objects.filter(chunk__workspace=demo).count() == total
    # each chunk once, then each of its sentences (KNOWLEDGE_SENTENCE_VECTORS), every one truncated
    sentences = sum(ChunkSentenceVectors.objects.filter(chunk__workspace=demo).values_list("count", flat=True))
    assert sentences >= total
    assert len(fake.accepted) == total + sentences and all(len(t) <= 120 for t in fake.accepted)
    assert any(len(t) > 120 for t in fake.inputs)  # some were refused at full length first


def test_a_second_job_for_the_same_model_leaves_it_to_the_running_one(corpus, workspaces):
    demo = workspaces["demo"]
    with FakeEmbeddings(dimensions=8) as fake, _endpoint(fake.base_url):
        model = embedding_model_for(current_spec())
        WorkspaceEmbedding.objects.create(workspace=demo, target_model=model, state=WorkspaceEmbedding.State.RUNNING)
        assert workspace_embed(workspace_id=demo.pk) == "running"
        assert fake.requests == []  # nothing embedded twice
        # A job that stopped reporting (its worker died) is taken over.
        WorkspaceEmbedding.objects.filter(workspace=demo).update(updated_at=timezone.now() - timedelta(minutes=5))
        assert workspace_embed(workspace_id=demo.pk) == "done"


def test_the_query_is_embedded_while_the_keyword_query_runs(corpus, workspaces, users, monkeypatch):
    """A search costs the longer of its keyword query and its query embedding, not their sum:
    the endpoint holds the question's embedding until the keyword query has run (or 5 s)."""
    import threading

    from knowledge import selectors

    demo = workspaces["demo"]
    keyword_ran = threading.Event()
    seen: list[bool] = []

    def hold_the_question(body):
        if isinstance(body["input"], list) and len(body["input"]) == 1 and body["input"][0] == NATURAL:
            seen.append(keyword_ran.wait(5.0))

    real_keyword_rows = selectors.keyword_rows

    def keyword_rows(**kwargs):
        rows = real_keyword_rows(**kwargs)
        keyword_ran.set()
        return rows

    monkeypatch.setattr(selectors, "keyword_rows", keyword_rows)
    with FakeEmbeddings(dimensions=16, on_request=hold_the_question) as fake, _endpoint(fake.base_url):
        assert workspace_embed(workspace_id=demo.pk) == "done"
        hits = knowledge_search(workspace=demo, user=users["alice"], query=NATURAL, top_k=5, mode="question")
    assert seen == [True]  # the keyword query ran while the question's vector was being made
    assert hits and str(corpus["break"].pk) in [h.item_id for h in hits]


def test_the_local_model_computes_in_a_child_process(local, corpus, workspaces, users, monkeypatch):
    """KNOWLEDGE_EMBEDDING_PROCESS=child (the default): the vectors are the in-process model's,
    but they are computed by a child process; a child that dies is replaced at the next text,
    and a search meanwhile never fails."""
    import os
    import signal

    import numpy as np

    from knowledge import embeddings

    texts = ["How can I exit a loop early?", "The with statement wraps a block."]
    with override_settings(KNOWLEDGE_EMBEDDING_PROCESS="inline"):
        inline = np.array(embed_texts(local, texts))
    monkeypatch.setattr(embeddings, "_local_model", lambda name: pytest.fail("the model was loaded in-process"))
    with override_settings(KNOWLEDGE_EMBEDDING_PROCESS="child"):
        child_vectors = np.array(embed_texts(local, texts))
        assert np.allclose(inline, child_vectors, atol=1e-5)
        child = embeddings._local_process(local.model)
        assert child.pid and child.pid != os.getpid()
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(100):  # the reader notices the exit
            if child.pid is None:
                break
            import time

            time.sleep(0.05)
        assert np.allclose(inline[:1], np.array(embed_texts(local, texts[:1], kind="query")), atol=1e-5)
        assert child.pid and child.pid != os.getpid()
        assert workspace_embed(workspace_id=workspaces["demo"].pk) == "done"
        hits = knowledge_search(workspace=workspaces["demo"], user=users["alice"], query=NATURAL, top_k=2,
                                mode="question")
        assert str(corpus["break"].pk) in [h.item_id for h in hits]


def test_a_question_is_not_queued_behind_a_background_batch(local):
    """The child serves a search's question on a thread of its own: submitted after a large
    batch of chunks, it is answered before the batch is."""
    from knowledge import embeddings

    child = embeddings._local_process(local.model)
    batch = child.submit([f"Paragraph {i} about loops, context managers and generators. " * 20 for i in range(128)],
                         kind="batch")
    query = child.submit(["How can I exit a loop early?"], kind="query")
    assert query.result(timeout=60).shape == (1, 384)
    assert not batch.done()
    assert batch.result(timeout=300).shape == (128, 384)


def test_sqlite_neighbours_come_from_vec0_in_step_with_the_vectors(local, corpus, workspaces, users, monkeypatch):
    """SQLite: the vec0 table mirrors the stored vectors through inserts and deletes, and its
    nearest neighbours, filtered by the caller's visibility, are the exact scan's."""
    from django.db import connection

    from knowledge import vectors

    if connection.vendor != "sqlite":
        pytest.skip("vec0 is sqlite-vec's; PostgreSQL walks its HNSW index")
    demo = workspaces["demo"]
    assert workspace_embed(workspace_id=demo.pk) == "done"
    assert workspace_embed(workspace_id=workspaces["other"].pk) == "done"
    model_id = query_model_for(demo.pk).model_id

    def mirrored():
        with connection.cursor() as cur:
            cur.execute(f"SELECT rowid FROM {vectors.vec0_table(model_id)}")
            return {r[0] for r in cur.fetchall()}

    assert mirrored() == set(ChunkVector.objects.filter(model_id=model_id).values_list("chunk_id", flat=True))
    vector = embed_texts(local, [NATURAL], kind="query")[0]
    for user, private in ((users["alice"], False), (users["bob"], True)):
        filters = Filters(workspace_id=demo.pk, user_id=user.pk, include_private=private, include_hidden=False)
        fast = vectors.vector_candidates(model_id=model_id, dimensions=384, vector=vector, filters=filters, limit=3)
        with monkeypatch.context() as m:
            m.setattr(vectors, "_has_vec0", lambda model_id: False)
            exact = vectors.vector_candidates(model_id=model_id, dimensions=384, vector=vector, filters=filters,
                                              limit=3)
        assert fast == exact and len(fast) == 3
        chunks = set(KnowledgeChunk.objects.filter(pk__in=fast).values_list("item_id", flat=True))
        assert (corpus["bob_private"].pk in chunks) == private  # only Bob's own private item, for Bob
        assert corpus["hidden"].pk not in chunks and corpus["other_ws"].pk not in chunks
    knowledge_item_delete_for_user(user=users["admin"], item=corpus["break"])
    knowledge_item_update(item=corpus["lambda"], content="Anonymous functions, written inline.")
    assert workspace_embed(workspace_id=demo.pk) == "done"
    assert mirrored() == set(ChunkVector.objects.filter(model_id=model_id).values_list("chunk_id", flat=True))


def test_a_bad_embedding_process_setting_fails_the_system_checks():
    from knowledge.apps import check_embedding_settings

    with override_settings(KNOWLEDGE_EMBEDDING_PROCESS="thread"):
        assert [e.id for e in check_embedding_settings()] == ["knowledge.E002"]
    with override_settings(KNOWLEDGE_EMBEDDING_PROCESS="inline"):
        assert check_embedding_settings() == []
