"""Extract regexes and schema patterns are matched by RE2: linear time, whatever the text."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock.core.extract import extract_values
from interlock.core.loader import load_workflow
from interlock.core.patterns import PatternError, compile_pattern
from interlock.core.schema_patterns import linear_validator, pattern_problem
from interlock.core.workflow import Extract
from interlock.errors import WorkflowError

# With a backtracking engine, each of these takes longer than the age of the universe.
NESTED = r"^(a+)+$"
TEXT = "a" * 100 + "b"


def test_a_nested_repeat_over_a_long_line_does_not_backtrack() -> None:
    """`^(a+)+$` against a hundred a's and a b finds nothing, at once, instead of hanging."""
    rule = Extract.model_validate({"regex": NESTED, "required": False})
    assert extract_values({"v": rule}, TEXT) == {"v": None}
    found = Extract.model_validate({"regex": r"^(a+)+b$"})
    assert extract_values({"v": found}, "x\n" + TEXT + "\n") == {"v": "a" * 100}


def test_extracts_still_match_each_line_and_take_the_group() -> None:
    """Multi-line anchors and the single capture group behave as they did."""
    rule = Extract.model_validate({"regex": r"^score: (\d+(?:\.\d+)?)$", "type": "number"})
    assert extract_values({"s": rule}, "review\nscore: 7.5\nend") == {"s": 7.5}


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "backreferences"),
        (r"(?P<x>a)(?P=x)", "backreferences"),
        (r"(?<=score: )\d+", "lookbehind"),
        (r"(?!no)(\w+)", "negative lookahead"),
        (r"(\d+)\Z", "is written \\z"),
        (r"(?>a+)", "atomic groups"),
    ],
)
def test_what_re2_cannot_do_is_refused_with_the_line_and_key(
    tmp_path: Path, pattern: str, reason: str
) -> None:
    """A lookaround, backreference or `\\Z` is refused when the file is read, at its line."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n"
        "  phases:\n"
        "    - id: a\n"
        "      workers:\n"
        "        - role: w\n"
        "          final: true\n"
        "          command: [echo, hi]\n"
        "          extract:\n"
        "            v:\n"
        f"              regex: '{pattern}'\n"
    )
    with pytest.raises(WorkflowError) as raised:
        load_workflow(flow)
    said = str(raised.value)
    assert "line 10:" in said and "key 'regex'" in said, said
    assert "is not supported" in said and reason in said, said


def test_a_schema_pattern_over_model_text_does_not_backtrack() -> None:
    """A schema's `pattern`, `patternProperties` and `additionalProperties` use RE2."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": NESTED}},
        "patternProperties": {r"^x(y+)+$": {"type": "number"}},
        "additionalProperties": False,
    }
    document = {"a": TEXT, "x" + "y" * 100 + "z": 1, "xyy": "text"}
    messages = " | ".join(e.message for e in linear_validator(schema).iter_errors(document))
    assert messages.count(" | ") == 2, messages
    assert "does not match '^(a+)+$'" in messages, messages
    assert "'text' is not of type 'number'" in messages, messages
    assert "Additional properties are not allowed ('xyyy" in messages, messages


def test_a_schema_pattern_re2_cannot_match_is_refused() -> None:
    """A lookahead in a schema is named; a property called `pattern` is not a pattern."""
    assert pattern_problem({"properties": {"pattern": {"type": "string"}}}) is None
    problem = pattern_problem({"items": {"pattern": "(?=x)"}})
    assert problem is not None and "lookahead" in problem
    both = pattern_problem({"patternProperties": {"a": {}}, "unevaluatedProperties": False})
    assert both is not None and "unevaluatedProperties" in both


def test_a_refused_pattern_is_quoted_as_written() -> None:
    """The message quotes the regex as the file has it: one backslash, not repr's two."""
    with pytest.raises(PatternError) as raised:
        compile_pattern(r"Score: (\d) \1")
    assert "regex 'Score: (\\d) \\1' is not supported" in str(raised.value)
    with pytest.raises(PatternError) as raised:
        compile_pattern(r"it's (\d")
    assert """regex "it's (\\d" does not compile""" in str(raised.value)
