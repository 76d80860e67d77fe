"""Exploring forgets the history no later phase can read: a chain of optional phases, or of
loops, costs states linear in its length, and what `check` reports (problems, phases
reached, delivery, the dearest way) is what the search that keeps the whole history
reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.core.explore import ExploreReport, explore
from interlock.core.loader import load_workflow
from interlock.core.quote import _dearest
from interlock.core.ways import Forgetting
from interlock.core.workflow import Pipeline
from interlock.errors import WorkflowError

from .runs import pipeline_of, worker
from .test_explore_reduced import WORKFLOWS, findings, pipelines


def optional_chain(length: int) -> Pipeline:
    """`length` phases; each may skip the next one on a condition over its own value."""
    data: list[dict[str, Any]] = []
    for n in range(length):
        extract = {"ok": {"json": "ok", "type": "bool"}}
        data.append({"id": f"p{n}", "workers": [worker(f"w{n}", extract=extract)]})
        if n + 2 < length:
            data[-1]["next"] = [{"if": f"w{n}.ok", "goto": f"p{n + 2}"}]
    data[-1]["workers"][0]["final"] = True
    return pipeline_of({"phases": data})


def loop_chain(length: int, visits: int = 3) -> Pipeline:
    """`length` phases, each run again while its value says not ok, at most `visits` times,
    then a final one."""
    data: list[dict[str, Any]] = []
    for n in range(length):
        extract = {"ok": {"json": "ok", "type": "bool"}}
        rule = {"if": f"!w{n}.ok", "goto": f"p{n}", "max_visits": visits}
        data.append({"id": f"p{n}", "workers": [worker(f"w{n}", extract=extract)], "next": [rule]})
    data.append({"id": "end", "workers": [worker("editor", final=True)]})
    return pipeline_of({"phases": data})


def costs(pipeline: Pipeline) -> list[dict[str, float | None]]:
    """Prices per visit that make different ways the dearest, and one with no bound."""
    ids = [p.id for p in pipeline.phases]
    return [
        {p: float(n + 1) for n, p in enumerate(ids)},
        {p: float(len(ids) - n) for n, p in enumerate(ids)},
        {p: float(n % 2) for n, p in enumerate(ids)},
        {p: None if n == len(ids) // 2 else 1.0 for n, p in enumerate(ids)},
    ]


def dearest(report: ExploreReport, per_visit: dict[str, float | None]) -> Any:
    """The dearest way's total and its number of visits (ties may pick another way)."""
    total, path = report.ways.dearest(per_visit)
    return total, sum(count for _, count in path) if total is not None else None


