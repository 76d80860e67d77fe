"""A run that only waits for provider-batch answers, and the batch rows it leaves room for:
folded from the run's history (so a restart reads the same), and counted against
`--concurrency` only past the batch's `--batch-waiting`."""

from __future__ import annotations

from interlock.core import events as ev
from interlock.core.batches import Held, RowState, RowStatus, RowView, fold, next_starts
from interlock.core.state import batch_parked
from interlock.core.state import fold as fold_run
from interlock.engine import RunMachine
from interlock.engine import inputs as obs

from .runs import pipeline_of, worker

PIPELINE = pipeline_of({"phases": [{"id": "p", "workers": [worker("a"), worker("b", final=True)]}]})


def test_a_run_is_parked_only_while_every_task_in_flight_waits_in_a_provider_batch() -> None:
    """Two tasks in flight: parked once both wait in a provider batch, not while one works,
    not once an answer is back, not after a start again (another process took the run up);
    the run's history folded afresh says the same at each step."""
    machine = RunMachine(PIPELINE)
    created = ev.RunCreated(at=0.0, run_id="r", pipeline="p", definition_hash="0" * 64,
                            topic="t", inputs={})  # fmt: skip
    state = fold_run([created])
    history: list[ev.Event] = [created]

    def step(*events: ev.TaskStarted | ev.TaskBatchWaited) -> bool:
        inputs: list[obs.Input] = [
            obs.BatchWait(event=e) if isinstance(e, ev.TaskBatchWaited) else obs.Reported(event=e)
            for e in events
        ]
        done = machine.step(state, inputs or [obs.Tick()], events[0].at if events else 0.0)
        history.extend(r.event for r in done.events)
        assert batch_parked(fold_run(history)) is batch_parked(state)
        return batch_parked(state)

    assert not step()  # both dispatched, not started
    assert sorted(state.flight) == ["a@1", "b@1"]
    assert not step(ev.TaskStarted(at=1.0, task_id="a@1", attempt=1),
                    ev.TaskStarted(at=1.0, task_id="b@1", attempt=1))  # fmt: skip
    assert not step(ev.TaskBatchWaited(at=2.0, task_id="a@1", attempt=1, waiting=True))
    assert step(ev.TaskBatchWaited(at=3.0, task_id="b@1", attempt=1, waiting=True))
    assert not step(ev.TaskBatchWaited(at=4.0, task_id="a@1", attempt=1, waiting=False))
    assert step(ev.TaskBatchWaited(at=5.0, task_id="a@1", attempt=1, waiting=True))
    assert not step(ev.TaskStarted(at=6.0, task_id="b@1", attempt=1, worker="other"))


def view(number: int, status: str | None, *, parked: bool = False) -> RowView:
    """Row `number`: waiting (status None) or started with its run `status`."""
    if status is None:
        return RowView(number=number, state=RowState.PENDING, tries=1)
    return RowView(number=number, state=RowState.STARTED, tries=1, run_id=f"b-r{number}",
                   run_status=status, parked=parked)  # fmt: skip


def test_rows_waiting_in_a_provider_batch_count_only_past_batch_waiting() -> None:
    """With --concurrency 2, three rows parked in a provider batch and one running: within
    --batch-waiting 3 only the running row counts (one row starts); with 2, one parked row
    counts too (none starts); with 0, every row in flight counts, as before."""
    views = [view(1, "running", parked=True), view(2, "running", parked=True),
             view(3, "running", parked=True), view(4, "running"), view(5, None),
             view(6, None)]  # fmt: skip
    progress = fold(views, max_cost_usd=None)
    assert (progress.running, progress.parked, progress.counts[RowStatus.BATCHED]) == (4, 3, 3)
    assert not progress.settled  # the parked rows are in flight

    def starts(waiting: int) -> tuple[tuple[int, ...], Held | None]:
        found = next_starts(views, concurrency=2, max_cost_usd=None, cancelled=False,
                            batch_waiting=waiting)  # fmt: skip
        return found.rows, found.held

    assert starts(3) == ((5,), Held.CONCURRENCY)
    assert starts(1000) == ((5,), Held.CONCURRENCY)
    assert starts(2) == ((), Held.CONCURRENCY)
    assert starts(0) == ((), Held.CONCURRENCY)
    # A run summary saying it is parked while the run is paused or ended is not a wait.
    assert view(7, "paused", parked=True).status is RowStatus.PAUSED
    assert view(8, "delivered", parked=True).status is RowStatus.DELIVERED
