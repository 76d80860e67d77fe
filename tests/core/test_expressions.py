"""Conditions in CEL and task templates: what they read, and that data never becomes code."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core.expressions import ExpressionError, compile_expression, evaluate, read_values
from interlock.core.loader import build_workflow
from interlock.core.templates import TemplateProblem, render_task, template_item, template_names

from .runs import worker


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("reviewer.score < 8.0", {"reviewer"}),
        ("roles['researcher-a'].ok && visits.review < 3", {"roles", "visits"}),
        ('w.items.all(x, x != "")', {"w"}),
        ("w.items.exists(x, x == v)", {"w", "v"}),
        ("w.items.all(x, w.items.exists(y, y == x))", {"w"}),
        ('size(w.items.filter(x, x == "a")) == size(w.items.map(y, y))', {"w"}),
        ('w.items.all(x, x != "") && x', {"w", "x"}),
    ],
)
def test_names_an_expression_reads(source: str, names: set[str]) -> None:
    """The names read are the free ones: variables bound by a macro are not among them."""
    assert compile_expression(source).names == names


def test_macros_evaluate() -> None:
    """List macros work on extracted lists without their variables counting as missing."""
    context = {"w": {"items": ["a", "b"]}}
    assert evaluate('w.items.exists(x, x == "b")', context)
    assert not evaluate('w.items.all(x, x == "a")', context)


def test_macro_variables_pass_validation() -> None:
    """A condition using a macro variable is accepted by the workflow checks."""
    data = {
        "p": {
            "phases": [
                {
                    "id": "a",
                    "workers": [worker("w", extract={"items": {"json": "i", "type": "list"}})],
                    "next": [
                        {"if": 'w.items.exists(x, x == "redo")', "goto": "a", "max_visits": 2}
                    ],
                },
                {"id": "b", "workers": [worker("z", final=True)]},
            ]
        }
    }
    assert build_workflow(data)


def test_missing_value_is_an_error() -> None:
    """A condition over a name with no value raises, naming it."""
    with pytest.raises(ExpressionError, match="reads reviewer, which has no value yet"):
        evaluate("reviewer.score < 8.0", {})


def test_non_boolean_result_is_an_error() -> None:
    """A condition must give true or false, not a number."""
    with pytest.raises(ExpressionError, match="not true or false"):
        evaluate("reviewer.score", {"reviewer": {"score": 6.5}})


def test_strings_from_output_are_data() -> None:
    """A value that looks like an expression is compared as text, never evaluated."""
    context = {"w": {"verdict": "true || 1 == 1"}}
    assert not evaluate('w.verdict == "true"', context)


def test_template_names_and_rendering() -> None:
    """A task template names what it reads and renders topic, item and inputs."""
    source = "Write about {{ item }} for {{ topic }} in {{ inputs.language }}"
    assert template_names(source) == {"item", "topic", "inputs"}
    text = render_task(source, {"item": "x", "topic": "t", "inputs": {"language": "French"}})
    assert text == "Write about x for t in French"


def test_booleans_and_unset_values_render_as_a_file_writes_them() -> None:
    """A boolean input renders true/false and an optional input left unset renders nothing,
    so a command gets `--loud=true`, not Python's `True`, and never the word `None`."""
    values = {"loud": False, "ratio": None, "n": 0}
    text = render_task("--loud={{ loud }} --ratio={{ ratio }} --n={{ n }}", values)
    assert text == "--loud=false --ratio= --n=0"


def test_template_syntax_in_values_is_inert() -> None:
    """Template syntax inside a value (model output, a topic) is rendered as plain text."""
    assert render_task("{{ topic }}", {"topic": "{{ 7 * 7 }}"}) == "{{ 7 * 7 }}"


def test_sandbox_refuses_unsafe_attributes() -> None:
    """A template cannot reach Python internals through attributes."""
    with pytest.raises(TemplateProblem):
        render_task("{{ topic.__class__.__mro__[1].__subclasses__() }}", {"topic": "t"})


def test_undefined_name_at_render_is_an_error() -> None:
    """Rendering with a missing value fails loudly instead of printing nothing."""
    with pytest.raises(TemplateProblem, match="cannot be rendered"):
        render_task("Hello {{ name }}", {})