def compare(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> ExploreReport:
    """Explore forgetting and remembering; both must report the same, the dearest way too."""
    forgetful = explore(pipeline, name="p", max_states=20_000)
    with monkeypatch.context() as patch:
        patch.setattr(Forgetting, "of", classmethod(lambda cls, pipeline: None))
        whole = explore(pipeline, name="p", max_states=20_000)
    assert findings(forgetful) == findings(whole)
    assert forgetful.states <= whole.states
    if whole.complete:
        for per_visit in costs(pipeline):
            total, path = _dearest(whole.visit_counts, per_visit)
            expected = total, sum(c for _, c in path) if total is not None else None
            assert dearest(whole, per_visit) == expected
            assert dearest(forgetful, per_visit) == expected
    return forgetful


def test_a_long_chain_of_optional_phases_explores_in_linear_states() -> None:
    """30 optional phases: every path seen in under 100 states (it took millions: each phase
    passed over or not was a different history, 2**15 and more)."""
    report = explore(optional_chain(30), name="p", max_states=100)
    assert report.complete and report.sound, report.problems
    assert report.states < 100


def test_the_dearest_way_through_a_chain_is_the_one_that_skips_nothing() -> None:
    """The cost quote still sees the way through all 30 phases, although the states of the
    ways that skip some were merged with it."""
    pipeline = optional_chain(30)
    report = explore(pipeline, name="p")
    total, path = report.ways.dearest({p.id: 1.0 for p in pipeline.phases})
    assert total == 30 and path == tuple(sorted((p.id, 1) for p in pipeline.phases))
    dearest_odd = {p.id: float(n % 2) for n, p in enumerate(pipeline.phases)}
    assert report.ways.dearest(dearest_odd)[0] == 15


def test_a_long_chain_of_loops_explores_in_states_linear_in_its_length() -> None:
    """60 phases that each loop on themselves up to 3 times: a loop left behind forgets its
    count, so every path is seen in a few states per phase (3**60 histories otherwise; 20
    of them stopped at the state limit), and the dearest way visits each phase 3 times."""
    pipeline = loop_chain(60)
    report = explore(pipeline, name="p", max_states=5_000)
    assert report.complete and report.sound, report.problems
    assert report.states < 60 * 20
    total, path = report.ways.dearest({p.id: 1.0 for p in pipeline.phases})
    assert total == 181
    assert path == tuple(sorted([("end", 1)] + [(f"p{n}", 3) for n in range(60)]))


@pytest.mark.parametrize("length", [2, 3, 4])
def test_loop_chains_report_the_same_as_the_whole_history(
    length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loop chains short enough to explore with the whole history: the same findings and
    the same dearest ways."""
    compare(loop_chain(length), monkeypatch)


def test_a_loop_that_comes_back_keeps_the_counts_of_what_it_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loop from the last phase back to the first: every phase can be visited again, so
    no count is forgotten, and the reports still agree."""
    pipeline = loop_chain(4, visits=2)
    data = pipeline.model_dump(by_alias=True, exclude_none=True)
    data["phases"][3]["next"] = [{"if": "!w3.ok", "goto": "p0", "max_visits": 2}]
    forgetting = Forgetting.of(Pipeline.model_validate(data))
    assert forgetting is not None
    assert forgetting.again("p3", {}) >= {"p0", "p1", "p2", "p3"}
    compare(Pipeline.model_validate(data), monkeypatch)


def back_chain(length: int) -> Pipeline:
    """`length` phases, each but the first sending the run back to the one before while its
    value says not ok (`max_visits: 2` on that one), then a final one."""
    data: list[dict[str, Any]] = []
    for n in range(length):
        extract = {"ok": {"json": "ok", "type": "bool"}}
        data.append({"id": f"p{n}", "workers": [worker(f"w{n}", extract=extract)]})
        if n:
            data[-1]["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n - 1}", "max_visits": 2}]
    data.append({"id": "end", "workers": [worker("editor", final=True)]})
    return pipeline_of({"phases": data})


def test_loops_back_whose_bound_is_used_up_forget_what_they_passed() -> None:
    """14 phases each looping back to the one before: once a rule's `max_visits` is used up,
    no run goes back past it, so the counts behind it are forgotten (20,467 states and 28 s
    of CPU when every count was kept; a few hundred states now)."""
    report = explore(back_chain(14), name="p", max_states=2_000)
    assert report.complete and report.sound, report.problems
    assert report.states < 1_000


@pytest.mark.parametrize("length", [3, 5])
def test_back_chains_report_the_same_as_the_whole_history(
    length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same findings and dearest ways as the search that keeps every count."""
    compare(back_chain(length), monkeypatch)


def test_a_value_a_later_phase_reads_is_not_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase passed over leaves a value missing that the last rule reads: the run can fail
    there, and forgetting must still find it."""
    pipeline = optional_chain(8)
    data = pipeline.model_dump(by_alias=True, exclude_none=True)
    data["phases"][5]["next"] = [{"if": "w1.ok", "goto": "p7"}]
    report = compare(Pipeline.model_validate(data), monkeypatch)
    assert any("w1" in problem and "no value" in problem for problem in report.problems)


@pytest.mark.parametrize("length", [4, 7, 10])
def test_chains_report_the_same_as_the_whole_history(
    length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chains short enough to explore with the whole history: the same findings and quote."""
    compare(optional_chain(length), monkeypatch)


def _loadable(path: Path) -> bool:
    """Whether the file loads on its own (some fixtures need companion files)."""
    try:
        load_workflow(path)
    except WorkflowError:
        return False
    return True


@pytest.mark.parametrize("path", [p for p in WORKFLOWS if _loadable(p)], ids=lambda p: p.name)
def test_fixtures_and_examples_report_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pipeline of the fixtures and examples that loads on its own: the same findings
    and dearest ways."""
    workflow = load_workflow(path)
    for definition in workflow.definitions.values():
        compare(definition.pipeline, monkeypatch)


@st.composite
def forward_pipelines(draw: st.DrawFn) -> dict[str, Any]:
    """Plain data for a pipeline whose rules only go forward, reading values of any phase."""
    count = draw(st.integers(2, 7))
    phases: list[dict[str, Any]] = []
    for index in range(count):
        extract = {"ok": {"json": "ok", "type": "bool"}}
        phase: dict[str, Any] = {
            "id": f"p{index}",
            "workers": [worker(f"r{index}", extract=extract)],
        }
        if index < count - 1:
            rules = []
            for _ in range(draw(st.integers(0, 2))):
                rule: dict[str, Any] = {"goto": f"p{draw(st.integers(index + 1, count - 1))}"}
                if draw(st.booleans()):
                    rule["if"] = f"r{draw(st.integers(0, count - 1))}.ok"
                rules.append(rule)
            phase["next"] = rules
        phases.append(phase)
    phases[-1]["workers"][-1]["final"] = True
    return {"phases": phases}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(forward_pipelines(), pipelines()))
def test_random_pipelines_report_the_same(data: dict[str, Any]) -> None:
    """On random pipelines, forward-only ones and ones with loops, forgetting changes nothing
    `check` reports."""
    try:
        pipeline = pipeline_of(data)
    except WorkflowError:
        pipeline = Pipeline.model_validate(data)  # hand-built: the explorer still reports
    with pytest.MonkeyPatch.context() as monkeypatch:
        compare(pipeline, monkeypatch)


def test_loops_back_explore_in_states_linear_in_their_number() -> None:
    """40 phases each sending the run back to the one before: a run back at a phase with
    more visits can do no more than its first visit there, so each phase costs about one
    state (11,367 states when every count that could be read was kept: about the cube)."""
    report = explore(back_chain(40), name="p", max_states=2_000)
    assert report.complete and report.sound, report.problems
    assert report.states < 4 * 40


def test_the_dearest_way_back_goes_back_at_every_phase() -> None:
    """The states a first visit stands for are still weighed: the dearest way through 14
    phases that each loop back once visits the middle ones three times."""
    pipeline = back_chain(14)
    report = explore(pipeline, name="p")
    total, path = report.ways.dearest({p.id: 1.0 for p in pipeline.phases})
    assert total == 2 + 12 * 3 + 2 + 1
    assert dict(path) == {"end": 1, "p0": 2, "p13": 2} | {f"p{n}": 3 for n in range(1, 13)}


def test_a_problem_only_a_third_visit_reaches_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule without a condition sends the run back until its bound is used up, and only
    then does the next rule read a value no phase wrote: the run must go back twice to fail
    there, so the state of the second visit must not be stood for by the first."""
    data: dict[str, Any] = {
        "phases": [
            {"id": "a", "workers": [worker("wa")]},
            {"id": "b", "workers": [worker("wb")]},
            {
                "id": "c",
                "workers": [worker("wc")],
                "next": [{"goto": "b", "max_visits": 3}, {"if": "ghost.ok", "goto": "e"}],
            },
            {
                "id": "d",
                "workers": [worker("ghost", extract={"ok": {"json": "ok", "type": "bool"}})],
            },
            {"id": "e", "workers": [worker("z", final=True)]},
        ]
    }
    report = compare(Pipeline.model_validate(data), monkeypatch)
    assert any("ghost" in problem and "no value" in problem for problem in report.problems)


@st.composite
def back_pipelines(draw: st.DrawFn) -> dict[str, Any]:
    """Plain data for a pipeline whose rules go back (bounded, with a condition or not) or
    forward, reading values of any phase, some phases fanning out or pausing."""
    count = draw(st.integers(3, 6))
    phases: list[dict[str, Any]] = []
    for index in range(count):
        extract = {"ok": {"json": "ok", "type": "bool"}, "xs": {"json": "xs", "type": "list"}}
        phase: dict[str, Any] = {
            "id": f"p{index}",
            "workers": [worker(f"r{index}", extract=extract)],
        }
        if 0 < index < count - 1 and draw(st.booleans()):
            phase["for_each"] = {"items": "r0.xs", "concurrency": 2}
        if index < count - 1 and draw(st.integers(0, 3)) == 0:
            phase["pause_after"] = True
        if index < count - 1:
            rules = []
            for _ in range(draw(st.integers(0, 2))):
                target = draw(st.integers(0, count - 1))
                rule: dict[str, Any] = {"goto": f"p{target}"}
                if target <= index:
                    rule["max_visits"] = draw(st.integers(1, 3))
                if draw(st.integers(0, 3)):
                    rule["if"] = f"!r{draw(st.integers(0, count - 1))}.ok"
                rules.append(rule)
            phase["next"] = rules
        phases.append(phase)
    phases[-1]["workers"][-1]["final"] = True
    return {"phases": phases}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(back_pipelines())
def test_random_pipelines_with_loops_back_report_the_same(data: dict[str, Any]) -> None:
    """On random pipelines with bounded loops back, standing for a run by one with fewer
    visits changes nothing `check` reports, nor the dearest way."""
    try:
        pipeline = pipeline_of(data)
    except WorkflowError:
        pipeline = Pipeline.model_validate(data)
    with pytest.MonkeyPatch.context() as monkeypatch:
        compare(pipeline, monkeypatch)
