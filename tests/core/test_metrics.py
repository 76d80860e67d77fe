"""Metrics: a pipeline's `metrics:` checked with their line, computed from a row's recorded
values, and the statistics and differences `interlock compare` shows."""

from __future__ import annotations

import json

import pytest

from interlock.core.loader import parse_workflow
from interlock.core.metrics import (
    RowOutcome,
    differences,
    first_numeric,
    median,
    percentile,
    row_metrics,
    summarize,
    summarize_variant,
)
from interlock.errors import WorkflowError

WORKFLOW = """\
p:
  metrics:
    score: reviewer.score
    passed: reviewer.score >= 5
  phases:
    - id: review
      workers:
        - role: reviewer
          final: true
          command: [sh, -c, 'echo "Score: 7" > "$1"', sh, "{output}"]
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def test_metrics_are_kept_in_the_definition_and_a_pipeline_without_them_hashes_as_before() -> None:
    """`metrics:` is part of the pinned definition; without it the canonical form is unchanged."""
    with_metrics = parse_workflow(WORKFLOW).get("p")
    assert with_metrics.pipeline.metrics == {
        "score": "reviewer.score",
        "passed": "reviewer.score >= 5",
    }
    plain = parse_workflow(
        WORKFLOW.replace(
            "  metrics:\n    score: reviewer.score\n    passed: reviewer.score >= 5\n", ""
        )
    ).get("p")
    assert "metrics" not in plain.canonical and "metrics" in with_metrics.canonical


@pytest.mark.parametrize(
    ("metric", "said"),
    [
        (
            "reviewer.scor",
            "expression 'reviewer.scor' reads reviewer.scor, which worker 'reviewer' does "
            "not extract (did you mean 'score'?)",
        ),
        (
            "writer.score",
            "expression 'writer.score' reads 'writer', which is not a role",
        ),
        (
            "reviewer.score >",
            "expression 'reviewer.score >' does not parse",
        ),
        (
            "inputs.lang == 'x'",
            "expression \"inputs.lang == 'x'\" reads inputs.lang, which is not a declared input",
        ),
    ],
)
def test_a_bad_metric_is_refused_with_its_line_and_the_fix(metric: str, said: str) -> None:
    """A metric over a value no worker extracts, an unknown name, bad CEL or an undeclared
    input: `check` names the metric's line, what is wrong and what exists."""
    text = WORKFLOW.replace("    passed:", f"    bad: {json.dumps(metric)}\n    passed:")
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(text, "w.yaml")
    assert f"line 4: pipeline 'p', metrics 'bad': {said}" in str(caught.value)


def test_a_metric_name_must_be_a_column_name() -> None:
    """A metric's name becomes a column: spaces and such are refused."""
    with pytest.raises(WorkflowError, match="a metric's name is letters"):
        parse_workflow(WORKFLOW.replace("    score: reviewer", "    'my score': reviewer"))


def test_row_metrics_read_the_recorded_values_and_say_what_is_missing() -> None:
    """Metrics are computed from each worker's values; one that cannot be is said missing."""
    metrics = {
        "score": "reviewer.score",
        "passed": "reviewer.score >= 5",
        "judge": "roles['judge-1'].ok",
    }
    found = row_metrics(metrics, topic="t", inputs={}, roles={"reviewer": {"score": 7}})
    assert found.values == {"score": 7, "passed": True}
    assert "judge" in found.missing and "judge" in found.missing["judge"]
    dashed = row_metrics(
        metrics, topic="t", inputs={}, roles={"reviewer": {"score": 2}, "judge-1": {"ok": False}}
    )
    assert dashed.values == {"score": 2, "passed": False, "judge": False}


def test_statistics_are_exact_and_deterministic() -> None:
    """Nearest-rank percentiles are values that were measured; the median averages two."""
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([float(n) for n in range(1, 101)], 95) == 95.0
    assert percentile([], 50) is None
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    numbers = summarize("score", [1, 2, 6])
    assert (numbers.mean, numbers.median, numbers.pass_rate) == (3.0, 2.0, None)
    flags = summarize("passed", [True, False, True, True])
    assert (flags.pass_rate, flags.median) == (0.75, None)


def outcome(
    number: int, score: float | None, status: str = "delivered", seconds: float = 1.0
) -> RowOutcome:
    """A row of a variant with its score (None: no value)."""
    metrics = {} if score is None else {"score": score}
    return RowOutcome(
        number=number,
        run_id=f"r{number}",
        status=status,
        seconds=seconds,
        cost_usd=0.5,
        metrics=metrics,
    )


def test_a_variant_sums_its_rows_and_takes_metrics_from_delivered_rows_only() -> None:
    """Failed rows count as failed and spend, never in a metric or a duration."""
    rows = [
        outcome(1, 4.0, seconds=2.0),
        outcome(2, 8.0, seconds=4.0),
        outcome(3, None, "failed", 99.0),
    ]
    summary = summarize_variant("base", "b", rows, ["score"])
    assert (summary.delivered, summary.failed, summary.cost_usd) == (2, 1, 1.5)
    assert (summary.p50_seconds, summary.p95_seconds) == (2.0, 4.0)
    assert summary.metrics[0].mean == 6.0 and summary.metrics[0].count == 2


def test_the_rows_that_differ_most_come_first_and_rows_alike_are_left_out() -> None:
    """Largest spread first, ties by row number; a row with one value or equal ones is not a
    difference; each names the high and the low variant's runs."""
    base = [outcome(1, 5.0), outcome(2, 5.0), outcome(3, 1.0), outcome(4, 2.0)]
    edited = [
        RowOutcome(number=n, run_id=f"e{n}", status="delivered", metrics={"score": s})
        for n, s in [(1, 5.0), (2, 9.0), (3, 5.0)]
    ]
    found = differences([("base", base), ("edited", edited)], "score", limit=10)
    assert [(d.number, d.spread, d.high[:2], d.low[:2]) for d in found] == [
        (2, 4.0, ("edited", "e2"), ("base", "r2")),
        (3, 4.0, ("edited", "e3"), ("base", "r3")),
    ]
    assert differences([("base", base), ("edited", edited)], "score", limit=1)[0].number == 2


def test_rows_are_compared_by_the_first_number_before_any_true_false_metric() -> None:
    """The default `--by`: a numeric metric when there is one."""
    rows = [
        RowOutcome(number=1, run_id="r", status="delivered", metrics={"passed": True, "score": 3})
    ]
    summary = summarize_variant("base", "b", rows, ["passed", "score"])
    assert first_numeric(["passed", "score"], [summary]) == "score"
    only_flags = summarize_variant("base", "b", rows, ["passed"])
    assert first_numeric(["passed"], [only_flags]) == "passed"
    assert first_numeric([], [summary]) is None
