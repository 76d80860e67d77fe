"""When the engine acts: its earliest deadline is the least of all deadlines, never later.

`RunState.earliest_deadline` walks two heaps (attempts running, by their start; attempts not
started, by their dispatch) and stops early where no entry could be due first; `next_wake`
adds retries' backoff and the wait in progress. A walk that stops too early wakes the engine
late for a timeout. These properties compare both with a brute-force minimum over every task,
on states folded from random valid histories, and check that the engine times an attempt out
at its deadline: not before, and not later.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.core import events as ev
from interlock.core.decide import RuleName, next_wake, settle
from interlock.core.state import RunState, RunStatus, TaskState, TaskStatus, fold
from interlock.core.workflow import Pipeline

from .runs import Run, pipeline_of, worker

IN_FLIGHT = (TaskStatus.DISPATCHED, TaskStatus.RUNNING)
FAILED = (TaskStatus.FAILED, TaskStatus.TIMED_OUT)

# Steps of a random history. Time moves by one of a few amounts (zero among them), so that
# starts, dispatches and deadlines often tie: a walk that treats a tie as later is caught.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["dispatch", "start", "complete", "fail", "time_out", "retry"]),
        st.integers(min_value=0, max_value=23),
        st.sampled_from([0.0, 0.0, 1.0, 2.5, 10.0, 40.0]),
    ),
    max_size=120,
)


def folded(steps: list[tuple[str, int, float]]) -> RunState:
    """The state of a history built from `steps`, each made valid for where its task is
    (a step that does not fit the task's status is skipped)."""
    now, attempts = 0.0, dict[str, int]()
    history: list[ev.Event] = [
        ev.RunCreated(at=0.0, run_id="r", pipeline="p", definition_hash="0" * 64, topic="t")
    ]
    status: dict[str, TaskStatus] = {}
    for kind, number, elapsed in steps:
        now += elapsed
        task = f"w{number}@1"
        at, current = now, status.get(task)
        attempt = attempts.get(task, 0)
        event: ev.Event | None = None
        if kind == "dispatch" and current in (None, TaskStatus.RETRY_WAIT, TaskStatus.COMPLETED):
            attempt = attempts[task] = attempt + 1
            event = ev.TaskDispatched(
                at=at, task_id=task, phase="a", role=f"w{number}", visit=1, item=None,
                attempt=attempt, model="m",
            )  # fmt: skip
            current = TaskStatus.DISPATCHED
        elif kind == "start" and current is TaskStatus.DISPATCHED:
            event, current = (
                ev.TaskStarted(at=at, task_id=task, attempt=attempt),
                TaskStatus.RUNNING,
            )
        elif kind == "complete" and current in IN_FLIGHT:
            event = ev.TaskCompleted(
                at=at, task_id=task, attempt=attempt, artifact="x.md", sha256="0" * 64, size=1
            )
            current = TaskStatus.COMPLETED
        elif kind == "fail" and current in IN_FLIGHT:
            event, current = (
                ev.TaskFailed(at=at, task_id=task, attempt=attempt, error="e"),
                TaskStatus.FAILED,
            )
        elif kind == "time_out" and current in IN_FLIGHT:
            event = ev.TaskTimedOut(at=at, task_id=task, attempt=attempt)
            current = TaskStatus.TIMED_OUT
        elif kind == "retry" and current in (TaskStatus.FAILED, TaskStatus.TIMED_OUT):
            event = ev.RetryScheduled(
                at=at, task_id=task, attempt=attempt + 1, not_before=at + elapsed, model="m"
            )
            current = TaskStatus.RETRY_WAIT
        if event is not None:
            history.append(event)
            status[task] = current  # type: ignore[assignment]
    return fold(history)


def least(state: RunState, deadline: Any) -> float | None:
    """The brute-force answer: the least deadline of every task in flight."""
    due = [deadline(t) for t in state.tasks.values() if t.status in IN_FLIGHT]
    return min(due) if due else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=STEPS,
    running=st.sampled_from([0.0, 1.0, 5.0, 30.0]),
    queued=st.sampled_from([0.0, 2.0, 60.0]),
    seed=st.integers(0, 2**32),
)
def test_earliest_deadline_is_the_least_of_every_task_in_flight(
    steps: list[tuple[str, int, float]], running: float, queued: float, seed: int
) -> None:
    """For any folded history and any deadlines that keep the walk's bounds (no deadline
    sooner than `running` after a start, `queued` after a dispatch not started), the heap
    walk finds exactly the brute-force minimum: None when nothing is in flight."""
    state = folded(steps)
    rng = random.Random(seed)
    # Per task, how far past its bound its deadline is: zero often, so that bounds tie.
    extra = {task: rng.choice([0.0, 0.0, 1.0, 3.5, 100.0]) for task in state.tasks}

    def deadline(task: TaskState) -> float:
        if task.started_at is None:
            return task.dispatched_at + queued + extra[task.task_id]
        return task.started_at + running + extra[task.task_id]

    assert state.earliest_deadline(deadline, running, queued) == least(state, deadline)
    # The same on a copy (what `check` explores): its heaps are the original's.
    assert state.copy().earliest_deadline(deadline, running, queued) == least(state, deadline)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=STEPS,
    started=st.sampled_from([0.0, 5.0, 20.0, 60.0, 400.0]),
    dispatched=st.sampled_from([0.0, 5.0, 20.0, 60.0, 400.0]),
)
def test_the_attempts_due_are_every_attempt_in_flight_that_early(
    steps: list[tuple[str, int, float]], started: float, dispatched: float
) -> None:
    """`flight_since` (which attempts may be past their deadline) finds exactly the tasks in
    flight started by `started`, or not started and dispatched by `dispatched`, in dispatch
    order: an attempt it misses is never timed out."""
    state = folded(steps)
    expected = [
        t
        for t in sorted(state.tasks.values(), key=lambda t: t.order)
        if t.status in IN_FLIGHT
        and (t.started_at <= started if t.started_at is not None else t.dispatched_at <= dispatched)
    ]
    assert state.flight_since(started, dispatched) == expected


