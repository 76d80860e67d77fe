"""Durations past ten years and times outside 1970-9999 are refused where they are written or
given, so none is recorded as a wait's end."""

from __future__ import annotations

import json

import pytest

from interlock.core import events as ev
from interlock.core.expressions import ExpressionError
from interlock.core.inputs import resolve_inputs
from interlock.core.loader import parse_workflow
from interlock.core.timebounds import MAX_WAIT_S
from interlock.core.waits import start_time, start_time_problems
from interlock.errors import UsageError, WorkflowError
from interlock.providers.retry import retry_after_of

WORKER = {"role": "w", "command": ["true"], "final": True}


def problems(phase: dict[str, object], **pipeline: object) -> list[str]:
    """The problems a one-phase pipeline with these phase keys is refused with ([] if none)."""
    data = {"p": {**pipeline, "phases": [{"id": "one", "workers": [WORKER], **phase}]}}
    try:
        parse_workflow(json.dumps(data, indent=2), "flow.json", json_only=True)
    except WorkflowError as exc:
        return list(exc.problems)
    return []


@pytest.mark.parametrize(
    ("phase", "what"),
    [
        ({"delay": "1000000000d"}, "delay is 1,000,000,000 days"),
        ({"delay": 86400 * 10**9}, "delay is 1,000,000,000 days"),
        ({"delay": "522w"}, "delay is 3,654 days"),
        ({"wait_for": {"signal": "go", "timeout": "99999999d"}}, "timeout is 99,999,999 days"),
    ],
)
def test_a_duration_past_ten_years_is_refused_with_place_and_fix(
    phase: dict[str, object], what: str
) -> None:
    """A delay or a wait's timeout past ten years is refused naming the key and the limit."""
    (problem,) = problems(phase)
    assert "pipeline 'p', phase 'one'" in problem
    assert what in problem
    assert "past the longest wait interlock keeps (10 years, 315,360,000 s)" in problem
    assert "write a shorter duration" in problem


def test_a_cache_ttl_past_ten_years_is_refused() -> None:
    """`cache: {ttl: ...}` has the same bound."""
    (problem,) = problems({}, cache={"ttl": "100000w"})
    assert "ttl is 700,000 days, past the longest wait" in problem


def test_ten_years_is_allowed() -> None:
    """The limit itself is a valid delay."""
    assert problems({"delay": "3650d"}) == []
    assert problems({"delay": MAX_WAIT_S}) == []


def test_a_constant_not_before_past_9999_is_refused_at_check() -> None:
    """A `not_before` that is a constant (or reads only inputs' defaults) is checked."""
    (problem,) = problems({"not_before": "253402300800"})
    assert "not_before: expression '253402300800' gave a time that is 2.53402e+11" in problem
    assert "outside the times interlock keeps (1970-01-01 to 9999-12-31 UTC)" in problem
    (problem,) = problems({"not_before": "inputs.when"}, inputs={"when": 10**15})
    assert "phase 'one', not_before: expression 'inputs.when' gave a time" in problem
    assert problems({"not_before": "inputs.when"}, inputs={"when": 1_800_000_000}) == []


def test_a_given_input_that_makes_not_before_past_9999_is_found_before_the_run() -> None:
    """With a run's own inputs the same check names the phase; at run time it is an error."""
    data = {"p": {"inputs": {"when": 1}, "phases": [
        {"id": "one", "not_before": "inputs.when", "workers": [WORKER]}]}}  # fmt: skip
    pipeline = parse_workflow(json.dumps(data), "f.json", json_only=True).get("p").pipeline
    (problem,) = start_time_problems(pipeline, "x", {"when": 2 * 10**14})
    assert problem.startswith("phase 'one', not_before: expression 'inputs.when' gave")
    with pytest.raises(ExpressionError, match="outside the times interlock keeps"):
        start_time("inputs.when", {"inputs": {"when": 2 * 10**14}})
    with pytest.raises(ExpressionError, match="outside the times interlock keeps"):
        start_time("inputs.when", {"inputs": {"when": -5.0}})
    assert start_time("inputs.when", {"inputs": {"when": 1_800_000_000}}) == 1_800_000_000


