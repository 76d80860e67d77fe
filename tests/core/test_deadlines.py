"""Two deadlines per attempt: `timeout + grace` from its start, `start_timeout` from its dispatch.

An attempt waiting for a free slot or worker has not started: its run timeout does not count
yet. Only a dispatch that never started by `start_timeout` (lost on the way, a fleet gone) is
timed out, as a retryable timeout whose detail says which deadline passed.
"""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName as R
from interlock.core.decide import next_wake
from interlock.core.loader import build_workflow, canonical_json
from interlock.core.state import TaskStatus
from interlock.core.workflow import DEFAULT_START_TIMEOUT_S
from interlock.errors import WorkflowError

from .runs import Run, pipeline_of, worker


def run_of(*workers: dict[str, Any]) -> Run:
    """A started run of one parallel phase of these workers (the last one is final)."""
    *rest, last = workers
    phase = {"id": "a", "workers": [*rest, {**last, "final": True}]}
    d = Run(pipeline_of({"phases": [phase]}))
    d.start()
    return d


def test_an_attempt_waiting_to_start_outlives_its_run_timeout() -> None:
    """A dispatched attempt that has not started is not timed out at timeout + grace."""
    d = run_of(worker("w", timeout=10, grace=5))
    assert d.advance(10_000) == []
    assert d.state.tasks["w@1"].status is TaskStatus.DISPATCHED


def test_a_late_start_gets_the_whole_timeout() -> None:
    """An attempt that waited an hour for a slot has its full timeout + grace from its start."""
    d = run_of(worker("w", timeout=10, grace=5))
    d.advance(3600)
    assert d.begin("w@1") == []
    assert next_wake(d.pipeline, d.state) == 3615
    assert d.advance(14.9) == []
    assert [x.rule for x in d.advance(0.1)] == [R.TIMEOUT, R.GIVE_UP]


def test_a_dispatch_never_started_times_out_at_start_timeout_and_is_retried() -> None:
    """Past `start_timeout` without a start, the attempt times out (saying so) and, being a
    retryable timeout, is dispatched again after its backoff."""
    d = run_of(worker("w", timeout=10, start_timeout="1h", retries=1, backoff={"jitter": 0}))
    assert next_wake(d.pipeline, d.state) == 3600
    assert d.advance(3599.9) == []
    made = d.advance(0.1)
    assert [x.rule for x in made] == [R.TIMEOUT, R.RETRY]
    timed_out = made[0].event
    assert isinstance(timed_out, ev.TaskTimedOut)
    assert timed_out.detail == "not started within start_timeout (3600s)"
    assert made[0].why == "task w@1 attempt 1 was not started in time"
    assert [x.rule for x in d.advance_to_wake()] == [R.RETRY_DUE]
    assert d.attempt("w@1") == 2
    assert [x.rule for x in d.complete("w@1")] == [R.PHASE_DONE, R.DELIVER, R.ARCHIVE]


def test_a_started_attempt_times_out_saying_it_gave_no_result() -> None:
    """The timeout of a started attempt names timeout + grace, not the start deadline."""
    d = run_of(worker("w", timeout=10, grace=5, start_timeout=20))
    d.begin("w@1")
    made = d.advance(15)
    assert [x.rule for x in made] == [R.TIMEOUT, R.GIVE_UP]
    assert isinstance(made[0].event, ev.TaskTimedOut)
    assert made[0].event.detail == "no result within timeout + grace (15s)"


def test_the_default_start_timeout_is_a_day() -> None:
    """Without `start_timeout`, a dispatch may wait a day to start."""
    d = run_of(worker("w"))
    assert DEFAULT_START_TIMEOUT_S == 86400
    assert next_wake(d.pipeline, d.state) == 86400
    assert d.advance(86399) == []
    assert [x.rule for x in d.advance(1)] == [R.TIMEOUT, R.GIVE_UP]


def test_next_wake_takes_whichever_deadline_comes_first() -> None:
    """With one attempt running and one waiting to start, the engine wakes at the earlier of
    the running one's timeout and the waiting one's start deadline."""
    d = run_of(worker("a", timeout=100, grace=0), worker("b", start_timeout=50))
    d.begin("a@1")
    assert next_wake(d.pipeline, d.state) == 50  # b's start deadline
    d.begin("b@1")
    assert next_wake(d.pipeline, d.state) == 100  # a's timeout; b now has 600 + 120
    d.complete("a@1")
    assert next_wake(d.pipeline, d.state) == 720