def test_the_earliest_deadline_is_found_below_the_earliest_start() -> None:
    """The attempt that started first (its heap's top) is not the one due first: the walk
    goes on below it, past an attempt retried since, to the least deadline."""
    steps = [
        ("dispatch", 0, 0.0), ("dispatch", 1, 0.0), ("dispatch", 2, 0.0),
        ("start", 0, 1.0), ("start", 1, 1.0), ("start", 2, 1.0),
        ("fail", 0, 1.0), ("retry", 0, 0.0), ("dispatch", 0, 1.0), ("start", 0, 1.0),
    ]  # fmt: skip
    state = folded(steps)

    def deadline(task: TaskState) -> float:
        assert task.started_at is not None
        return task.started_at + (50.0 if task.role == "w1" else 10.0)

    # w0's first start (1) no longer stands and left the top; w1 started at 2 (due 52), w2
    # at 3 (due 13), w0 again at 6 (due 16).
    assert state.starts[0] == (2.0, 1, "w1@1")
    assert state.earliest_deadline(deadline, 10.0, 10.0) == 13.0 == least(state, deadline)


# A run of one parallel phase of workers with different limits, then a wait with a timeout
# before the last phase: timeouts of starts and of results, backoffs and the wait's due time.
LIMITS = st.fixed_dictionaries(
    {
        "timeout": st.sampled_from([5, 30, 60]),
        "grace": st.sampled_from([0, 5]),
        "start_timeout": st.sampled_from([10, 45, None]),
        "retries": st.sampled_from([0, 1, 2]),
    }
)
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["begin", "complete", "fail", "advance", "wake"]),
        st.integers(min_value=0, max_value=5),
        st.sampled_from([0.0, 1.0, 4.0, 15.0]),
    ),
    max_size=40,
)


def pipeline_with(limits: list[dict[str, Any]]) -> Pipeline:
    """The pipeline of the properties below: `limits` give phase a's workers."""
    workers = []
    for number, given_limits in enumerate(limits):
        chosen = {k: v for k, v in given_limits.items() if v is not None}
        workers.append(worker(f"w{number}", backoff={"initial": 3, "jitter": 0.5}, **chosen))
    return pipeline_of(
        {
            "phases": [
                {"id": "a", "workers": workers},
                {
                    "id": "b",
                    "workers": [worker("wb", final=True)],
                    "wait_for": {"signal": "go", "timeout": 20},
                },
            ]
        }
    )


def task_deadline(pipeline: Pipeline, task: TaskState) -> float:
    """When the task's current attempt is due, from the workflow's limits alone."""
    limits = pipeline.worker(task.role)
    if task.started_at is None:
        return task.dispatched_at + limits.start_deadline
    return task.started_at + limits.timeout + limits.grace


