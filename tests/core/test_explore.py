"""The explorer walks every path the engine can take and reports what can go wrong."""

from __future__ import annotations

from typing import Any

from interlock.core import events as ev
from interlock.core.explore import explore, stuck_reason
from interlock.core.state import RunState, TaskStatus, apply
from interlock.core.workflow import Pipeline

from .runs import fixture, pipeline_of, worker

OK = {"ok": {"json": "ok", "type": "bool"}}


def unchecked(data: dict[str, Any]) -> Pipeline:
    """A pipeline that only passed the shape checks, as a hand-built one would."""
    return Pipeline.model_validate(data)


def test_research_pipeline_is_sound() -> None:
    """The article's research pipeline reaches every phase, can deliver, and has no problem."""
    report = explore(fixture("research.json", "research"), reduce=False)
    assert report.problems == []
    assert report.complete and report.sound and report.delivered
    assert report.phases_reached == {"collect", "synthesis"}
    # both researchers pending, either one done, synthesis running, delivered, failed
    assert report.states == 6
    # the researchers are alike: one of them done is enough to try, so 'b done' is skipped
    assert explore(fixture("research.json", "research")).states == 5


def test_translate_pipeline_is_sound_and_reaches_polish() -> None:
    """Forcing the review condition both ways reaches polish and publish, with no problem."""
    report = explore(fixture("translate.yaml", "translate"))
    assert report.problems == []
    assert report.phases_reached == {"fetch", "translate", "review", "polish", "publish"}
    assert report.complete and report.delivered


def test_exploring_is_deterministic() -> None:
    """Exploring the same pipeline twice gives the same report."""
    definition = fixture("translate.yaml", "translate")
    assert explore(definition) == explore(definition)


def test_condition_false_with_no_default_is_sound() -> None:
    """A phase whose only rule is a condition cannot get stuck: the engine goes to the next phase.

    When no `next` rule applies the decision table falls through to the following phase in file
    order, and the final phase may not have rules, so every other phase always has a way on.
    """
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "a",
                    "workers": [worker("w", extract=OK)],
                    "next": [{"if": "w.ok", "goto": "c"}],
                },
                {"id": "b", "workers": [worker("x")]},
                {"id": "c", "workers": [worker("y", final=True)]},
            ]
        }
    )
    report = explore(pipeline, name="p")
    assert report.problems == []
    assert report.phases_reached == {"a", "b", "c"}


def test_phase_no_path_reaches() -> None:
    """A phase every path jumps over is reported as one that can never run."""
    pipeline = pipeline_of(
        {
            "phases": [
                {"id": "a", "workers": [worker("w")], "next": [{"goto": "c"}]},
                {"id": "b", "workers": [worker("x")]},
                {"id": "c", "workers": [worker("y", final=True)]},
            ]
        }
    )
    report = explore(pipeline, name="p")
    assert report.problems == ["pipeline 'p', phase 'b': no path reaches it, so it can never run"]
    assert report.phases_reached == {"a", "c"}


def test_condition_over_a_role_skipped_on_some_path() -> None:
    """A condition reading a worker that a branch may skip is flagged: that run would fail."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "a",
                    "workers": [worker("w", extract=OK)],
                    "next": [{"if": "w.ok", "goto": "c"}],
                },
                {"id": "b", "workers": [worker("x", extract=OK)]},
                {
                    "id": "c",
                    "workers": [worker("y")],
                    "next": [{"if": "x.ok", "goto": "d"}],
                },
                {"id": "d", "workers": [worker("z", final=True)]},
            ]
        }
    )
    report = explore(pipeline, name="p")
    assert report.problems == [
        "pipeline 'p', a run can fail on a path where phase 'c', next rule 1: expression 'x.ok' "
        "reads x, which has no value yet"
    ]
    assert report.delivered


def test_fan_out_over_a_role_skipped_on_some_path() -> None:
    """A for_each over a list from a worker a branch may skip is flagged."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "a",
                    "workers": [worker("w", extract=OK)],
                    "next": [{"if": "w.ok", "goto": "c"}],
                },
                {
                    "id": "b",
                    "workers": [worker("planner", extract={"t": {"json": "t", "type": "list"}})],
                },
                {"id": "c", "for_each": "planner.t", "workers": [worker("writer")]},
                {"id": "d", "workers": [worker("z", final=True)]},
            ]
        }
    )
    (problem,) = explore(pipeline, name="p").problems
    assert problem == (
        "pipeline 'p', a run can fail on a path where phase 'c': for_each 'planner.t' is not a list"
    )


