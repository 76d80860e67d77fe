"""Every guarantee of `interlock.storage.batches`, checked on every backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from tests.storage.test_conformance import TTL, make_run, notes

from interlock.core.batches import RowState, RowStatus, fold
from interlock.errors import LeaseHeld
from interlock.storage.base import AppendBatch, Lease, RunSummary, Store
from interlock.storage.batches import BatchExists, BatchNotFound, NewBatch, batch_ledger

T0 = 1000.0


def new_batch(batch_id: str = "b1", *, at: float = T0) -> NewBatch:
    """A batch of pipeline `p` pinned to the definition `{}`."""
    return NewBatch(
        batch_id=batch_id,
        pipeline="p",
        definition_hash="h-{}",
        definition="{}",
        source="wf.yaml",
        inputs_file="data.csv",
        concurrency=2,
        max_cost_usd=None,
        created_at=at,
    )


ROWS = [(1, "one", {"lang": "fr"}), (2, "two", {"lang": "de"}), (3, "three", {})]


def finish(store: Store, run_id: str, status: str, cost: float, *, estimated: bool = False) -> None:
    """Register a run and record it ended with `cost` spent (`estimated`: its tokens were)."""
    make_run(store, run_id)
    lease = store.acquire_lease(run_id, "me", TTL, T0)
    summary = RunSummary(status=status, phase=None, cost_usd=cost, tokens=10, estimated=estimated)
    store.append(AppendBatch(lease=lease, events=notes("x"), summary=summary), T0)
    store.release_lease(Lease(run_id=run_id, owner="me", token=lease.token, expires_at=0))


def test_batch_and_rows_are_recorded_together(store: Store) -> None:
    """A batch is recorded with all its rows, in row order, each pending at its first try."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    record = ledger.get_batch("b1")
    assert (record.pipeline, record.rows, record.concurrency) == ("p", 3, 2)
    assert store.definition("h-{}") == "{}"
    rows = ledger.rows("b1")
    assert [(r.view.number, r.topic, r.inputs) for r in rows] == ROWS
    assert all(r.view.state is RowState.PENDING and r.view.tries == 1 for r in rows)
    assert [b.batch_id for b in ledger.list_batches()] == ["b1"]


def test_a_batch_id_is_taken_once(store: Store) -> None:
    """A second batch with the same id is refused and changes nothing."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    with pytest.raises(BatchExists, match="already exists"):
        ledger.create_batch(new_batch(at=T0 + 1), ROWS[:1])
    assert ledger.get_batch("b1").rows == 3
    with pytest.raises(BatchNotFound):
        ledger.get_batch("nope")


def test_a_rows_try_is_claimed_once(opener: Callable[[], Store]) -> None:
    """Of two processes claiming the same row's try, one gets it; a later try is claimable."""
    first, second = opener(), opener()
    batch_ledger(first).create_batch(new_batch(), ROWS)
    assert batch_ledger(first).claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0) == [1, 2]
    assert batch_ledger(second).claim_rows("b1", [(1, 1, "b1-r1"), (3, 1, "b1-r3")], T0) == [3]
    assert batch_ledger(second).claim_rows("b1", [(2, 2, "b1-r2-t2")], T0) == []
    views = [r.view for r in batch_ledger(second).rows("b1")]
    assert [(v.state, v.run_id) for v in views] == [
        (RowState.STARTED, f"b1-r{n}") for n in (1, 2, 3)
    ]
    # No run is made yet: each is "starting", which a resumed driver makes.
    assert {v.status for v in views} == {RowStatus.STARTING}


