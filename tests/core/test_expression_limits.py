"""Conditions are evaluated within a count of steps and a bound on the values they build."""

from __future__ import annotations

import pytest

from interlock.core import expression_limits
from interlock.core.expressions import ExpressionError, evaluate, evaluate_text


def test_a_macro_inside_a_macro_stops_at_the_step_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """`xs.all(x, xs.exists(y, ...))` over long lists fails naming the limit, not after hours."""
    monkeypatch.setattr(expression_limits, "MAX_STEPS", 2_000)
    items = list(range(1_000))
    with pytest.raises(ExpressionError, match=r"passes a limit: it takes more than 2,000 steps"):
        evaluate("inputs.xs.all(x, inputs.xs.exists(y, y == x + 1000))", {"inputs": {"xs": items}})


def test_the_limit_is_not_swallowed_by_an_or() -> None:
    """A passed limit fails the condition even where `||` would go on past an error."""
    context = {"inputs": {"s": "a" * 600_000}}
    with pytest.raises(ExpressionError, match=r"builds a value of 1,200,000 characters"):
        evaluate("inputs.s + inputs.s == '' || true", context)


def test_a_macro_building_large_values_is_refused() -> None:
    """Concatenation inside `map` is refused once one value passes the size limit."""
    context = {"inputs": {"xs": [1, 2, 3], "s": "a" * 600_000}}
    with pytest.raises(ExpressionError, match=r"past the limit of 1,000,000"):
        evaluate("inputs.xs.map(x, inputs.s + inputs.s).size() > 0", context)


def test_a_key_whose_value_is_huge_once_written_out_is_refused() -> None:
    """`xs.map(x, xs)` is small in memory; as the JSON of a key it would be enormous."""
    context = {"inputs": {"xs": list(range(2_000))}}
    with pytest.raises(ExpressionError, match=r"more than 1,000,000 items once written out"):
        evaluate_text("inputs.xs.map(x, inputs.xs)", context)


def test_ordinary_conditions_evaluate_as_before() -> None:
    """Macros over short lists and string concatenation work unchanged."""
    context = {"inputs": {"xs": [1, 2, 3], "s": "ab"}}
    assert evaluate("inputs.xs.all(x, x > 0) && inputs.s + inputs.s == 'abab'", context)
    assert evaluate_text("inputs.xs.map(x, x * 2)", context) == "[2, 4, 6]"
