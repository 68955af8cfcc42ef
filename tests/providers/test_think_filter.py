"""ThinkFilter keeps <think> reasoning off the answer channel, whatever the chunking."""

import pytest

from llm.thinking import ThinkFilter


def run(chunks, prefilled=False):
    f = ThinkFilter(prefilled=prefilled)
    answer, reasoning = [], []
    for chunk in chunks:
        a, r = f.feed(chunk)
        answer.append(a)
        reasoning.append(r)
    a, r = f.finish()
    answer.append(a)
    reasoning.append(r)
    return answer, "".join(reasoning)


@pytest.mark.parametrize("chunks", [
    ["<thi", "nk>user asks 2+2</th", "ink>\n\nIt is 4."],
    ["<think>user asks 2+2</think>It is 4."],
    list("<think>user asks 2+2</think>\n\nIt is 4."),
])
def test_split_tags_never_leak(chunks):
    answer, reasoning = run(chunks)
    assert "".join(answer) == "It is 4."
    assert all("<" not in a and ">" not in a for a in answer)
    assert reasoning == "user asks 2+2"


def test_prefilled_opening_tag_holds_reasoning_until_close():
    answer, reasoning = run(["user asks ", "2+2</th", "ink>\n\nIt is 4."], prefilled=True)
    assert [a for a in answer if a] == ["It is 4."]
    assert reasoning == "user asks 2+2"


def test_prefilled_model_without_think_block_still_answers():
    answer, _ = run(["Just ", "an answer."], prefilled=True)
    assert "".join(answer) == "Just an answer."


def test_plain_text_streams_unchanged_and_late_tags_are_text():
    answer, reasoning = run(["Use ", "<b> and <think> tags ", "freely"])
    assert "".join(answer) == "Use <b> and <think> tags freely"
    assert answer[0] == "Use "  # streamed at once, not held
    assert reasoning == ""


def test_unclosed_think_block_is_all_reasoning():
    answer, reasoning = run(["<think>still thinking"])
    assert "".join(answer) == ""
    assert reasoning == "still thinking"
