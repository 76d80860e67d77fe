"""An attempt whose model call waits in a provider batch has no timeout meanwhile: the
engine's deadline is `timeout + grace` of the attempt's own work, before and after the
wait, and a restart folds the same deadline from the ledger."""

from __future__ import annotations

from interlock.core import events as ev
from interlock.core.decide import next_wake
from interlock.core.state import RunState, fold
from interlock.engine import RunMachine
from interlock.engine import inputs as obs

from .runs import pipeline_of, worker

PIPELINE = pipeline_of(
    {"phases": [{"id": "p", "workers": [worker("w", final=True, timeout=10, grace=5)]}]}
)


def running() -> tuple[RunMachine, RunState]:
    """A run whose only attempt started at t=1."""
    machine = RunMachine(PIPELINE)
    state = fold([ev.RunCreated(at=0.0, run_id="r", pipeline="p", definition_hash="0" * 64,
                                topic="t", inputs={})])  # fmt: skip
    machine.step(state, [obs.Tick()], 0.0)
    started = ev.TaskStarted(at=1.0, task_id="w@1", attempt=1)
    machine.step(state, [obs.Reported(event=started)], 1.0)
    return machine, state


def waited(at: float, waiting: bool) -> obs.BatchWait:
    return obs.BatchWait(event=ev.TaskBatchWaited(at=at, task_id="w@1", attempt=1,
                                                  waiting=waiting))  # fmt: skip


def test_the_wait_in_a_provider_batch_counts_in_no_timeout() -> None:
    """Started at 1 (deadline 16), in a batch from 3 to 10 003: no timeout in between, and
    the deadline after it is 16 + 10 000."""
    machine, state = running()
    assert next_wake(PIPELINE, state) == 16.0
    step = machine.step(state, [waited(3.0, True)], 3.0)
    assert [r.event.kind for r in step.events] == ["task_batch_waited"]
    assert next_wake(PIPELINE, state) is None
    assert machine.step(state, [], 9_000.0).events == ()  # long past 16: no timeout
    machine.step(state, [waited(10_003.0, False)], 10_003.0)
    assert next_wake(PIPELINE, state) == 10_016.0
    assert machine.step(state, [], 10_015.0).events == ()
    [timed_out] = machine.step(state, [], 10_016.0).events[:1]
    assert isinstance(timed_out.event, ev.TaskTimedOut)


def test_a_repeated_or_stale_report_is_not_recorded_and_a_restart_starts_the_clock_anew() -> None:
    """The same report twice records one event; one for another attempt none; a start again
    (another process took the run up) has its timeout from that start."""
    machine, state = running()
    machine.step(state, [waited(3.0, True)], 3.0)
    assert machine.step(state, [waited(4.0, True)], 4.0).events == ()
    stale = ev.TaskBatchWaited(at=4.0, task_id="w@1", attempt=2, waiting=False)
    assert machine.step(state, [obs.BatchWait(event=stale)], 4.0).events == ()
    again = ev.TaskStarted(at=500.0, task_id="w@1", attempt=1, worker="other")
    machine.step(state, [obs.Reported(event=again)], 500.0)
    assert next_wake(PIPELINE, state) == 515.0
