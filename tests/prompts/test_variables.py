"""The ``{{variable}}`` grammar (prompts.variables): what is a variable, defaults, filling in
one pass. The composer's copy (prompt-vars.js) is checked against the same cases in
tests/js."""

from __future__ import annotations

from prompts.variables import Variable, prompt_fill, prompt_variables


def test_variables_in_order_with_defaults_and_trimmed_names():
    body = "Summarize {{ text }} in a {{tone|friendly}} tone for {{target language | German }}; again {{tone}}."
    assert prompt_variables(body) == [Variable("text", None), Variable("tone", "friendly"),
                                      Variable("target language", "German")]


def test_things_between_braces_that_are_not_variables_stay_text():
    for body in ("{{<script>}}", "{{}}", "{{ 1st }}", "{{a{b}}", "{{ x | {y} }}", "{ {x} }"):
        assert prompt_variables(body) == [], body
        assert prompt_fill(body, {"x": "X"}) == body


def test_a_later_default_fills_a_name_first_used_without_one():
    assert prompt_variables("{{tone}} … {{tone|dry}}") == [Variable("tone", "dry")]
    assert prompt_variables("{{x|}}") == [Variable("x", "")]


def test_fill_uses_values_then_defaults_and_never_expands_twice():
    body = "Hi {{name}}, be {{tone|friendly}}; {{missing}} stays."
    assert prompt_fill(body, {"name": "{{tone}}"}) == "Hi {{tone}}, be friendly; {{missing}} stays."
    assert prompt_fill(body, {"name": "Ann", "tone": "", "missing": "ok"}) == "Hi Ann, be ; ok stays."
