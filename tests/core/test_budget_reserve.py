"""A cost budget holds back a model call's worst case before the call starts: a task is
dispatched only while recorded spend, the worst cases of the calls in flight and its own fit
in the budget, so spend stops within it instead of one call (or many parallel ones) past it."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName
from interlock.core.quote import ModelTerms, TextSizes, call_worst_cases
from interlock.core.state import RunStatus

from .runs import Run, pipeline_of, worker


def parallel(on_exceed: str = "pause", limit: float = 0.012) -> Any:
    """One parallel phase of two writers, then an editor, under a cost budget."""
    return pipeline_of(
        {
            "budget": {"max_cost_usd": limit, "on_exceed": on_exceed},
            "phases": [
                {"id": "draft", "mode": "parallel", "workers": [worker("a"), worker("b")]},
                {"id": "publish", "workers": [worker("editor", final=True)]},
            ],
        }
    )


def test_two_parallel_calls_that_do_not_both_fit_start_one_at_a_time() -> None:
    """Two calls of $0.009 worst case under $0.012: only the first starts."""
    run = Run(parallel(), reserve={"a": 0.009, "b": 0.009, "editor": 0.009})
    run.start()
    assert run.in_flight() == ["a@1"]
    assert run.state.status is RunStatus.RUNNING


def test_a_held_call_waits_for_the_spend_of_the_calls_in_flight() -> None:
    """The held writer starts once the first call cost less than its worst case."""
    run = Run(parallel(), reserve={"a": 0.009, "b": 0.009, "editor": 0.001})
    run.start()
    run.complete("a@1", cost_usd=0.002)
    assert run.in_flight() == ["b@1"]


def test_with_nothing_in_flight_a_call_that_does_not_fit_pauses_the_run() -> None:
    """After $0.009 of $0.012 spent, a $0.009 call does not start: the run pauses for the
    budget, saying the call's worst case and what is left."""
    run = Run(parallel(), reserve={"a": 0.009, "b": 0.009, "editor": 0.009})
    run.start()
    made = run.complete("a@1", cost_usd=0.008)
    assert run.state.status is RunStatus.PAUSED
    assert run.state.pause_reason == "budget"
    [budget] = [d for d in made if d.rule == RuleName.BUDGET]
    assert budget.why == (
        "the next call of 'b' may cost up to $0.0090 and $0.0040 is left of the budget $0.0120"
    )
    assert run.in_flight() == []
    assert run.state.cost_usd <= 0.012


def test_approving_the_pause_lets_the_held_call_start() -> None:
    """An approved budget pause spends on: the held call starts."""
    run = Run(parallel(), reserve={"a": 0.009, "b": 0.009, "editor": 0.009})
    run.start()
    run.complete("a@1", cost_usd=0.008)
    run.approve()
    assert run.in_flight() == ["b@1"]


def test_on_exceed_fail_fails_before_the_call() -> None:
    """With `on_exceed: fail` the run fails, naming the call that would not fit."""
    run = Run(parallel("fail"), reserve={"a": 0.009, "b": 0.009, "editor": 0.009})
    run.start()
    run.complete("a@1", cost_usd=0.008)
    [failed] = run.events_of(ev.RunFailed)
    assert failed.reason == (
        "budget exceeded: the next call of 'b' may cost up to $0.0090 and $0.0040 is left of "
        "the budget $0.0120"
    )


def test_a_role_without_a_worst_case_starts_while_anything_is_left() -> None:
    """A worker missing from the map (no price or no output limit) is dispatched as before."""
    run = Run(parallel(), reserve={"a": 0.009})
    run.start()
    assert run.in_flight() == ["a@1", "b@1"]


def test_without_a_map_every_call_starts() -> None:
    """No map (the engine alone, or no cost budget): both calls start, as they always did."""
    run = Run(parallel())
    run.start()
    assert run.in_flight() == ["a@1", "b@1"]


def terms(**extra: Any) -> ModelTerms:
    values: dict[str, Any] = {
        "input_usd_per_mtok": 2.0,
        "output_usd_per_mtok": 8.0,
        "max_output_tokens": 1000,
    }
    return ModelTerms(**{**values, **extra})


@pytest.mark.parametrize(
    ("known", "expected"),
    [
        (terms(), {"w": pytest.approx((310 * 2.0 + 1000 * 8.0) / 1e6)}),
        (terms(max_output_tokens=None), {}),
        (terms(input_usd_per_mtok=None), {}),
        (terms(free=True, input_usd_per_mtok=None, output_usd_per_mtok=None), {"w": 0.0}),
    ],
)
def test_the_worst_case_of_one_call(known: ModelTerms, expected: dict[str, Any]) -> None:
    """Prompt estimate at the input rate plus the output limit at the output rate; a model
    without a price or an output limit gives no worst case."""
    pipeline = pipeline_of(
        {"phases": [{"id": "a", "workers": [worker("w", task="x" * 40, final=True)]}]}
    )
    sizes = TextSizes(topic=0)
    assert call_worst_cases(pipeline, terms={("w", "m"): known}, sizes=sizes) == expected