def test_rows_carry_their_runs_status_and_every_tries_spend(store: Store) -> None:
    """A row shows its run's status and cost; a retry keeps the failed try's spend."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    ledger.claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0)
    finish(store, "b1-r1", "delivered", 0.25)
    finish(store, "b1-r2", "failed", 0.5)
    views = [r.view for r in ledger.rows("b1")]
    assert [v.status for v in views] == [RowStatus.DELIVERED, RowStatus.FAILED, RowStatus.WAITING]
    assert ledger.retry_rows("b1", [views[1]]) == 1
    assert ledger.retry_rows("b1", [views[1]]) == 0  # the row moved on: left alone
    again = ledger.rows("b1")[1].view
    assert (again.state, again.tries, again.run_id, again.cost_usd) == (
        RowState.PENDING,
        2,
        None,
        0.5,
    )
    assert ledger.claim_rows("b1", [(2, 2, "b1-r2-t2")], T0) == [2]
    assert fold([r.view for r in ledger.rows("b1")], max_cost_usd=0.7).over_budget


def test_a_rows_estimated_cost_marks_the_batchs_spend_through_its_retries(store: Store) -> None:
    """A row whose run's tokens were estimated says so in its views, its rows and the fold;
    a retry keeps the mark with the failed try's spend, and other rows stay unmarked."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    ledger.claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0)
    finish(store, "b1-r1", "delivered", 0.25)
    assert not fold(ledger.views("b1"), max_cost_usd=None).estimated
    finish(store, "b1-r2", "failed", 0.5, estimated=True)
    assert [v.estimated for v in ledger.views("b1")] == [False, True, False]
    assert [r.view.estimated for r in ledger.rows("b1")] == [False, True, False]
    assert [v.estimated for v in ledger.views_of("b1", [2, 3])] == [True, False]
    assert fold(ledger.views("b1"), max_cost_usd=None).estimated
    assert ledger.retry_rows("b1", [ledger.views("b1")[1]]) == 1
    assert ledger.claim_rows("b1", [(2, 2, "b1-r2-t2")], T0) == [2]
    finish(store, "b1-r2-t2", "delivered", 0.125)
    again = ledger.views_of("b1", [2])[0]
    assert (again.tries, again.cost_usd, again.estimated) == (2, 0.625, True)


def test_results_refusals_and_cancellation(store: Store) -> None:
    """Results stick to the try they came from; cancelling marks only pending rows."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    ledger.claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0)
    ledger.set_results("b1", [(1, "b1-r1", {"values": {"score": 3}}), (2, "other", {"x": 1})])
    ledger.refuse_row("b1", 2, "b1-r2", "no key")
    assert ledger.cancel_batch("b1", T0 + 5) == 1
    rows = ledger.rows("b1")
    assert rows[0].result == {"values": {"score": 3}}
    assert (rows[1].result, rows[1].error, rows[1].view.status) == (None, "no key", "failed")
    assert rows[2].view.state is RowState.CANCELLED
    assert ledger.get_batch("b1").cancelled_at == T0 + 5
    assert ledger.get_batch("b1").batch_waiting == 1000  # the default
    ledger.set_limits("b1", 7, 1.5, 9)
    record = ledger.get_batch("b1")
    assert (record.concurrency, record.max_cost_usd, record.batch_waiting) == (7, 1.5, 9)


def test_a_row_whose_run_waits_only_in_a_provider_batch_says_so(store: Store) -> None:
    """A run's summary that says it only waits for provider-batch answers shows its row as
    `in provider batch` in every read of the rows, through each way an append writes the
    summary (a status or cost that changes, or not), until it says otherwise."""
    ledger = batch_ledger(store)
    ledger.create_batch(replace(new_batch(), batch_waiting=5), ROWS)
    assert ledger.get_batch("b1").batch_waiting == 5
    ledger.claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0)
    make_run(store, "b1-r1")
    make_run(store, "b1-r2")
    lease = store.acquire_lease("b1-r1", "me", TTL, T0)

    def append(parked: bool, cost: float) -> list[RowStatus]:
        summary = RunSummary(status="running", phase=None, cost_usd=cost, batch_parked=parked)
        store.append(AppendBatch(lease=lease, events=notes("x"), summary=summary), T0)
        assert store.get_run("b1-r1").summary.batch_parked is parked
        seen = [v.status for v in ledger.views("b1")]
        assert [r.view.status for r in ledger.rows("b1")] == seen
        assert [v.status for v in ledger.views_of("b1", [1, 2, 3])] == seen
        return seen

    parked = [RowStatus.BATCHED, RowStatus.RUNNING, RowStatus.WAITING]
    running = [RowStatus.RUNNING, RowStatus.RUNNING, RowStatus.WAITING]
    assert append(True, 0.0) == parked
    assert append(False, 0.0) == running  # status and cost as they were
    assert append(True, 0.1) == parked  # the cost moved
    assert fold(ledger.views("b1"), max_cost_usd=None).parked == 1


def test_one_driver_at_a_time(opener: Callable[[], Store]) -> None:
    """A batch's driver holds it until its lease runs out, hands it back, or is taken over."""
    first, second = batch_ledger(opener()), batch_ledger(opener())
    first.create_batch(new_batch(), ROWS)
    first.hold_batch("b1", "a", TTL, T0)
    first.hold_batch("b1", "a", TTL, T0 + 1)  # a renewal
    with pytest.raises(LeaseHeld, match="being driven by a"):
        second.hold_batch("b1", "b", TTL, T0 + 2)
    second.hold_batch("b1", "b", TTL, T0 + 2, take_over_from="a")  # a is known dead
    second.release_batch("b1", "a")  # no longer a's: nothing happens
    assert second.get_batch("b1").driver == "b"
    second.release_batch("b1", "b")
    first.hold_batch("b1", "a", TTL, T0 + 3)
    first.hold_batch("b1", "a", TTL, T0 + 3)
    second.hold_batch("b1", "b", TTL, T0 + 3 + TTL)  # a's lease ran out


