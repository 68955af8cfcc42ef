"""Snippets in lists and search results: rendered text (no Markdown/reST syntax), escaped,
the searched words marked."""

import pytest

from knowledge.services import knowledge_item_create
from knowledge.snippets import snippet_html


def test_markdown_syntax_is_rendered_away_and_matches_marked():
    text = "## Setup\n\nRun **pip install** `chatplatform` and see [the docs](https://x.example/d).\n\n- one\n- two"
    assert snippet_html(text, query="install") == (
        "Setup Run pip <mark>install</mark> chatplatform and see the docs. one two")


def test_restructuredtext_directives_and_underlines_disappear():
    text = "Release guide\n=============\n\n.. note::\n\n   Tag the *release* first.\n\nThen ``publish`` wheels."
    out = snippet_html(text, query="releases publish", markup="rst")
    assert out == "<mark>Release</mark> guide Note Tag the <mark>release</mark> first. Then <mark>publish</mark> wheels."


def test_item_text_never_becomes_markup():
    out = snippet_html('<script>alert("x")</script> <b>backups</b> & more', query="backup")
    assert "<script>" not in out and "<b>" not in out
    assert "&lt;script&gt;" in out and "&lt;b&gt;<mark>backups</mark>&lt;/b&gt; &amp; more" in out


def test_the_window_moves_to_the_first_match_and_says_where_it_cut():
    text = " ".join(f"word{i}" for i in range(200)) + " the needle is here " + " ".join(f"tail{i}" for i in range(200))
    out = snippet_html(text, query="needle", chars=120)
    assert out.startswith("… ") and out.endswith(" …") and "<mark>needle</mark>" in out
    assert "word0 " not in out and len(out) < 120 + len("<mark></mark>… …") + 4


def test_negated_words_and_or_are_not_marked():
    out = snippet_html("cats or dogs, never birds", query='cats or -birds')
    assert out == "<mark>cats</mark> or dogs, never birds"


def test_no_query_gives_the_start_unmarked():
    assert snippet_html("# Title\n\nBody text.") == "Title Body text."


@pytest.mark.django_db
def test_list_and_search_pages_show_rendered_highlighted_snippets(client, workspaces, users):
    knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="Backups",
                          content="## Nightly\n\n**Snapshots** are kept for *30 days*.")
    knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="Guide", source_path="/d/guide.rst",
                          content="Guide\n=====\n\n.. warning::\n\n   Snapshots expire.")
    client.force_login(users["alice"])
    listed = client.get("/knowledge/").content.decode()
    assert '<p class="kb-snippet">Nightly Snapshots are kept for 30 days.</p>' in listed
    assert '<p class="kb-snippet">Guide Warning Snapshots expire.</p>' in listed
    found = client.get("/knowledge/?q=snapshots").content.decode()
    assert "Nightly <mark>Snapshots</mark> are kept for 30 days." in found
    # A search hit is a chunk: chunking strips the directive's indentation, so its body is
    # a plain paragraph there and the empty directive renders to nothing.
    assert "Guide <mark>Snapshots</mark> expire." in found
    assert "**" not in found and ".. warning::" not in found
