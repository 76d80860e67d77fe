"""The reduced exploration finds what the full one finds, at a cost linear in a phase's width."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.core.explore import ExploreReport, explore
from interlock.core.loader import load_workflow
from interlock.core.workflow import Pipeline
from interlock.errors import WorkflowError

from .runs import FIXTURES, pipeline_of, worker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FULL_LIMIT = 200_000


def findings(report: ExploreReport) -> tuple[Any, ...]:
    """What a report says about the pipeline, leaving out how many states it took."""
    return (report.problems, report.phases_reached, report.delivered, report.complete)


def assert_same_findings(pipeline: Pipeline) -> tuple[ExploreReport, ExploreReport]:
    """Explore both ways and check they agree; returns (full, reduced)."""
    full = explore(pipeline, name="p", reduce=False, max_states=FULL_LIMIT)
    assert full.complete, "the full search must finish for the comparison to mean anything"
    reduced = explore(pipeline, name="p")
    assert findings(reduced) == findings(full)
    assert reduced.states <= full.states
    return full, reduced


EXAMPLE_FILES = sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".yaml", ".json"))
WORKFLOWS = [FIXTURES / "research.json", FIXTURES / "translate.yaml", *EXAMPLE_FILES]


def wide(workers: list[dict[str, Any]], phase: str = "a") -> Pipeline:
    """A phase of `workers`, then a final phase of one worker."""
    last = {"id": "last", "workers": [worker("z", final=True)]}
    return pipeline_of({"phases": [{"id": phase, "workers": workers}, last]})


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_fixtures_and_examples_give_the_same_findings(path: Path) -> None:
    """Every pipeline of the fixtures and examples: same problems, phases and delivery."""
    for definition in load_workflow(path).definitions.values():
        assert_same_findings(definition.pipeline)


def test_a_parallel_phase_of_alike_workers_costs_a_handful_of_states() -> None:
    """1,000 alike parallel workers with retries explore in a few states, not 2**1000."""
    workers = [worker(f"w{n}", retries=1) for n in range(1000)]
    pipeline = wide(workers, "wide")
    report = explore(pipeline, name="p")
    assert report.sound and report.delivered
    assert report.states < 20


def test_the_full_search_is_what_grows() -> None:
    """Ten alike workers: the full search sees every subset; the reduced one a few states."""
    workers = [worker(f"w{n}") for n in range(10)]
    pipeline = wide(workers, "wide")
    full, reduced = assert_same_findings(pipeline)
    assert full.states > 2**10 and reduced.states < 10


def test_each_kind_of_worker_lives_every_life() -> None:
    """Workers of different kinds are each tried failing: a give-up of the second is found."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "a",
                    "workers": [worker("plain"), worker("fussy", retries=2, timeout=5, grace=0)],
                },
                {"id": "z", "workers": [worker("last", final=True)]},
            ]
        }
    )
    full, reduced = assert_same_findings(pipeline)
    assert reduced.states < full.states


def test_a_stopped_search_says_what_it_did_not_cover() -> None:
    """With --max-states too small the report is incomplete and names what was not reached."""
    pipeline = wide([worker(f"w{n}") for n in range(8)], "a")
    report = explore(pipeline, name="p", reduce=False, max_states=20)
    assert not report.complete and report.unexplored > 0
    text = report.not_covered(["a", "last"])
    assert text.startswith("exploring stopped at 20 states (--max-states): paths through ")
    assert "phases 'last' were not reached" in text and "raise --max-states" in text
    assert explore(pipeline, name="p").not_covered(["a", "last"]) == ""


def test_progress_is_reported_on_long_searches() -> None:
    """The progress callback hears (states, waiting) every thousand states."""
    pipeline = wide([worker(f"w{n}") for n in range(11)], "a")
    heard: list[tuple[int, int]] = []
    report = explore(pipeline, name="p", reduce=False, progress=lambda s, w: heard.append((s, w)))
    assert [s for s, _ in heard] == list(range(1000, report.states + 1, 1000))


# Random small pipelines: a few phases of a few workers, with everything that shapes a
# task's life or a phase's end: retries, fallbacks, timeouts, modes, conditions, loops,
# pauses and fan-outs.

WORKER = st.fixed_dictionaries(
    {},
    optional={
        "retries": st.integers(0, 2),
        "fallback_models": st.just(["b"]),
        "timeout": st.sampled_from([1, 600]),
        "grace": st.sampled_from([0, 120]),
        "backoff": st.sampled_from([{"initial": 0.5}, {"initial": 5, "multiplier": 3}]),
    },
)


@st.composite
def pipelines(draw: st.DrawFn) -> dict[str, Any]:
    """Plain data for a small pipeline that may or may not pass validation."""
    count = draw(st.integers(1, 3))
    phases: list[dict[str, Any]] = []
    for index in range(count):
        width = draw(st.integers(1, 3))
        workers = []
        for n in range(width):
            extra = draw(WORKER)
            if n == 0:
                extra["extract"] = {
                    "ok": {"json": "ok", "type": "bool"},
                    "xs": {"json": "xs", "type": "list"},
                }
            workers.append(worker(f"r{index}x{n}", **extra))
        phase: dict[str, Any] = {
            "id": f"p{index}",
            "workers": workers,
            "mode": draw(st.sampled_from(["parallel", "sequential"])),
        }
        if index > 0 and draw(st.booleans()):
            phase["for_each"] = {
                "items": f"r{index - 1}x0.xs",
                "concurrency": draw(st.sampled_from([1, 2, 10])),
            }
        if draw(st.booleans()):
            phase["pause_after"] = True
        if index < count - 1 and draw(st.booleans()):
            target = f"p{draw(st.integers(0, count - 1))}"
            rule: dict[str, Any] = {"goto": target}
            bound = draw(st.sampled_from([None, 1, 2]))  # None: maybe a loop nothing ends
            if bound is not None:
                rule["max_visits"] = bound
            if draw(st.booleans()):
                # a role of this phase, or of another that may not have run yet
                rule["if"] = f"r{draw(st.integers(0, count - 1))}x0.ok"
            phase["next"] = [rule]
        phases.append(phase)
    phases[-1].pop("next", None)
    phases[-1].pop("for_each", None)
    phases[-1]["workers"][-1]["final"] = True
    return {"phases": phases}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines())
def test_random_small_pipelines_give_the_same_findings(data: dict[str, Any]) -> None:
    """On random small pipelines the reduced search reports exactly what the full one does."""
    try:
        pipeline = pipeline_of(data)
    except WorkflowError:
        pipeline = Pipeline.model_validate(data)  # hand-built: the explorer still reports
    full = explore(pipeline, name="p", reduce=False, max_states=FULL_LIMIT)
    if not full.complete:
        return  # too big to compare at all; such pipelines are not small
    reduced = explore(pipeline, name="p")
    assert findings(reduced) == findings(full)