def test_views_are_the_rows_without_their_data(store: Store) -> None:
    """`views` gives each row's view as `rows` does, and says which results are kept."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    ledger.claim_rows("b1", [(1, 1, "b1-r1")], T0)
    finish(store, "b1-r1", "delivered", 0.25)
    assert ledger.views("b1") == [r.view for r in ledger.rows("b1")]
    assert not ledger.views("b1")[0].kept
    ledger.set_results("b1", [(1, "b1-r1", {"values": {}})])
    assert [v.kept for v in ledger.views("b1")] == [True, False, False]
    assert ledger.views("b1") == [r.view for r in ledger.rows("b1")]


def test_views_of_some_rows_are_theirs_alone(store: Store) -> None:
    """`views_of` gives the views of the rows asked for, in row order, as `views` does;
    rows the batch lacks (or another batch's) are left out."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    ledger.create_batch(new_batch("b2"), ROWS[:1])
    ledger.claim_rows("b1", [(3, 1, "b1-r3")], T0)
    finish(store, "b1-r3", "failed", 0.5)
    whole = ledger.views("b1")
    assert ledger.views_of("b1", [3, 1, 9, 3]) == [whole[0], whole[2]]
    assert ledger.views_of("b1", []) == []
    assert ledger.views_of("b2", [1, 3]) == ledger.views("b2")
    assert ledger.views_of("b1", range(1, 2001)) == whole


def test_retries_and_cancels_count_a_change_of_the_batch(opener: Callable[[], Store]) -> None:
    """A retry that moved a row, and a cancel, count a change that another process sees;
    what a batch's driver does itself (claims, refusals, results, its lease) counts none."""
    ledger, other = batch_ledger(opener()), batch_ledger(opener())
    ledger.create_batch(new_batch(), ROWS)
    assert ledger.get_batch("b1").changes == 0
    ledger.hold_batch("b1", "a", TTL, T0)
    ledger.claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0)
    ledger.refuse_row("b1", 1, "b1-r1", "no key")
    ledger.set_results("b1", [(2, "b1-r2", {"values": {}})])
    ledger.set_limits("b1", 3, None, 0)
    assert other.get_batch("b1").changes == 0
    refused = ledger.views("b1")[0]
    assert other.retry_rows("b1", [refused]) == 1
    assert ledger.get_batch("b1").changes == 1
    assert other.retry_rows("b1", [refused]) == 0  # nothing moved: nothing counted
    assert ledger.get_batch("b1").changes == 1
    other.cancel_batch("b1", T0 + 1)
    assert ledger.get_batch("b1").changes == 2
    assert [b.changes for b in ledger.list_batches()] == [2]