def every_due_time(pipeline: Pipeline, state: RunState) -> list[float]:
    """Every time the engine must act at by itself: each attempt in flight's deadline, and
    while the run runs, each retry's backoff and the end of the wait in progress."""
    times = [task_deadline(pipeline, t) for t in state.tasks.values() if t.status in IN_FLIGHT]
    # A paused run holds its retries and waits; so does one that fails once its running
    # attempts end (a task left failed after settling is one with no attempt left).
    failing = any(t.status in FAILED for t in state.tasks.values())
    if state.status is RunStatus.RUNNING and not failing:
        times += [
            t.not_before
            for t in state.tasks.values()
            if t.status is TaskStatus.RETRY_WAIT and t.not_before is not None
        ]
        if state.waiting is not None and state.waiting.until is not None:
            times.append(state.waiting.until)
    return times


def play(d: Run, action: tuple[str, int, float]) -> None:
    """One step of a random run: a report for one task in flight, or time passing."""
    kind, number, elapsed = action
    flight = d.in_flight()
    task = flight[number % len(flight)] if flight else None
    if kind == "begin" and task is not None and d.state.tasks[task].started_at is None:
        d.begin(task)
    elif kind == "complete" and task is not None:
        d.complete(task)
    elif kind == "fail" and task is not None:
        d.fail(task, retryable=number % 3 != 0)
    elif kind == "advance":
        d.advance(elapsed)
    elif kind == "wake" and next_wake(d.pipeline, d.state) is not None:
        d.advance_to_wake()


def timeouts_at(d: Run, now: float) -> set[str]:
    """The tasks the engine times out if it decides at `now` (on a copy of the run)."""
    made = settle(d.pipeline, d.state.copy(), now)
    return {m.event.task_id for m in made if isinstance(m.event, ev.TaskTimedOut)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limits=st.lists(LIMITS, min_size=1, max_size=5), actions=ACTIONS)
def test_the_engine_wakes_at_the_least_due_time_and_times_out_then(
    limits: list[dict[str, Any]], actions: list[tuple[str, int, float]]
) -> None:
    """After every step of a random run: `next_wake` is the least of every due time (task
    deadlines, backoffs, the wait's end); nothing times out before the least task deadline,
    and right at it exactly the tasks due by then time out."""
    d = Run(pipeline_with(limits))
    d.start()
    for action in actions:
        play(d, action)
        due = every_due_time(d.pipeline, d.state)
        wake = next_wake(d.pipeline, d.state)
        assert wake == (min(due) if due else None)
        # The contract a runtime sleeping until then relies on: later than now, and then the
        # engine acts.
        assert wake is None or (wake > d.now and settle(d.pipeline, d.state.copy(), wake))
        deadlines = {
            t.task_id: task_deadline(d.pipeline, t)
            for t in d.state.tasks.values()
            if t.status in IN_FLIGHT
        }
        found = d.state.earliest_deadline(
            lambda t: task_deadline(d.pipeline, t),
            d.pipeline.shortest_deadline,
            d.pipeline.shortest_start,
        )
        assert found == (min(deadlines.values()) if deadlines else None)
        if found is None:
            continue
        assert found > d.now, "a deadline that passed was not acted on"
        assert timeouts_at(d, (d.now + found) / 2) == set()
        assert timeouts_at(d, math.nextafter(found, -math.inf)) == set()
        # Right at it, not a rounding error later: `test_a_timeout_fires_at_its_exact_deadline`.
        assert timeouts_at(d, found) == {t for t, at in deadlines.items() if at <= found}


def test_each_attempt_times_out_at_its_own_deadline_through_the_engine() -> None:
    """Three workers with their own limits, started at different times: waking at each
    `next_wake` times out exactly the attempt due then, at its deadline, and no other."""
    d = Run(
        pipeline_with(
            [
                {"timeout": 60, "grace": 5},
                {"timeout": 5, "grace": 0},
                {"timeout": 30, "grace": 5, "start_timeout": 45},
            ]
        )
    )
    d.start()
    d.begin("w0@1")  # due at 65
    d.advance(10)
    d.begin("w1@1")  # due at 15; w2 is never started: due at its start_timeout, 45
    seen = []
    for _ in range(3):
        made = d.advance_to_wake()
        seen += [(m.event.task_id, m.event.at) for m in made if m.rule is RuleName.TIMEOUT]  # type: ignore[attr-defined]
    assert seen == [("w1@1", 15.0), ("w2@1", 45.0), ("w0@1", 65.0)]