def test_a_given_text_that_is_no_time_is_found_before_the_run() -> None:
    """A text input no date can be (year 99999) is a problem of the run's inputs, quoted as
    JSON text, never as the evaluator's `StringType(...)`; check with no default passes."""
    data = {"p": {"inputs": {"at": {"type": "string", "required": True}}, "phases": [
        {"id": "one", "not_before": "inputs.at", "workers": [WORKER]}]}}  # fmt: skip
    pipeline = parse_workflow(json.dumps(data), "f.json", json_only=True).get("p").pipeline
    (problem,) = start_time_problems(pipeline, "x", {"at": "99999-01-01T00:00:00Z"})
    assert problem.startswith(
        "phase 'one', not_before: expression 'inputs.at' gave \"99999-01-01T00:00:00Z\": give a"
    ), problem
    assert start_time_problems(pipeline, "x", {"at": "2030-01-01T00:00:00Z"}) == []
    with pytest.raises(ExpressionError) as raised:
        start_time("inputs.n", {"inputs": {"n": [1, "a"]}})
    assert 'gave [1, "a"]: give a timestamp' in str(raised.value)


def test_a_not_before_that_cannot_be_evaluated_says_why_in_words() -> None:
    """A misfit operation names the value it read, never CEL's tuple of internal types."""
    with pytest.raises(ExpressionError) as raised:
        start_time("inputs.s + 1", {"inputs": {"s": "a"}})
    said = str(raised.value)
    assert said == (
        "expression 'inputs.s + 1' cannot be evaluated: the values do not fit the operation: "
        'inputs.s = "a" (text)'
    ), said


def test_a_condition_that_is_not_true_or_false_quotes_its_value_plainly() -> None:
    """`gave` in a condition's error shows JSON text, not celpy's types."""
    from interlock.core.expressions import evaluate

    for source, shown in (
        ("inputs.s", '"abc"'),
        ("inputs.n + 1", "6"),
        ("{'k': 1.5}", '{"k": 1.5}'),
    ):
        with pytest.raises(ExpressionError) as raised:
            evaluate(source, {"inputs": {"s": "abc", "n": 5}})
        said = str(raised.value)
        assert f"gave {shown}, not true or false" in said, said
        assert "Type(" not in said


def test_an_integer_past_64_bits_is_refused_as_an_input_and_a_default() -> None:
    """Conditions compute with 64-bit integers: a larger one is refused where it is given."""
    data = {"p": {"inputs": {"n": {"type": "integer", "default": 1}}, "phases": [
        {"id": "one", "workers": [WORKER]}]}}  # fmt: skip
    pipeline = parse_workflow(json.dumps(data), "f.json", json_only=True).get("p").pipeline
    with pytest.raises(UsageError, match="input 'n' must fit in 64 bits"):
        resolve_inputs("p", pipeline.inputs, {"n": str(10**20)})
    assert resolve_inputs("p", pipeline.inputs, {"n": str(2**63 - 1)}) == {"n": 2**63 - 1}
    (problem,) = problems({}, inputs={"n": 10**20})
    assert "an input's default must be a number conditions can use" in problem


def test_a_servers_retry_after_is_bounded() -> None:
    """A Retry-After that is not finite is ignored, and one past ten years is ten years."""
    assert retry_after_of({"retry-after": "inf"}) is None
    assert retry_after_of({"retry-after-ms": "1e300"}) == MAX_WAIT_S
    assert retry_after_of({"retry-after": "30"}) == 30.0


def test_a_pinned_definition_past_the_limits_still_reads_and_fails_at_its_wait() -> None:
    """A definition recorded before the limits (a billion-day delay, a remote `$ref`) is
    rebuilt as it was, and the run fails when the wait would start instead of recording a
    wait's end that is no date."""
    from interlock.core.loader import Definition
    from interlock.core.state import RunStatus

    from .runs import Run, worker

    data = {
        "phases": [
            {"id": "a", "workers": [worker("wa")]},
            {"id": "b", "delay": 86400 * 10**9, "workers": [worker("wb", final=True)]},
        ]
    }
    definition = Definition.from_canonical("p", json.dumps(data))
    assert definition.pipeline.phases[1].delay == 86400 * 10**9
    schema = {"properties": {"x": {"$ref": "http://127.0.0.1:9/x"}}}
    remote = {"phases": [{"id": "a", "workers": [worker("w", final=True, schema=schema)]}]}
    Definition.from_canonical("q", json.dumps(remote))
    d = Run(definition.pipeline)
    d.start()
    d.complete("wa@1")
    assert d.state.status is RunStatus.FAILED and d.state.waiting is None
    (failed,) = d.events_of(ev.RunFailed)
    assert "phase 'b': the end of phase 'b''s delay is" in failed.reason
    assert "outside the times interlock keeps" in failed.reason
