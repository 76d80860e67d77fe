"""Exploring widens the visit counts of runs kept at one place past `WIDEN_AT`, and the quote
of loops back falls back to a flow bound: what `check` says without "maybe" is what the
search that keeps the whole history says, every problem that search finds is still found,
and the quote is never below the dearest way a run takes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.core import explore as explore_module
from interlock.core import ways as ways_module
from interlock.core.explore import MAY, MAY_SEEN, ExploreReport, explore
from interlock.core.quote import _dearest
from interlock.core.ways import Forgetting
from interlock.core.workflow import Pipeline
from interlock.errors import WorkflowError

from .runs import pipeline_of, worker
from .test_explore_forgetting import back_pipelines, costs


def plain(problem: str) -> str:
    """A problem without what a widened search adds to say it may not happen."""
    return problem.removesuffix(MAY).removesuffix(MAY_SEEN)


def whole_history(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> ExploreReport:
    """The search that keeps every visit count and value in each state's key."""
    with monkeypatch.context() as patch:
        patch.setattr(Forgetting, "of", classmethod(lambda cls, pipeline: None))
        return explore(pipeline, name="p", max_states=20_000)


def assert_sound(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, widen_at: int
) -> ExploreReport | None:
    """Widening past `widen_at` runs at one place: nothing the exact search finds is missed,
    what is said without "maybe" is true, equal findings where nothing was widened, and a
    quote at least the dearest way."""
    whole = whole_history(pipeline, monkeypatch)
    if not whole.complete:
        return None
    with monkeypatch.context() as patch:
        patch.setattr(explore_module, "WIDEN_AT", widen_at)
        wide = explore(pipeline, name="p", max_states=20_000)
    assert wide.complete
    assert set(whole.problems) <= {plain(p) for p in wide.problems}
    assert {p for p in wide.problems if plain(p) == p} <= set(whole.problems)
    assert whole.phases_reached <= wide.phases_reached
    assert wide.delivered or not whole.delivered
    if not wide.widened:
        assert wide.problems == whole.problems
        assert (wide.phases_reached, wide.delivered) == (whole.phases_reached, whole.delivered)
    for per_visit in costs(pipeline):
        expected, _ = _dearest(whole.visit_counts, per_visit)
        total, _ = wide.ways.dearest(per_visit)
        if expected is None:
            assert total is None
            continue
        assert total is not None and total >= expected - 1e-9
    return wide


def _pipeline(data: dict[str, Any]) -> Pipeline:
    try:
        return pipeline_of(data)
    except WorkflowError:
        return Pipeline.model_validate(data)  # hand-built: the explorer still reports


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(back_pipelines(), st.sampled_from([1, 2]))
def test_widened_searches_of_random_pipelines_with_loops_back_are_sound(
    data: dict[str, Any], widen_at: int
) -> None:
    """On random pipelines with loops back and skips, widening as soon as one or two runs are
    kept at a place: every problem of the exact search is found, a problem said without
    "maybe" is one it finds, and the quote is never under the exact dearest way."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert_sound(_pipeline(data), monkeypatch, widen_at)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(back_pipelines())
def test_the_flow_bound_is_never_under_the_dearest_way(data: dict[str, Any]) -> None:
    """With no run weighed one by one (`MAX_PAIRS` 0), the quote of a pipeline with loops
    back is the flow bound, and it is at least the dearest way of the exact search."""
    pipeline = _pipeline(data)
    with pytest.MonkeyPatch.context() as monkeypatch:
        whole = whole_history(pipeline, monkeypatch)
        monkeypatch.setattr(ways_module, "MAX_PAIRS", 0)
        report = explore(pipeline, name="p", max_states=20_000)
        if not whole.complete or not report.complete:
            return
        for per_visit in costs(pipeline):
            expected, _ = _dearest(whole.visit_counts, per_visit)
            total, _ = report.ways.dearest(per_visit)
            if expected is None:
                assert total is None
            else:
                assert total is not None and total >= expected - 1e-9


def shape(name: str, length: int) -> Pipeline:
    """`length` phases of one worker as the benchmark's `check_shape` builds them: each but
    the first and last sends the run back to the one before while its value says not ok
    (`max_visits: 2`), and with `back_skip` may also skip the next one."""
    flag = {"ok": {"json": "ok", "type": "bool"}}
    data: list[dict[str, Any]] = []
    for n in range(length):
        data.append({"id": f"p{n}", "workers": [worker(f"w{n}", extract=flag)]})
        if 0 < n < length - 1:
            data[-1]["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n - 1}", "max_visits": 2}]
            if name == "back_skip" and n + 2 < length:
                data[-1]["next"].append({"if": f"w{n}.ok", "goto": f"p{n + 2}"})
    data[-1]["workers"][0]["final"] = True
    return pipeline_of({"phases": data})


@pytest.mark.parametrize("length", [6, 7, 8])
def test_short_loops_back_and_skips_widened_report_soundly(
    length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark's `back_skip` (back to the one before, or skip the next), widened past
    every run kept at a place that none stands for, against the whole history."""
    wide = assert_sound(shape("back_skip", length), monkeypatch, 1)
    assert wide is not None and wide.widened


def test_sixty_phases_that_loop_back_or_skip_explore_in_few_states() -> None:
    """60 phases that each loop back to the one before or skip the next: runs that skipped
    different phases are merged past `WIDEN_AT` at a place, so every path is seen in a few
    thousand states (5,844 states at 30 phases when each set of phases skipped was kept),
    nothing is reported, and the quote says it is a bound."""
    pipeline = shape("back_skip", 60)
    report = explore(pipeline, name="p", max_states=5_000)
    assert report.complete and report.sound, report.problems
    assert report.widened and report.states < 5_000
    total, path = report.ways.dearest({p.id: 1.0 for p in pipeline.phases})
    assert not report.ways.exact
    assert total is not None and total >= 60 and dict(path)["p59"] >= 1


def test_the_flow_bound_of_loops_back_is_their_dearest_way() -> None:
    """60 phases each sending the run back once to the one before: too many runs to weigh
    one by one, and the bound from the rules is the dearest way itself (each middle phase
    three times)."""
    pipeline = shape("loops_back", 60)
    report = explore(pipeline, name="p", max_states=5_000)
    total, path = report.ways.dearest({p.id: 1.0 for p in pipeline.phases})
    assert not report.ways.exact
    assert total == 2 + 58 * 3 - 1 + 1
    assert dict(path) == {"p0": 2, "p59": 1, "p58": 2} | {f"p{n}": 3 for n in range(1, 58)}