def test_a_run_timeout_is_not_acted_on_a_moment_early_nor_missed_at_its_time() -> None:
    """An attempt with timeout + grace of 15 s from its start: at 14.999... nothing happens;
    at 15 the engine times it out, and `next_wake` said 15."""
    d = Run(pipeline_with([{"timeout": 10, "grace": 5, "retries": 0}]))
    d.start()
    d.advance(100)
    d.begin("w0@1")
    assert next_wake(d.pipeline, d.state) == 115.0
    d.now = math.nextafter(115.0, 0.0)
    assert d.settle() == []
    d.now = 115.0
    assert [m.rule for m in d.settle()][:1] == [RuleName.TIMEOUT]
    assert d.state.tasks["w0@1"].status is not TaskStatus.RUNNING


def test_a_timeout_fires_at_its_exact_deadline() -> None:
    """An attempt re-dispatched at a time with a fraction times out at the very time
    `earliest_deadline` (and so `next_wake`, once it is the first) gives for it: the search
    for attempts due does not miss it because `(d + 45) - 45` rounds below `d`."""
    d = Run(pipeline_with([{"timeout": 5, "grace": 0, "start_timeout": 45, "retries": 1}] * 2))
    d.start()
    d.advance_to_wake()  # both attempts not started time out at 45 and wait for a retry
    d.advance_to_wake()  # w1's retry is due first (its backoff has jitter): dispatched again
    task = d.state.tasks["w1@1"]
    assert task.status is TaskStatus.DISPATCHED and task.dispatched_at % 1 != 0
    due = d.state.earliest_deadline(lambda t: task_deadline(d.pipeline, t), 5, 45)
    assert due == task.dispatched_at + 45 and due > d.now
    assert due - 45 < task.dispatched_at  # what made a search by `now - 45` miss it
    assert timeouts_at(d, math.nextafter(due, -math.inf)) == set()
    assert timeouts_at(d, due) == {"w1@1"}


def test_a_started_attempt_times_out_at_its_deadline_rounded_twice() -> None:
    """`started + timeout + grace` rounds twice, and may come out below `started + 35`
    (the shortest timeout + grace): at the time `next_wake` names, the attempt times out."""
    started = 1.6862537721634152
    d = Run(pipeline_with([{"timeout": 30, "grace": 5, "retries": 0}]))
    d.start()
    d.advance(started)
    d.begin("w0@1")
    due = next_wake(d.pipeline, d.state)
    assert due == started + 30 + 5 < started + 35  # so a search by `now - 35` missed it
    assert due - 35 < started
    assert timeouts_at(d, math.nextafter(due, -math.inf)) == set()
    assert timeouts_at(d, due) == {"w0@1"}


@pytest.mark.parametrize("spread", [0.0, 1.0])
def test_with_one_timeout_for_all_the_walk_looks_at_the_earliest_attempt_alone(
    spread: float,
) -> None:
    """24 attempts started in order (or at one instant), all with the same limit: the
    earliest deadline is found by computing one deadline, not 24 (a phase of 10,000
    workers asks this on every decision)."""
    steps = [("dispatch", n % 24, 0.0) for n in range(24)]
    steps += [("start", n, spread) for n in range(24)]
    state = folded(steps)
    asked: list[str] = []

    def deadline(task: TaskState) -> float:
        asked.append(task.task_id)
        assert task.started_at is not None
        return task.started_at + 30.0

    assert state.earliest_deadline(deadline, 30.0, 60.0) == spread + 30.0
    assert asked == ["w0@1"]


def test_a_held_retry_does_not_make_the_next_wake_a_time_already_past() -> None:
    """w02's retry is due at 4.69 s, but w00 failed for good while w01 runs: nothing is
    dispatched at 5 s, and the next wake-up must then be later than now (or none)."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "p0",
                        "workers": [
                            worker("w00"),
                            worker("w01"),
                            worker("w02", retries=1, backoff={"initial": 4, "max": 8}),
                        ],
                    },
                    {"id": "p1", "workers": [worker("w1", final=True)]},
                ]
            }
        )
    )
    d.start()
    assert [m.rule for m in d.fail("w02@1")] == [RuleName.RETRY]
    d.advance(2)
    d.begin("w01@1")
    assert d.fail("w00@1") == []  # no retries left: the phase waits for w01 to end
    assert d.advance(3) == []  # the retry, due at 4.69, is held
    wake = next_wake(d.pipeline, d.state)
    assert wake is None or wake > d.now, (wake, d.now)
    assert wake == 2 + 600 + 120  # w01's deadline: it still times out while the run fails
    assert [m.rule for m in d.complete("w01@1")] == [RuleName.GIVE_UP]
