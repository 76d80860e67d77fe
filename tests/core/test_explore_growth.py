"""Exploring costs about the same per phase in a long pipeline as in a short one, and the
history a fork leaves out changes nothing the explorer finds."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from interlock.core import explore as explore_module
from interlock.core.explore import explore
from interlock.core.loader import load_workflow
from interlock.core.state import RunState
from interlock.core.trial import Digested, SharedWrite, fork, track
from interlock.core.workflow import Pipeline
from interlock.errors import WorkflowError

from .runs import pipeline_of, worker
from .test_explore_reduced import WORKFLOWS, findings, pipelines


def long_pipeline(phases: int, conditions: bool) -> Pipeline:
    """`phases` phases of one worker each; with `conditions`, each phase's way on is a rule
    reading the previous worker's value, so every branch builds what conditions read."""
    data: list[dict[str, Any]] = []
    for n in range(phases):
        extract = {"ok": {"json": "ok", "type": "bool"}}
        data.append({"id": f"p{n}", "workers": [worker(f"w{n}", extract=extract)]})
        if conditions and 0 < n < phases - 1:
            data[-1]["next"] = [{"if": f"w{n - 1}.ok", "goto": f"p{n + 1}"}]
    data[-1]["workers"][0]["final"] = True
    return pipeline_of({"phases": data})


def lines_run(call: Callable[[], object]) -> int:
    """Python lines the interpreter runs for `call()`: a count of work that does not depend on
    how busy the machine is."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        return local

    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("conditions", [False, True], ids=["plain", "conditions"])
def test_exploring_grows_linearly_in_the_number_of_phases(conditions: bool) -> None:
    """Four times the phases cost under 5 times the work (4 is linear; it was over 9 when each
    fork copied and each key hashed the whole history, on the way to 16, quadratic)."""
    work = {}
    for phases in (40, 160):
        pipeline = long_pipeline(phases, conditions)
        report = explore(pipeline, name="p")
        assert report.sound and report.states >= phases
        work[phases] = lines_run(lambda p=pipeline: explore(p, name="p"))  # type: ignore[misc]
    assert work[160] / work[40] < 5, work


def full_fork(state: RunState, own: Collection[str] = ()) -> RunState:
    """A fork that keeps everything: every task and every record, nothing shared."""
    assert isinstance(state.visits, Digested) and isinstance(state.values, Digested)
    clone = state.copy()
    clone.visits, clone.values = state.visits.copy_owned(), state.values.copy_owned()
    return clone


def both_ways(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    """Explore with the lean fork and with a full copy; they must find the same."""
    lean = explore(pipeline, name="p", max_states=20_000)
    with monkeypatch.context() as patched:
        patched.setattr(explore_module, "fork", full_fork)
        full = explore(pipeline, name="p", max_states=20_000)
    assert findings(lean) == findings(full)
    assert lean.states <= full.states


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_leaving_out_old_tasks_finds_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixtures and examples: the lean fork finds the same problems, phases and delivery as a
    fork that copies the whole history."""
    for definition in load_workflow(path).definitions.values():
        both_ways(definition.pipeline, monkeypatch)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines())
def test_leaving_out_old_tasks_finds_the_same_on_random_pipelines(data: dict[str, Any]) -> None:
    """Random small pipelines (loops, conditions, fan-outs, retries, pauses): the same findings
    with the lean fork as with the full copy."""
    try:
        pipeline = pipeline_of(data)
    except WorkflowError:
        pipeline = Pipeline.model_validate(data)
    with pytest.MonkeyPatch.context() as monkeypatch:
        both_ways(pipeline, monkeypatch)


def test_a_digest_depends_on_contents_not_on_the_order_of_writes() -> None:
    """Visit counts written in two orders give one digest; another count gives another."""
    state = RunState()
    track(state)
    a, b = fork(state, {"visits"}), fork(state, {"visits"})
    a.visits["x"], a.visits["y"] = 1, 2
    b.visits["y"], b.visits["x"] = 2, 0
    assert isinstance(a.visits, Digested) and isinstance(b.visits, Digested)
    assert a.visits.digest != b.visits.digest
    b.visits["x"] = 1
    assert a.visits.digest == b.visits.digest
    assert a.visits.written == ["x", "y"]


def test_a_fork_cannot_write_to_history_it_shares() -> None:
    """A fork shares its parent's visits until it owns them: writing to shared ones raises,
    so no sibling state is ever changed behind the explorer's back."""
    state = RunState()
    track(state)
    state.visits["a"] = 1
    child = fork(state)
    with pytest.raises(SharedWrite):
        child.visits["a"] = 2
    with pytest.raises(TypeError):
        fork(state, {"visits"}).visits.update(a=3)
    assert state.visits == {"a": 1} and child.visits is state.visits
