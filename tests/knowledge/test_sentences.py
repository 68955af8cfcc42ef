"""Sentence vectors (knowledge/sentences.py): made, replaced and deleted with their chunk,
re-ranking the vector candidates within the caller's visibility. Real database (SQLite with
sqlite-vec here, PostgreSQL with pgvector in the services pass), the real local model."""

from __future__ import annotations

import numpy as np
import pytest
from django.test import override_settings

from knowledge.embedding_jobs import query_model_for, workspace_embed
from knowledge.models import ChunkSentenceVectors, ChunkVector, KnowledgeChunk
from knowledge.search import Filters
from knowledge.selectors import knowledge_search, vector_rows
from knowledge.sentences import rerank, sentences_for, split_sentences
from knowledge.services import (
    knowledge_item_create,
    knowledge_item_delete_for_user,
    knowledge_item_update,
)
from tests.knowledge import test_hybrid

NATURAL = test_hybrid.NATURAL
minilm, local, corpus = test_hybrid.minilm, test_hybrid.local, test_hybrid.corpus  # its fixtures, used here too

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]

# One sentence of a long, mostly unrelated chunk answers the question; a short chunk is only
# about loops in general. The chunk vectors prefer the short one; the sentence vectors find
# the answer.
NOTES = ("Release notes for the spring edition. The garden centre opens at nine on weekdays. "
         "To leave a loop before it has gone through all of its items, use the break keyword.")
LOOPS = "Loops repeat a block of code once for every element of a sequence, such as a list."


def sentence_rows(chunk_ids):
    return dict(ChunkSentenceVectors.objects.filter(chunk_id__in=chunk_ids).values_list("chunk_id", "count"))


def test_split_sentences():
    assert split_sentences("First things first, always. Then the second one! Is this the third? Note: it is a fourth.") == [
        "First things first, always.", "Then the second one!", "Is this the third?", "Note: it is a fourth."]
    assert split_sentences("Short.\n\nA paragraph of its own here") == ["A paragraph of its own here"]
    assert split_sentences("tiny") == ["tiny"] and split_sentences("  ") == []
    assert len(split_sentences(" ".join(f"Sentence number {n} is here." for n in range(200)))) == 64


def test_rerank_adds_the_best_sentence_to_the_chunk_similarity():
    q = [1.0, 0.0]
    sentences = {1: np.array([[0.0, 1.0]], dtype=np.float32), 2: np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32)}
    # chunk 1 is nearer (distance 0.2 against 0.3) but chunk 2 holds a sentence that is the question
    assert rerank(query=q, candidates=[(1, 0.2), (2, 0.3), (3, 0.25)], sentences=sentences, weight=0.5) == [2, 3, 1]
    assert rerank(query=q, candidates=[(1, 0.2), (2, 0.3)], sentences=sentences, weight=0.0) == [1, 2]


def test_sentence_vectors_are_made_replaced_and_deleted_with_their_chunks(local, corpus, workspaces, users):
    demo = workspaces["demo"]
    assert workspace_embed(workspace_id=demo.pk) == "done"
    chunks = dict(KnowledgeChunk.objects.filter(workspace=demo).values_list("pk", "content"))
    assert sentence_rows(chunks) == {pk: len(split_sentences(text)) for pk, text in chunks.items()}
    model_id = query_model_for(demo.pk).model_id
    stored = sentences_for(model_id=model_id, chunk_ids=list(chunks), dimensions=384)
    assert all(v.shape == (len(split_sentences(chunks[pk])), 384) for pk, v in stored.items())
    assert all(np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4) for v in stored.values())

    item = corpus["lambda"]
    old = set(KnowledgeChunk.objects.filter(item=item).values_list("pk", flat=True))
    knowledge_item_update(item=item, content="Anonymous functions are written inline. They take parameters. "
                                             "They return one expression's value.")
    assert not sentence_rows(old)  # the edited item's old chunks took their sentence vectors along
    assert workspace_embed(workspace_id=demo.pk) == "done"
    new = set(KnowledgeChunk.objects.filter(item=item).values_list("pk", flat=True))
    assert sentence_rows(new) == {pk: 3 for pk in new}

    knowledge_item_delete_for_user(user=users["admin"], item=item)
    assert not ChunkSentenceVectors.objects.filter(chunk_id__in=new).exists()
    assert not ChunkVector.objects.filter(chunk_id__in=new).exists()


def test_no_sentence_vectors_when_the_setting_is_off(local, corpus, workspaces):
    with override_settings(KNOWLEDGE_SENTENCE_VECTORS=False):
        assert workspace_embed(workspace_id=workspaces["demo"].pk) == "done"
    assert ChunkVector.objects.exists() and not ChunkSentenceVectors.objects.exists()
    # turned on later: the next job makes them for the chunks already embedded
    assert workspace_embed(workspace_id=workspaces["demo"].pk) == "done"
    assert ChunkSentenceVectors.objects.count() == KnowledgeChunk.objects.filter(workspace=workspaces["demo"]).count()


def test_a_chunk_answering_in_one_sentence_moves_up(local, workspaces, users):
    demo = workspaces["demo"]
    notes = knowledge_item_create(workspace=demo, owner=users["admin"], title="Spring edition", content=NOTES)
    loops = knowledge_item_create(workspace=demo, owner=users["admin"], title="Repetition", content=LOOPS)
    assert workspace_embed(workspace_id=demo.pk) == "done"
    filters = Filters(workspace_id=demo.pk, user_id=users["alice"].pk, include_private=False, include_hidden=False)

    def first(**settings):
        with override_settings(**settings):
            return str(vector_rows(query=NATURAL, filters=filters, fetch=2)[0][1]).replace("-", "")

    assert first(KNOWLEDGE_SENTENCE_VECTORS=False) == loops.pk.hex  # the chunk vectors alone
    assert first() == notes.pk.hex
    hits = knowledge_search(workspace=demo, user=users["alice"], query=NATURAL, top_k=2, mode="question")
    assert hits[0].item_id == str(notes.pk)


def test_sentences_rerank_only_what_the_caller_may_see(local, corpus, workspaces, users):
    demo = workspaces["demo"]
    # Bob's private item and the other workspace's answer hold the question word for word.
    assert workspace_embed(workspace_id=demo.pk) == "done"
    assert workspace_embed(workspace_id=workspaces["other"].pk) == "done"
    assert ChunkSentenceVectors.objects.filter(chunk__item=corpus["bob_private"]).exists()
    for user, private in ((users["alice"], False), (users["alice"], True), (users["bob"], True)):
        filters = Filters(workspace_id=demo.pk, user_id=user.pk, include_private=private, include_hidden=False)
        items = {str(row[1]).replace("-", "") for row in vector_rows(query=NATURAL, filters=filters, fetch=40)}
        assert (corpus["bob_private"].pk.hex in items) == (user == users["bob"])
        assert corpus["other_ws"].pk.hex not in items and corpus["hidden"].pk.hex not in items