@pytest.mark.parametrize(
    ("source", "values", "words"),
    [
        ('{{ n + "x" }}', {"n": 3}, "TypeError: unsupported operand"),
        ("{{ n // 0 }}", {"n": 3}, "ZeroDivisionError"),
        ("{{ items[5] }}", {"items": [1]}, "list object has no element 5"),
    ],
)
def test_an_operation_the_values_refuse_is_a_template_problem(
    source: str, values: dict[str, Any], words: str
) -> None:
    """What a template does to values of the wrong kind fails the task with words, not an
    internal error with a traceback."""
    with pytest.raises(TemplateProblem, match="task template cannot be rendered") as raised:
        render_task(source, values)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("source", "context", "words"),
    [
        ("reviewer.scor < 8", {"reviewer": {"score": 5}}, "reviewer has no 'scor' (it has: score)"),
        ('roles["a-b"].x > 1', {"roles": {"a-b": {"y": 1}}}, "a-b\"] has no 'x' (it has: y)"),
        ("reviewer.score < 8.0", {"reviewer": {"score": "high"}}, 'reviewer.score = "high" (text)'),
        ("reviewer.score < 8.0", {"reviewer": {"score": None}}, "reviewer.score is null"),
        ("inputs.n > 3", {"inputs": {"n": None}}, "inputs.n is not set: it is optional"),
        ("1 / 0 == 1", {}, "divide by zero"),
    ],
)  # fmt: skip
def test_evaluation_errors_are_words(source: str, context: dict[str, Any], words: str) -> None:
    """A condition that cannot be evaluated says what is missing or misfits, and what
    exists, never CEL's internal tuple with an exception class."""
    with pytest.raises(ExpressionError) as raised:
        evaluate(source, context)
    message = str(raised.value)
    assert words in message
    assert "<class" not in message and "KeyError" not in message and "Token(" not in message


def test_read_values_names_each_path() -> None:
    """`read_values` shows each value a condition reads, and what is missing."""
    context = {"reviewer": {"score": 5, "notes": ["a"]}, "roles": {"a-b": {}}, "xs": [1]}
    source = (
        'reviewer.score < 8.0 && size(reviewer.notes) > 1 && roles["a-b"].x == 1 '
        "&& xs.all(x, x > 0)"
    )
    assert read_values(source, context) == [
        "reviewer.score = 5",
        'reviewer.notes = ["a"]',
        "roles[\"a-b\"] has no 'x' (it has: nothing)",
        "xs = [1]",
    ]


def test_a_fan_out_item_kept_as_json_text_reads_as_its_object() -> None:
    """An extracted list keeps object items as JSON text: a task reads `{{ item.customer }}`
    from it, `{{ item }}` still renders that text, and plain items stay as they are."""
    item = template_item('{"customer": "acme"}')
    assert render_task("For {{ item.customer }}: {{ item }}", {"item": item}) == (
        'For acme: {"customer": "acme"}'
    )
    assert template_item("plain") == "plain" and template_item("{not json") == "{not json"
    with pytest.raises(TemplateProblem):
        render_task("{{ item.customer }}", {"item": "{not json"})


@pytest.mark.parametrize(
    ("source", "hint"),
    [
        ("(reviewer.score < 8.0", "(1 `(` not closed)"),
        ("reviewer.ok and writer.ok", "CEL writes `&&`, `||` and `!` for `and`, `or` and `not`"),
        ("reviewer.score = 8", "compare with `==`; a single `=` is not an operator"),
        ("{{ reviewer.score }} < 8", "a condition is not a template"),
    ],
)
def test_a_condition_that_does_not_parse_says_the_likely_fix(source: str, hint: str) -> None:
    """Besides where CEL stopped, the words and signs of other languages that explain it."""
    with pytest.raises(ExpressionError) as info:
        compile_expression(source)
    assert f"expression {source!r} does not parse at character" in str(info.value)
    assert hint in str(info.value), str(info.value)


def test_words_inside_quotes_give_no_hint() -> None:
    """`and` or `=` in a quoted text is text: a condition failing elsewhere gets no hint."""
    with pytest.raises(ExpressionError) as info:
        compile_expression("reviewer.verdict == 'this and = that' <")
    assert "(" not in str(info.value).split("does not parse", 1)[1], str(info.value)


NESTED = {
    "brackets": lambda k: "(" * k + "w.score" + ")" * k + " < 8",
    "negations": lambda k: "!" * k + "true",
    "fields": lambda k: "w" + ".a" * k + " == 1",
    "sums": lambda k: " + ".join(["1"] * k) + " > 0",
    "lists": lambda k: "[" * k + "1" + "]" * k + " == []",
    "calls": lambda k: "size(" * k + "'x'" + ")" * k + " > 0",
}


@pytest.mark.parametrize("family", sorted(NESTED))
def test_a_condition_nested_past_the_limit_is_refused_and_any_accepted_one_evaluates(
    family: str,
) -> None:
    """The walks over a condition recurse per level: one nested thousands deep is refused
    with the fix (the text shortened), not a RecursionError that takes `check` down, and
    the deepest one accepted still evaluates with room left on the stack."""
    make = NESTED[family]
    with pytest.raises(ExpressionError, match="nests too deeply") as raised:
        compile_expression(make(3000))
    assert len(str(raised.value)) < 400
    low, high = 1, 3000  # accepted, refused: the deepest accepted lies between
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _accepted(make(middle)) else (low, middle)
    deepest = low

    def deep_in_the_stack(frames: int) -> Any:
        if frames:
            return deep_in_the_stack(frames - 1)
        return evaluate(make(deepest), {"w": {"score": 3, "a": {}}})

    try:
        deep_in_the_stack(300)
    except ExpressionError as exc:
        assert "recursion" not in str(exc)


def _accepted(source: str) -> bool:
    try:
        compile_expression(source)
    except ExpressionError:
        return False
    return True