def test_no_path_delivers() -> None:
    """A condition that reads a later worker fails every run; nothing after it ever runs."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "a",
                    "workers": [worker("w")],
                    "next": [{"if": "y.ok", "goto": "b"}],
                },
                {"id": "b", "workers": [worker("y", extract=OK, final=True)]},
            ]
        }
    )
    report = explore(pipeline, name="p")
    assert report.problems == [
        "pipeline 'p', a run can fail on a path where phase 'a', next rule 1: expression 'y.ok' "
        "reads y, which has no value yet",
        "pipeline 'p', phase 'b': no path reaches it, so it can never run",
        "pipeline 'p', phase 'b': no path delivers a result",
    ]
    assert not report.delivered


def test_unbounded_loop_is_flagged() -> None:
    """A loop with no max_visits (one validation would reject) is found by its growing visits."""
    pipeline = unchecked(
        {
            "phases": [
                {"id": "draft", "workers": [worker("w")]},
                {
                    "id": "review",
                    "workers": [worker("r", extract=OK)],
                    "next": [{"if": "r.ok", "goto": "draft"}],
                },
                {"id": "out", "workers": [worker("z", final=True)]},
            ]
        }
    )
    report = explore(pipeline, name="p")
    assert report.complete
    assert report.problems == [
        "pipeline 'p', phase 'draft': a path visits it more than 1 times; a loop through it is "
        "not ended by any max_visits"
    ]


def test_bounded_loop_ends() -> None:
    """With max_visits on the way back, every path of the same loop ends."""
    pipeline = pipeline_of(
        {
            "phases": [
                {"id": "draft", "workers": [worker("w")]},
                {
                    "id": "review",
                    "workers": [worker("r", extract=OK)],
                    "next": [{"if": "r.ok", "goto": "draft", "max_visits": 3}],
                },
                {"id": "out", "workers": [worker("z", final=True)]},
            ]
        }
    )
    report = explore(pipeline, name="p")
    assert report.problems == []
    assert report.complete


def test_retries_fallbacks_fan_out_and_pauses_are_explored() -> None:
    """A pipeline using retries, fallbacks, fan-out, pauses and a loop is explored to the end."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "plan",
                    "workers": [
                        worker("planner", retries=1, extract={"t": {"json": "t", "type": "list"}})
                    ],
                },
                {
                    "id": "write",
                    "mode": "sequential",
                    "for_each": {"items": "planner.t", "concurrency": 1},
                    "workers": [
                        worker("writer", retries=1, fallback_models=["b"]),
                        worker("checker"),
                    ],
                },
                {
                    "id": "review",
                    "pause_after": True,
                    "workers": [worker("r", extract=OK)],
                    "next": [{"if": "r.ok", "goto": "write", "max_visits": 2}],
                },
                {"id": "out", "workers": [worker("z", final=True)]},
            ]
        }
    )
    report = explore(pipeline, name="p", reduce=False)
    assert report.problems == []
    assert report.complete and report.delivered
    assert report.phases_reached == {"plan", "write", "review", "out"}
    # The second visit of `write` is stood for by the first (it can do no more than that).
    assert report.states > 20
    reduced = explore(pipeline, name="p")
    assert reduced.problems == [] and reduced.complete and reduced.delivered
    assert reduced.phases_reached == report.phases_reached
    assert reduced.states < report.states


def test_fan_out_placeholder_respects_max_items() -> None:
    """The placeholder list never exceeds a fan-out's max_items, so no error is invented."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "plan",
                    "workers": [worker("p", extract={"t": {"json": "t", "type": "list"}})],
                },
                {
                    "id": "write",
                    "for_each": {"items": "p.t", "max_items": 1},
                    "workers": [worker("w")],
                },
                {"id": "out", "workers": [worker("z", final=True)]},
            ]
        }
    )
    assert explore(pipeline).problems == []


def test_state_limit_stops_and_says_so() -> None:
    """Hitting max_states stops the search, marks it incomplete and claims no unreached phase."""
    report = explore(fixture("translate.yaml", "translate"), max_states=3)
    assert report.states == 3
    assert not report.complete
    assert not report.sound
    assert report.problems == []


def test_messages_without_a_name_start_at_the_phase() -> None:
    """Given a bare pipeline and no name, messages start at the phase so a caller can prefix."""
    pipeline = pipeline_of(
        {
            "phases": [
                {"id": "a", "workers": [worker("w")], "next": [{"goto": "c"}]},
                {"id": "b", "workers": [worker("x")]},
                {"id": "c", "workers": [worker("y", final=True)]},
            ]
        }
    )
    assert explore(pipeline).problems == ["phase 'b': no path reaches it, so it can never run"]


def test_engine_failure_on_a_hand_built_pipeline_is_reported() -> None:
    """A pipeline that breaks the engine (a goto to no phase) is reported, not raised."""
    pipeline = unchecked(
        {
            "phases": [
                {"id": "a", "workers": [worker("w")], "next": [{"goto": "nowhere"}]},
                {"id": "b", "workers": [worker("x", final=True)]},
            ]
        }
    )
    problems = explore(pipeline, name="p").problems
    assert problems[0] == "pipeline 'p', phase 'a': the engine cannot go on: KeyError: 'nowhere'"


def test_stuck_state_is_recognised() -> None:
    """A running run with nothing in flight, nothing scheduled and no rule to apply is stuck."""
    pipeline = pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True)]}]})
    state = RunState()
    apply(state, ev.RunCreated(at=0, run_id="r", pipeline="p", definition_hash="", topic="t"))
    apply(state, ev.PhaseStarted(at=0, phase="a", visit=1))
    apply(
        state,
        ev.TaskDispatched(at=0, task_id="w@1", phase="a", role="w", visit=1, item=None, attempt=1),
    )
    assert stuck_reason(pipeline, state, 0) is None
    state.tasks["w@1"].status = TaskStatus.ABANDONED  # no event leads here: the engine never does
    assert stuck_reason(pipeline, state, 0) == (
        "phase 'a': a run can get stuck here: nothing is running, nothing is scheduled and no "
        "rule applies"
    )