def test_a_pruned_run_keeps_its_rows_status(store: Store) -> None:
    """A row whose run was pruned still shows how it ended (not as a run still to make)."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    ledger.claim_rows("b1", [(1, 1, "b1-r1")], T0)
    finish(store, "b1-r1", "delivered", 0.25)
    receipts, _ = store.prune_runs(["b1-r1"], T0 + 100)
    assert [r.run_id for r in receipts] == ["b1-r1"]
    assert ledger.views("b1")[0].status is RowStatus.DELIVERED
    assert ledger.rows("b1")[0].view.status is RowStatus.DELIVERED


def test_an_experiments_variants_are_recorded_with_the_same_rows_or_not_at_all(
    store: Store,
) -> None:
    """The base batch and its variants are one transaction: each holds every row, they are
    found by the experiment's id (the base first), and a taken variant id records none."""
    from dataclasses import replace

    ledger = batch_ledger(store)
    base = replace(new_batch("e"), experiment="e", variant="base")
    variants = [
        replace(new_batch("e-zz"), experiment="e", variant="zz", definition_hash="h-2"),
        replace(new_batch("e-aa"), experiment="e", variant="aa"),
    ]
    ledger.create_batch(base, ROWS, also=variants)
    found = ledger.experiment_batches("e")
    assert [(b.batch_id, b.variant, b.experiment) for b in found] == [
        ("e", "base", "e"),
        ("e-aa", "aa", "e"),
        ("e-zz", "zz", "e"),
    ]
    assert [r.topic for r in ledger.rows("e-zz")] == ["one", "two", "three"]
    assert ledger.get_batch("e-zz").definition_hash == "h-2"
    ledger.create_batch(new_batch("solo"), ROWS)
    assert ledger.get_batch("solo").experiment is None
    with pytest.raises(BatchExists, match="'solo' already exists"):
        ledger.create_batch(
            replace(new_batch("f"), experiment="f", variant="base"),
            ROWS,
            also=[replace(new_batch("solo"), experiment="f", variant="x")],
        )
    with pytest.raises(BatchNotFound):
        ledger.get_batch("f")
    assert ledger.experiment_batches("f") == []


def test_a_batchs_tolerance_is_kept_and_stops_it_past_that(opener: Callable[[], Store]) -> None:
    """A batch's `tolerate` (a count or a percentage, or none) is read back as given, by
    another connection too; past it the batch is failed and its waiting rows start no more."""
    from dataclasses import replace

    from interlock.core.batches import Held, next_starts

    store = opener()
    ledger = batch_ledger(store)
    ledger.create_batch(replace(new_batch("b1"), tolerate=1), ROWS)
    ledger.create_batch(replace(new_batch("b2"), tolerate="34.5%"), ROWS)
    ledger.create_batch(new_batch("b3"), ROWS)
    again = batch_ledger(opener())
    assert [again.get_batch(b).tolerate for b in ("b1", "b2", "b3")] == [1, "34.5%", None]
    assert [b.tolerate for b in again.list_batches()] == [None, "34.5%", 1]
    ledger.claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0)
    finish(store, "b1-r1", "failed", 0.0)
    record = again.get_batch("b1")
    views = again.views("b1")
    assert fold(views, max_cost_usd=None, tolerate=record.tolerate).breach is None  # 1 of 1
    finish(store, "b1-r2", "failed", 0.0)
    views = again.views("b1")
    progress = fold(views, max_cost_usd=None, tolerate=record.tolerate)
    assert progress.breach is not None
    assert progress.breach.reason == "2 of 3 rows failed, past tolerate 1; failed rows: 1, 2"
    assert progress.settled and progress.counts[RowStatus.STOPPED] == 1
    held = next_starts(views, concurrency=2, max_cost_usd=None, cancelled=False, tolerate=1)
    assert (held.rows, held.held) == ((), Held.FAILED)


def test_a_cancel_is_undone_rows_not_started_waiting_and_stopped_ones_on_their_next_try(
    store: Store,
) -> None:
    """`reopen_batch` takes the batch's cancel back in one step: a row cancelled before it
    started waits again at its try, a row whose run was cancelled gets its next try with its
    spend kept, a delivered row is left alone, and the batch's `changes` moves."""
    ledger = batch_ledger(store)
    ledger.create_batch(new_batch(), ROWS)
    ledger.claim_rows("b1", [(1, 1, "b1-r1"), (2, 1, "b1-r2")], T0)
    finish(store, "b1-r1", "delivered", 0.25)
    finish(store, "b1-r2", "cancelled", 0.5)
    assert ledger.cancel_batch("b1", T0) == 1
    before = ledger.get_batch("b1").changes
    stopped = ledger.views("b1")[1]
    assert ledger.reopen_batch("b1", [stopped]) == 2
    record = ledger.get_batch("b1")
    assert (record.cancelled_at, record.changes) == (None, before + 1)
    views = ledger.views("b1")
    assert [(v.state, v.tries) for v in views] == [
        (RowState.STARTED, 1),
        (RowState.PENDING, 2),
        (RowState.PENDING, 1),
    ]
    assert views[1].cost_usd == 0.5