def test_many_attempts_waiting_each_time_out_at_their_own_start_deadline() -> None:
    """Of attempts dispatched at different times, only those past their start deadline are
    timed out; a started one dispatched earliest is not."""

    def wide(role: str) -> dict[str, Any]:
        return worker(role, start_timeout=100, retries=1)

    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "a",
                        "mode": "sequential",
                        "workers": [worker("x", start_timeout=100, timeout=1000)],
                    },
                    {"id": "b", "workers": [wide(f"y{i}") for i in range(3)]},
                    {"id": "c", "workers": [worker("z", final=True)]},
                ]
            }
        )
    )
    d.start()
    d.begin("x@1")
    d.advance(50)
    d.complete("x@1")  # phase b dispatched at 50
    d.advance(10)
    d.begin("y0@1")
    made = d.advance(90)  # 150: y1 and y2 waited 100 s, y0 started at 60
    assert [(x.rule, getattr(x.event, "task_id", None)) for x in made[:2]] == [
        (R.TIMEOUT, "y1@1"),
        (R.TIMEOUT, "y2@1"),
    ]
    assert d.state.tasks["y0@1"].status is TaskStatus.RUNNING


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "must be greater than 0"),
        (-1, "must be greater than 0"),
        ("2 fortnights", "start_timeout '2 fortnights' must be seconds or a duration like 30s"),
        ("30d", "must be less than or equal to 604800"),
    ],
)
def test_bad_start_timeouts_are_refused_naming_the_place(value: Any, expected: str) -> None:
    """A start_timeout must be a positive duration of at most a week; the message names the
    pipeline, phase, worker and key."""
    data: dict[str, Any] = {"p": {"phases": [{"id": "a", "workers": [worker("w", final=True)]}]}}
    data["p"]["phases"][0]["workers"][0]["start_timeout"] = value
    with pytest.raises(WorkflowError) as raised:
        build_workflow(data)
    message = str(raised.value)
    assert "pipeline 'p', phase 'a', worker 'w', key 'start_timeout'" in message, message
    assert expected in message, message


def test_start_timeout_reads_durations_and_leaves_other_definitions_unchanged() -> None:
    """`start_timeout: 2h` is 7200 s; a worker without it keeps its canonical form (and so
    every existing definition its hash)."""
    data: dict[str, Any] = {"phases": [{"id": "a", "workers": [worker("w", final=True)]}]}
    plain = build_workflow({"p": data}).get("p")
    assert "start_timeout" not in canonical_json(plain.pipeline)
    data["phases"][0]["workers"][0]["start_timeout"] = "2h"
    timed = build_workflow({"p": data}).get("p").pipeline
    assert timed.worker("w").start_timeout == 7200
    assert timed.shortest_start == 7200


def test_a_pipeline_task_has_no_deadline_started_or_not() -> None:
    """A worker that runs a child pipeline gives its task no deadline, whatever limits it
    sets: the child's own workers have theirs, and a child may wait for a person for days
    (README, sub-pipelines). Not started, it outlives `start_timeout`; started, it outlives
    `timeout + grace`; the model worker beside it still times out at its own deadline."""
    child = {"phases": [{"id": "c", "workers": [worker("cw", final=True)]}]}
    sub = {"role": "sub", "pipeline": "child", "timeout": 10, "grace": 0, "start_timeout": 20}
    phase = {"id": "a", "workers": [sub, worker("w", timeout=30, grace=0, final=True)]}
    d = Run(build_workflow({"parent": {"phases": [phase]}, "child": child}).get("parent").pipeline)
    d.start()
    d.begin("w@1")
    assert next_wake(d.pipeline, d.state) == 30  # w's timeout, not sub's start_timeout (20)
    assert d.advance(25) == []
    d.complete("w@1")
    assert next_wake(d.pipeline, d.state) is None  # sub alone, not started: nothing is due
    d.begin("sub@1")
    assert next_wake(d.pipeline, d.state) is None  # started: no timeout + grace (it'd be 35)
    assert d.advance(10 * 24 * 3600) == []
    assert d.state.tasks["sub@1"].status is TaskStatus.RUNNING
    assert [x.rule for x in d.complete("sub@1")] == [R.PHASE_DONE, R.DELIVER, R.ARCHIVE]


def test_a_pipeline_task_does_not_hide_a_model_workers_deadline() -> None:
    """With a pipeline task started first, the timeout of a model worker started later is
    still found and fires at its time (the walk goes past the task with no deadline)."""
    child = {"phases": [{"id": "c", "workers": [worker("cw", final=True)]}]}
    sub = {"role": "sub", "pipeline": "child"}
    phase = {"id": "a", "workers": [sub, worker("w", timeout=30, grace=5, final=True)]}
    d = Run(build_workflow({"parent": {"phases": [phase]}, "child": child}).get("parent").pipeline)
    d.start()
    d.begin("sub@1")
    d.advance(7.25)
    d.begin("w@1")
    assert next_wake(d.pipeline, d.state) == 42.25
    made = d.advance_to_wake()
    # No retry left: the run fails without waiting for the child (cancelled with it).
    assert [x.rule for x in made] == [R.TIMEOUT, R.GIVE_UP]
    assert made[0].event == ev.TaskTimedOut(
        at=42.25, task_id="w@1", attempt=1, detail="no result within timeout + grace (35s)"
    )
