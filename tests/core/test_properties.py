"""Properties of the engine over random pipelines driven by random orders of reports.

Each example builds a valid pipeline of random shape, then plays a run in which workers start,
complete, fail and time out in a random order, time jumps, people approve, and old reports
arrive again. Whatever happens, the recorded history must explain the state exactly, and no
task may run twice or more often than its worker allows.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core import events as ev
from interlock.core.decide import RuleName, decide, next_wake, settle
from interlock.core.observe import accept_result
from interlock.core.state import RunState, RunStatus, TaskStatus, fold
from interlock.core.workflow import Pipeline

from .runs import Run, pipeline_of

EXTRACT = {"ok": {"json": "ok", "type": "bool"}, "items": {"json": "items", "type": "list"}}


@st.composite
def pipelines(draw: st.DrawFn) -> Pipeline:
    """A valid pipeline: 1-4 phases, modes, retries, fallbacks, pauses, loops, fan-out, budget."""
    count = draw(st.integers(1, 4))
    phases: list[dict[str, Any]] = []
    roles: list[str] = []
    for index in range(count):
        last = index == count - 1
        workers = []
        for number in range(draw(st.integers(1, 3))):
            role = f"w{index}{number}"
            spec: dict[str, Any] = {
                "role": role,
                "model": "m",
                "timeout": draw(st.sampled_from([10, 30])),
                "grace": 5,
                "retries": draw(st.integers(0, 2)),
                "backoff": {"initial": draw(st.sampled_from([0, 1, 4])), "max": 8},
                "extract": EXTRACT,
            }
            if draw(st.booleans()):
                spec["fallback_models"] = ["fb"]
            workers.append(spec)
        phase: dict[str, Any] = {
            "id": f"p{index}",
            "mode": draw(st.sampled_from(["parallel", "sequential"])),
            "workers": workers,
            "pause_after": draw(st.integers(0, 3)) == 0,
        }
        if not last and roles and draw(st.booleans()):
            phase["for_each"] = {
                "items": f"{draw(st.sampled_from(roles))}.items",
                "concurrency": draw(st.none() | st.integers(1, 2)),
                "max_items": 3,
            }
        if not last and draw(st.booleans()):
            phase["next"] = [
                {
                    "if": f"{draw(st.sampled_from([w['role'] for w in workers]))}.ok",
                    "goto": f"p{draw(st.integers(0, count - 1))}",
                    "max_visits": draw(st.integers(1, 2)),
                }
            ]
        roles += [w["role"] for w in workers]
        phases.append(phase)
    phases[-1]["workers"][-1]["final"] = True
    data: dict[str, Any] = {"phases": phases}
    if draw(st.integers(0, 3)) == 0:
        data["budget"] = {
            "max_tokens": draw(st.sampled_from([20, 60])),
            "on_exceed": draw(st.sampled_from(["fail", "pause"])),
        }
    return pipeline_of(data)


def normalised(state: RunState) -> dict[str, Any]:
    """The state as plain data, for a readable diff when two states differ."""
    return dataclasses.asdict(state)


def reports(history: list[ev.Event]) -> list[ev.Event]:
    """Every worker report in a history (and the engine's own timeouts)."""
    kinds = (ev.TaskStarted, ev.TaskCompleted, ev.TaskFailed, ev.TaskTimedOut)
    return [e for e in history if isinstance(e, kinds)]


def stuck(driver: Run) -> bool:
    """True when the run is not over, not waiting for a person, and nothing can move it."""
    state = driver.state
    if state.status.ended or state.status is RunStatus.PAUSED:
        return False
    if state.in_flight() or next_wake(driver.pipeline, state) is not None:
        return False
    return not decide(driver.pipeline, state, driver.now + 10**6)


def step(driver: Run, data: st.DataObject) -> None:
    """One random thing happening to the run: a report, a replay, time passing or an approval."""
    state = driver.state
    actions: list[tuple[str, str]] = [("advance", "")]
    if state.status is RunStatus.PAUSED:
        actions.append(("approve", ""))
    for task in state.in_flight():
        actions += [(kind, task.task_id) for kind in ("start", "complete", "fail", "fatal", "late")]
    if reports(driver.history):
        actions.append(("replay", ""))
    kind, tid = data.draw(st.sampled_from(actions))
    if kind == "advance":
        driver.advance(data.draw(st.sampled_from([0.5, 3, 20])))
    elif kind == "approve":
        driver.approve()
    elif kind == "replay":
        # A report that was already recorded must never be accepted a second time.
        old = data.draw(st.sampled_from(reports(driver.history)))
        assert not accept_result(state, old), old  # type: ignore[arg-type]
        assert driver.observe(old) is None  # type: ignore[arg-type]
    else:
        attempt = state.tasks[tid].attempt
        report: Any
        if kind == "start":
            report = ev.TaskStarted(at=driver.now, task_id=tid, attempt=attempt, worker="x")
        elif kind == "complete":
            usage = {"input_tokens": data.draw(st.integers(0, 15)), "output_tokens": 1}
            report = driver.completion(tid, values(data), usage)
        elif kind == "late":
            # a report for an attempt that is not the current one: an older or a future one
            other = data.draw(st.sampled_from([attempt - 1, attempt + 1]))
            report = driver.completion(tid, values(data), attempt=other)
            assert not accept_result(state, report)
        else:
            report = ev.TaskFailed(
                at=driver.now, task_id=tid, attempt=attempt, error="x", retryable=kind == "fail"
            )
        driver.observe(report)


def values(data: st.DataObject) -> dict[str, Any]:
    """What a worker extracted: a flag for conditions and a short list for fan-out."""
    return {
        "ok": data.draw(st.booleans()),
        "items": data.draw(st.lists(st.sampled_from("abc"), max_size=3)),
    }


def check_history(driver: Run) -> None:
    """The invariants that hold at every point of every run."""
    replayed = fold(driver.history)
    assert normalised(replayed) == normalised(driver.state)
    for later in (0.0, 7.0, 10**6):
        now = driver.now + later
        assert decide(driver.pipeline, replayed, now) == decide(driver.pipeline, driver.state, now)
    dispatched = [
        (e.task_id, e.attempt) for e in driver.history if isinstance(e, ev.TaskDispatched)
    ]
    assert len(dispatched) == len(set(dispatched)), "a task attempt was dispatched twice"
    completed = Counter(e.task_id for e in driver.history if isinstance(e, ev.TaskCompleted))
    assert all(n == 1 for n in completed.values()), completed
    for task in driver.state.tasks.values():
        assert 1 <= task.attempt <= driver.pipeline.worker(task.role).max_attempts
    assert not stuck(driver), "the run is stuck"
    # After settling, the next wake-up is in the future, and then the engine acts: a runtime
    # sleeping until then never spins, nor wakes for nothing.
    wake = next_wake(driver.pipeline, driver.state)
    assert wake is None or wake > driver.now, (wake, driver.now, driver.state.status)
    if wake is not None:
        assert settle(driver.pipeline, driver.state.copy(), wake), (wake, driver.state.status)


def finish(driver: Run, data: st.DataObject) -> None:
    """Workers eventually report and people approve: the run must end."""
    for _ in range(500):
        state = driver.state
        if state.status.ended:
            return
        if state.status is RunStatus.PAUSED:
            driver.approve()
        elif state.in_flight():
            driver.complete(state.in_flight()[0].task_id, values(data))
        else:
            driver.advance_to_wake()
        check_history(driver)
    raise AssertionError(f"the run did not end: {driver.state.status}")


@settings(max_examples=150, deadline=None)
@given(pipeline=pipelines(), data=st.data())
def test_random_runs_keep_every_invariant(pipeline: Pipeline, data: st.DataObject) -> None:
    """Any order of reports, replays, timeouts and approvals keeps history and tasks sound."""
    driver = Run(pipeline)
    driver.start()
    check_history(driver)
    for _ in range(data.draw(st.integers(0, 40))):
        if driver.state.status.ended:
            break
        step(driver, data)
        check_history(driver)
    finish(driver, data)
    assert driver.state.status in (RunStatus.DELIVERED, RunStatus.FAILED)
    if driver.state.status is RunStatus.DELIVERED:
        final = driver.pipeline.final_worker
        assert driver.state.delivered is not None
        assert driver.state.delivered.startswith(final.output_name.removesuffix(".md"))
        assert driver.state.archived
    else:
        assert driver.state.failure
        assert not driver.state.in_flight()
        assert all(t.status is not TaskStatus.RETRY_WAIT for t in driver.state.tasks.values())


@settings(max_examples=60, deadline=None)
@given(pipeline=pipelines(), data=st.data())
def test_happy_runs_deliver(pipeline: Pipeline, data: st.DataObject) -> None:
    """When every worker succeeds and every pause is approved, the run is delivered.

    The one exception is a branch that skips the worker a later condition or fan-out reads: that
    run fails with a branch error (which `interlock check` reports as a path that can fail).
    """
    driver = Run(pipeline)
    driver.start()
    for _ in range(500):
        state = driver.state
        if state.status.ended:
            break
        if state.status is RunStatus.PAUSED:
            driver.approve()
        else:
            tid = data.draw(st.sampled_from([t.task_id for t in state.in_flight()]))
            # non-empty lists keep fan-out phases' values defined for later conditions
            driver.complete(tid, {"ok": data.draw(st.booleans()), "items": ["a", "b"]})
    check_history(driver)
    if driver.state.status is RunStatus.FAILED:
        assert driver.decisions[-1].rule is RuleName.BRANCH_ERROR
        reason = driver.state.failure or ""
        assert "has no value yet" in reason or "is not a list" in reason, reason
    else:
        assert driver.state.status is RunStatus.DELIVERED


@settings(max_examples=60, deadline=None)
@given(pipeline=pipelines(), data=st.data())
def test_replay_of_any_prefix_matches(pipeline: Pipeline, data: st.DataObject) -> None:
    """Folding any prefix of a recorded history gives the state the run had at that point."""
    driver = Run(pipeline)
    driver.start()
    snapshots = [(len(driver.history), normalised(driver.state))]
    for _ in range(data.draw(st.integers(1, 25))):
        if driver.state.status.ended:
            break
        step(driver, data)
        snapshots.append((len(driver.history), normalised(driver.state)))
    for length, expected in snapshots:
        assert normalised(fold(driver.history[:length])) == expected
