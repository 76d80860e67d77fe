"""What a call cost is recorded even when its result arrives after it stopped counting."""

from __future__ import annotations

from typing import Any

from interlock.core import events as ev
from interlock.core.observe import accept_result, late_usage
from interlock.core.state import RunStatus, fold

from .runs import Run, pipeline_of, worker

USAGE: dict[str, Any] = {"input_tokens": 1000, "output_tokens": 500, "cost_usd": 0.0105}


def _siblings() -> Run:
    """A started run whose first phase runs `a` and `b` side by side."""
    d = Run(pipeline_of({"phases": [
        {"id": "one", "workers": [worker("a"), worker("b")]},
        {"id": "two", "workers": [worker("c", final=True)]},
    ]}))  # fmt: skip
    d.start()
    return d


def _late(d: Run, result: Any) -> ev.UsageRecorded | None:
    assert not accept_result(d.state, result)
    late = late_usage(d.state, result)
    if late is not None:
        d.record(late)
    return late


def test_a_sibling_answered_after_the_run_failed_is_paid_for() -> None:
    """The completion of `b` after `a` failed the run is dropped, its cost is recorded once
    (a second delivery adds nothing), and the fold of the history agrees."""
    d = _siblings()
    d.fail("a@1", "unknown model", retryable=False)
    assert d.state.status is RunStatus.FAILED
    completion = d.completion("b@1", usage=USAGE)
    late = _late(d, completion)
    assert late is not None and late.usage == USAGE and late.attempt == 1
    assert d.state.cost_usd == USAGE["cost_usd"] and d.state.tokens == 1500
    assert _late(d, completion) is None  # a duplicate delivery
    again = fold(d.history)
    assert again.cost_usd == USAGE["cost_usd"] and again.tasks["b@1"].cost_usd == 0.0105


def test_a_superseded_attempt_is_paid_for_but_a_recorded_one_not_twice() -> None:
    """A result of an attempt the engine timed out is charged; the result of an attempt
    whose cost the ledger holds, or one with no cost, is not."""
    d = Run(pipeline_of({"phases": [{"id": "a", "workers": [
        worker("w", final=True, retries=1, timeout=10, grace=0, backoff={"initial": 1})
    ]}]}))  # fmt: skip
    d.start()
    d.begin("w@1")
    d.advance(10)  # attempt 1 timed out, attempt 2 scheduled
    d.advance_to_wake()
    assert d.attempt("w@1") == 2
    stale = d.completion("w@1", usage=USAGE, attempt=1)
    assert _late(d, stale) is not None
    assert _late(d, d.completion("w@1", usage={"cost_usd": 0.0}, attempt=1)) is None
    d.complete("w@1", **USAGE)
    assert _late(d, d.completion("w@1", usage=USAGE, attempt=2)) is None
    assert d.state.cost_usd == 2 * USAGE["cost_usd"]
