"""A run's given inputs are converted to their declared type, or refused with the fix."""

from __future__ import annotations

import pytest

from interlock.core.inputs import resolve_inputs
from interlock.core.workflow import InputSpec
from interlock.errors import UsageError

DECLARED = {
    "n": InputSpec(default=3),
    "ratio": InputSpec(type="number", required=True),
    "loud": InputSpec(default=False),
    "lang": InputSpec(default="French"),
}


def resolve(**given: object) -> dict[str, object]:
    return resolve_inputs("p", DECLARED, {"ratio": 1, **given})


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"n": "4"}, {"n": 4, "ratio": 1.0}),
        ({"n": 4.0, "ratio": "0.25"}, {"n": 4, "ratio": 0.25}),
        ({"loud": "Yes"}, {"loud": True}),
        ({"loud": "0"}, {"loud": False}),
        ({"loud": True}, {"loud": True}),
        ({"lang": 5}, {"lang": "5"}),
        ({"lang": True}, {"lang": "true"}),
        ({}, {"n": 3, "loud": False, "lang": "French"}),
        ({"n": None, "lang": None}, {"n": 3, "lang": "French"}),  # a rerun's unset inputs
    ],
)
def test_given_values_take_their_inputs_type(
    given: dict[str, object], expected: dict[str, object]
) -> None:
    """Text from a command line and typed values from JSON both end as the declared type."""
    values = resolve(**given)
    for name, value in expected.items():
        assert values[name] == value and type(values[name]) is type(value), name


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"n": "four"}, "input 'n' is a whole number, e.g. 4, like its default 3; got 'four'"),
        ({"n": "1_000"}, "input 'n' is a whole number"),
        ({"n": 4.5}, "input 'n' is a whole number"),
        ({"n": True}, "input 'n' is a whole number, e.g. 4, like its default 3; got 'true'"),
        ({"ratio": "nan"}, "input 'ratio' is a number, e.g. 0.5; got 'nan'"),
        ({"loud": "maybe"}, "input 'loud' is true or false, like its default false; got 'maybe'"),
    ],
)
def test_values_not_of_their_type_are_refused(given: dict[str, object], message: str) -> None:
    """A value that is not of its input's type names the input, the type and the value."""
    with pytest.raises(UsageError) as info:
        resolve(**given)
    assert message in str(info.value)


def test_a_required_input_with_a_type_must_still_be_given() -> None:
    """`type` does not make an input optional."""
    with pytest.raises(UsageError, match="needs input 'ratio': pass --input ratio=VALUE"):
        resolve_inputs("p", DECLARED, {})


def test_a_value_past_the_size_limit_is_refused_with_the_input_named() -> None:
    """An input of more than MAX_VALUE_SIZE characters is refused before the run exists."""
    with pytest.raises(UsageError, match=r"input 'lang' has 100,001 characters; .* at most"):
        resolve(lang="x" * 100_001)
    assert resolve(lang="x" * 100_000)["lang"] == "x" * 100_000


def test_a_huge_number_is_measured_without_writing_it_out() -> None:
    """A number given through the API with a hundred thousand digits is refused by size."""
    with pytest.raises(UsageError, match=r"input 'n' has"):
        resolve(n=10**400_000)


def test_the_topic_is_bounded_too() -> None:
    """The topic is checked like an input."""
    from interlock.core.inputs import check_size

    with pytest.raises(UsageError, match=r"the topic has 100,001 characters"):
        check_size("p", "the topic", "t" * 100_001)
