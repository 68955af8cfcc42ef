"""The Offline provider and attached documents: the prompt builder writes each document
before the question (``agents.loop.prompt.document_block``); Offline answered by searching
the knowledge base for the whole text, files and markers included, and then failed to read
the oversized tool result ("The search_knowledge call did not work: Object with 3 keys…",
a fresh-clone trial). It now answers about the files and searches only a question alone."""

from __future__ import annotations

import json
from types import SimpleNamespace

from agents.loop.prompt import document_block
from llm.base import ChatMessage, ChatRequest, StreamedToolCall, TextDelta, ToolDefinition
from llm.offline import OfflineAdapter, split_attached_files

SEARCH = ToolDefinition(name="search_knowledge", description="search", parameters={"type": "object"})


def attached(name: str, text: str):
    return SimpleNamespace(filename=name, content_type="text/plain", text=text)


def ask(content: str) -> list:
    request = ChatRequest(model="rule-based", system="", messages=[ChatMessage(role="user", content=content)],
                          tools=[SEARCH])
    return list(OfflineAdapter().stream(request))


def test_the_question_is_read_apart_from_the_documents_the_builder_wrote():
    notes, plan = attached("notes.txt", "Deploy on Fridays.\nNever on Mondays."), attached("plan.md", "# Plan\nShip it.")
    content = "\n\n".join([document_block(notes), document_block(plan), "Summarise the attached notes"])
    question, files = split_attached_files(content)
    assert question == "Summarise the attached notes"
    assert files == [("notes.txt", notes.text), ("plan.md", plan.text)]


def test_with_files_attached_offline_answers_about_them_without_a_search():
    content = "\n\n".join([document_block(attached("notes.txt", "Deploy on Fridays. Never on Mondays.")),
                           "Summarise the attached notes"])
    events = ask(content)
    assert not any(isinstance(e, StreamedToolCall) for e in events)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "**notes.txt** (36 characters)" in text and "> Deploy on Fridays. Never on Mondays." in text
    assert "<<<file" not in text and "did not work" not in text


def test_a_question_alone_still_searches_with_only_its_words():
    events = ask("How does the with statement work?")
    calls = [e for e in events if isinstance(e, StreamedToolCall)]
    assert len(calls) == 1 and json.loads(calls[0].arguments)["query"] == "How does the with statement work?"
