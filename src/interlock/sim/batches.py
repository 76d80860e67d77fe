"""Batches under the simulator: the real `BatchRunner` turns over a `MemoryStore`, killed at
random instants and resumed by another driver, one seed deciding everything.

A driver is the real runner (its `_turn`, as `interlock batch` calls it) on an `Interlock`
whose orchestrator is a small stand-in (`_Runs`): it makes the rows' runs in the memory
store, under the ids the runner gives, and takes nothing else. The world between turns ends
runs at random (delivered, failed, with a random cost), cancels the batch, gives failed rows
their next try (`batch retry --failed`) and raises the budget, as a person would; a seed's
batch may tolerate some failed rows (`--tolerate`, a count or a percentage). A crash is
an exception thrown before or after any call the runner makes to the ledger or to the runs,
so that every instant between two effects is a place to die; the next driver waits out the
dead one's lease, as a process on another host would.

The checks (`_Check`) read the rows and the run histories alone, and share no code with the
engine: no row has two runs of one try, every try has at most one run, no row is lost (at
the end each is delivered, failed by its run, cancelled, or unstarted under the budget), no
run is made once the batch is cancelled, none once the spend reached the budget, none once
more rows failed than the batch tolerates (and then the batch says it failed, naming them),
a row that was delivered stays delivered through everything after, and no more rows are in
flight than `--concurrency` plus `--batch-waiting` (the world parks runs in flight at random,
as runs waiting only for provider-batch answers, which leave room for more rows).
"""

from __future__ import annotations

import functools
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from interlock.core.batches import RowInputs, RowStatus, fold
from interlock.core.events import Delivered, RunCancelled, RunFailed, TaskBatchWaited
from interlock.core.loader import parse_workflow
from interlock.errors import InterlockError, LeaseHeld, StorageError
from interlock.storage.base import AppendBatch, NewEvent, RunSummary
from interlock.storage.batches import BatchLedger, batch_ledger
from interlock.testing import MemoryStore
from interlock.workloads.batches import BATCH_TTL, BatchRunner, record_batch

WORKFLOW = """\
rows:
  phases:
    - id: work
      workers:
        - {role: w, final: true, command: [sh, -c, 'true']}
"""
ENDED = ("delivered", "failed", "cancelled")
BATCH = "sim"


@functools.cache
def _definition() -> Any:
    """The batch's one-worker pipeline (parsed once: it is the same for every seed)."""
    return parse_workflow(WORKFLOW).get("rows")


class SimCrash(Exception):
    """The driver's process died here."""


@dataclass
class _Fate:
    """When the driver dies: at its `at`-th call, before the call's effect or after it."""

    at: int
    after: bool
    calls: int = 0

    def around(self, call: Callable[[], Any]) -> Any:
        self.calls += 1
        if self.calls == self.at and not self.after:
            raise SimCrash
        result = call()
        if self.calls == self.at:
            raise SimCrash
        return result


class _DyingLedger:
    """The batch ledger, with every call a place the driver may die."""

    def __init__(self, ledger: BatchLedger, fate: _Fate) -> None:
        self._ledger, self._fate = ledger, fate

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._ledger, name)
        return lambda *a, **k: self._fate.around(lambda: method(*a, **k))


class _Driven:
    """A run this driver took: as an orchestrator's driver of it, with no calls waiting."""

    spend_waits: dict[str, Any] = {}  # none: read, never written


class _Runs:
    """The orchestrator a driver sees: it makes runs in the memory store (one commit for
    all of a call's, as `create_runs` does) and drives nothing itself."""

    def __init__(self, store: MemoryStore, owner: str, fate: _Fate, made: list[str]) -> None:
        self.store, self.owner, self.fate, self.made = store, owner, fate, made
        self.drivers: dict[str, object] = {}
        self.pinned: Any = _definition()
        self.listeners: list[Callable[..., None]] = []
        self.models = None  # no model configuration: its runs record none (`run_config`)

    def create_runs(self, specs: list[Any], *, origin: Any = None) -> list[str]:
        def make() -> list[str]:
            ids = [run_id for _, _, _, run_id in specs]
            for run_id in ids:  # one transaction: all of them or none
                if run_id in self.store._runs:
                    raise StorageError(f"run {run_id} already exists")
            for definition, topic, _, run_id in specs:
                self.store.create_run(
                    run_id=run_id,
                    pipeline=definition.name,
                    topic=topic,
                    definition_hash=definition.hash,
                    definition=definition.canonical,
                    source="<sim>",
                    created_at=0.0,
                )
                self.made.append(run_id)
            return ids

        made: list[str] = self.fate.around(make)
        return made

    def definition(self, pipeline: str, definition_hash: str) -> Any:
        return self.pinned

    def take(self, run_id: str) -> None:
        self.fate.around(lambda: self.drivers.setdefault(run_id, _Driven()))

    def wake(self) -> None:
        """Nothing to wake: the world moves the runs."""


class _App:
    """What the runner asks of an `Interlock`: the store, the orchestrator, the pinned
    definition, and the states of ended runs (the world's)."""

    def __init__(self, home: Path, *, store: MemoryStore) -> None:
        self.home, self.store = home, store
        self.world: _World
        self.orchestrator: Any = None

    def definition_of(self, pipeline: str, definition_hash: str) -> Any:
        return _definition()

    def state(self, run_id: str) -> Any:
        return self.world.state(run_id)

    def cancel(self, run_id: str, reason: str = "") -> str:
        """As `Interlock.cancel`: the run ends cancelled at the world's next step."""
        self.world.cancels.add(run_id)
        return run_id


@dataclass
class _World:
    """The runs' outcomes, the clock, and what the checks saw happen."""

    store: MemoryStore
    rng: random.Random
    now: float = 1_000.0
    ended: dict[str, tuple[str, float]] = field(default_factory=dict)  # run -> status, cost
    made: list[str] = field(default_factory=list)  # every run made, in order
    cancelled_at: int | None = None  # len(made) when the batch was cancelled
    cancels: set[str] = field(default_factory=set)  # runs asked to cancel
    notes: list[str] = field(default_factory=list)

    def state(self, run_id: str) -> Any:
        status, _ = self.ended[run_id]
        return SimpleNamespace(
            status=SimpleNamespace(ended=True, value=status),
            values={"w": {"ok": status == "delivered"}},
            delivered="done" if status == "delivered" else None,
            failure="boom" if status == "failed" else None,
            updated_at=self.now,
            created_at=self.now,
            tasks={},
        )

    def end_some(self, cancelling: bool) -> list[str]:
        """End a random share of the runs in flight; returns those ended."""
        done = []
        for run_id in sorted(self.store._runs):
            asked = run_id in self.cancels
            if run_id in self.ended or (self.rng.random() > 0.6 and not asked):
                continue
            status = (
                "cancelled"
                if cancelling or asked
                else self.rng.choice(["delivered"] * 3 + ["failed"])
            )
            cost = round(self.rng.choice([0.0, 0.5, 1.0, 2.5]), 2)
            lease = self.store.acquire_lease(run_id, "world", 60.0, self.now, take_over_from="?")
            event = {
                "delivered": Delivered(at=self.now, task_id="w", artifact="0" * 64),
                "failed": RunFailed(at=self.now, reason="boom"),
                "cancelled": RunCancelled(at=self.now, reason="batch cancelled"),
            }[status]
            summary = RunSummary(status=status, phase=None, cost_usd=cost, updated_at=self.now)
            self.store.append(
                AppendBatch(lease=lease, events=[NewEvent(event=event)], summary=summary), self.now
            )
            self.store.release_lease(lease)
            self.ended[run_id] = (status, cost)
            done.append(run_id)
        return done

    def park_some(self) -> None:
        """A random share of the runs in flight go to wait only for provider-batch answers
        (their summary says so, as a driver's does), or come back from that wait."""
        for run_id in sorted(self.store._runs):
            if run_id in self.ended or self.rng.random() > 0.3:
                continue
            parked = self.rng.random() < 0.6
            lease = self.store.acquire_lease(run_id, "world", 60.0, self.now, take_over_from="?")
            event = TaskBatchWaited(at=self.now, task_id="w", attempt=1, waiting=parked)
            summary = RunSummary(
                status="running", phase=None, updated_at=self.now, batch_parked=parked
            )
            self.store.append(
                AppendBatch(lease=lease, events=[NewEvent(event=event)], summary=summary), self.now
            )
            self.store.release_lease(lease)


@dataclass(frozen=True, kw_only=True)
class BatchSimResult:
    """One seed's batch: its violations (none: every check held) and what happened."""

    seed: int
    violations: list[str]
    crashes: int
    drivers: int
    counts: dict[str, int]
    beyond_concurrency: bool = False  # rows waiting in a provider batch let more rows start


def simulate_batch(seed: int, home: Path | None = None) -> BatchSimResult:
    """Play one seed: a batch of 1-8 rows driven to its end through random crashes."""
    return _play(seed, random.Random(seed), home or _scratch())


@functools.cache
def _scratch() -> Path:
    """A state directory for the seeds of this process (the memory store keeps the rest)."""
    return Path(tempfile.mkdtemp(prefix="il-simb-"))


def _play(seed: int, rng: random.Random, home: Path) -> BatchSimResult:
    store = MemoryStore()
    world = _World(store=store, rng=rng)
    definition = _definition()
    rows = [RowInputs(number=n, topic=f"t{n}", inputs={}) for n in range(1, rng.randint(2, 9))]
    budget = rng.choice([None, None, 1.0, 3.0])
    tolerate = rng.choice([None, None, None, 0, 1, 2, "25%", "50%"])
    setup = _App(home, store=store)
    setup.world = world
    record_batch(
        setup,  # type: ignore[arg-type]
        definition,
        rows,
        batch_id=BATCH,
        inputs_file="sim",
        concurrency=rng.randint(1, 4),
        max_cost_usd=budget,
        now=world.now,
        tolerate=tolerate,
        batch_waiting=rng.choice([0, 0, 1, 2, 5]),
    )
    ledger = batch_ledger(store)
    check = _Check(ledger, world, budget, tolerate, len(rows))
    crashes = drivers = 0
    retries = 0
    for step in range(400):
        calm = step >= 300  # at the end no more crashes: the batch must settle
        drivers += 1
        fate = _Fate(at=rng.randint(1, 40) if not calm else 10**9, after=rng.random() < 0.5)
        app = _App(home, store=store)
        app.world = world
        runs = _Runs(store, f"sim-driver-{drivers}", fate, world.made)
        app.orchestrator = runs
        try:
            runner = BatchRunner(app, BATCH, clock=lambda: world.now)  # type: ignore[arg-type]
            runner.ledger = _DyingLedger(runner.ledger, fate)
            runs.listeners.append(runner._on_event)
            runner.hold()
            while True:
                check.before_turn()
                snapshot = runner._turn()
                check.after_turn()
                if snapshot.progress.settled:
                    check.settled(snapshot.progress)
                    break
                world.now += rng.choice([0.1, 1.0, 5.0])
                cancelling = world.cancelled_at is not None
                for run_id in world.end_some(cancelling):
                    for listener in runs.listeners:
                        listener(run_id, 0, None, world.state(run_id))
                world.park_some()
                if world.cancelled_at is None and rng.random() < 0.01:
                    ledger.cancel_batch(BATCH, world.now)
                    world.cancelled_at = len(world.made)
            ledger.release_batch(BATCH, runs.owner)
        except SimCrash:
            crashes += 1
            world.now += BATCH_TTL + 1  # the dead driver's lease runs out
            if world.cancelled_at is None and rng.random() < 0.05:  # `batch cancel`, no driver
                ledger.cancel_batch(BATCH, world.now)
                world.cancelled_at = len(world.made)
            continue
        except LeaseHeld:  # a dead driver's lease: wait it out
            world.now += BATCH_TTL + 1
            continue
        except InterlockError as exc:
            check.violation(f"the driver stopped: {exc.message}")
            break
        # Settled: a person may give the failed rows another try, or raise the budget.
        if world.cancelled_at is None and not calm and retries < 2 and rng.random() < 0.5:
            failing = [r.view for r in ledger.rows(BATCH) if r.view.status is RowStatus.FAILED]
            if failing:
                retries += 1
                check.retried(ledger.retry_rows(BATCH, failing), failing)
                continue
        if budget is not None and not calm and rng.random() < 0.3:
            budget += 2.0
            record = ledger.get_batch(BATCH)
            ledger.set_limits(BATCH, record.concurrency, budget, record.batch_waiting)
            check.budget = budget
            continue
        break
    else:
        check.violation("the batch did not settle in 400 drives")
    check.at_end()
    progress = fold(ledger.views(BATCH), max_cost_usd=check.budget, tolerate=tolerate)
    counts = {status.value: n for status, n in sorted(progress.counts.items())}
    return BatchSimResult(
        seed=seed,
        violations=check.problems,
        crashes=crashes,
        drivers=drivers,
        counts=counts,
        beyond_concurrency=check.beyond,
    )


class _Check:
    """The invariants, from the rows (state, try, run id, spend kept) and the histories."""

    def __init__(
        self,
        ledger: BatchLedger,
        world: _World,
        budget: float | None,
        tolerate: int | str | None,
        rows: int,
    ) -> None:
        self.ledger, self.world, self.budget = ledger, world, budget
        # Rows that may fail before no more start, reckoned here (None: no limit).
        if tolerate is None:
            self.allowed: int | None = None
        elif isinstance(tolerate, int):
            self.allowed = tolerate
        else:
            self.allowed = int(tolerate.removesuffix("%")) * rows // 100
        self.breached = False  # more rows had failed than allowed when the turn began
        self.problems: list[str] = []
        self.delivered: dict[int, str] = {}  # row -> the run that delivered it
        self.seen_made = 0
        self.unstarted: set[int] = set()
        self.spend = 0.0
        self.beyond = False  # more rows than --concurrency flew, some waiting in a provider batch

    def violation(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def _rows(self) -> list[Any]:
        return self.ledger.rows(BATCH)

    def _spend(self, rows: list[Any] | None = None) -> float:
        """Every try's cost, as the rows keep it."""
        return float(sum(row.view.cost_usd for row in rows or self._rows()))

    def before_turn(self) -> None:
        """What the turn starts from: the rows not started, and the spend."""
        rows = self._rows()
        self.unstarted = {r.view.number for r in rows if r.view.run_id is None}
        self.spend = self._spend(rows)
        self.breached = self._failed(rows) > (self.allowed if self.allowed is not None else 10**9)

    def _failed(self, rows: list[Any]) -> int:
        """Rows whose current try failed for good: its run failed, or was never made."""
        ended = self.world.ended
        return sum(
            1
            for row in rows
            if row.view.state.value == "refused"
            or ended.get(row.view.run_id or "", ("",))[0] == "failed"
        )

    def settled(self, progress: Any) -> None:
        """The batch says it failed exactly when more rows failed than it tolerates, and
        names every failed row."""
        rows = self._rows()
        failed = sorted(
            row.view.number
            for row in rows
            if row.view.state.value == "refused"
            or self.world.ended.get(row.view.run_id or "", ("",))[0] == "failed"
        )
        past = self.allowed is not None and len(failed) > self.allowed
        if past != (progress.breach is not None):
            self.violation(
                f"{len(failed)} rows failed (allowed {self.allowed}), but the batch says "
                f"{'it failed' if progress.breach is not None else 'nothing of it'}"
            )
        elif past and sorted(progress.breach.failed) != failed:
            self.violation(f"the batch names failed rows {progress.breach.failed}, not {failed}")

    def after_turn(self) -> None:
        rows = self._rows()
        if self.budget is not None and self.spend >= self.budget - 1e-9:
            for row in rows:
                if row.view.number in self.unstarted and row.view.run_id is not None:
                    self.violation(
                        f"row {row.view.number} started with the spend ${self.spend:g} at "
                        f"the budget ${self.budget:g}"
                    )
        if self.breached:
            for row in rows:
                if row.view.number in self.unstarted and row.view.run_id is not None:
                    self.violation(
                        f"row {row.view.number} started with more rows failed than the "
                        f"batch tolerates ({self.allowed})"
                    )
        world = self.world
        made = world.made
        if len(made) != len(set(made)):
            self.violation(f"a run was made twice: {sorted(r for r in made if made.count(r) > 1)}")
        for run_id in made[self.seen_made :]:  # only a row claimed before, and stopped
            if world.cancelled_at is not None and run_id not in world.cancels:
                self.violation(f"run {run_id} made after the batch was cancelled")
        self.seen_made = len(made)
        live: dict[int, list[str]] = {}
        for run_id in world.store._runs:
            row, _, attempt = run_id.removeprefix(f"{BATCH}-r").partition("-t")
            if run_id not in world.ended:
                live.setdefault(int(row), []).append(attempt or "1")
        for row, tries in live.items():
            if len(tries) > 1:
                self.violation(f"row {row} has {len(tries)} runs in flight: tries {tries}")
        # Rows waiting only for provider-batch answers leave room, up to --batch-waiting: no
        # more than --concurrency + --batch-waiting rows are ever in flight.
        record = self.ledger.get_batch(BATCH)
        flying = [
            row.view.number
            for row in rows
            if row.view.state.value == "started" and row.view.run_id not in world.ended
        ]
        self.beyond = self.beyond or len(flying) > record.concurrency
        if len(flying) > record.concurrency + record.batch_waiting:
            self.violation(
                f"rows {flying} in flight, past --concurrency {record.concurrency} + "
                f"--batch-waiting {record.batch_waiting}"
            )
        for row in rows:
            view = row.view
            kinds = [e.kind for e in world.store.events(view.run_id)] if view.run_id else []
            if sum(k in ("delivered", "run_failed", "run_cancelled") for k in kinds) > 1:
                self.violation(f"run {view.run_id} ended twice: {kinds}")
            was = self.delivered.get(view.number)
            if was is not None and (view.run_id != was or view.run_status != "delivered"):
                self.violation(f"row {view.number}, delivered by {was}, is now {view.run_id}")
            if view.run_status == "delivered" and view.run_id is not None:
                self.delivered[view.number] = view.run_id

    def retried(self, given: int, failing: list[Any]) -> None:
        if given != len(failing):
            self.violation(f"retry gave {given} of {len(failing)} failed rows a new try")
        for view in failing:
            row = next(r for r in self._rows() if r.view.number == view.number)
            if row.view.tries != view.tries + 1 or row.view.run_id is not None:
                self.violation(f"row {view.number} retried to {row.view}")
            if abs(row.view.cost_usd - view.cost_usd) > 1e-9:
                self.violation(f"row {view.number}: the spend of its tries before was lost")

    def at_end(self) -> None:
        world = self.world
        rows = self._rows()
        spend = self._spend()
        for row in rows:
            view = row.view
            status = world.ended.get(view.run_id or "", ("", 0.0))[0]
            if view.run_id is not None and view.run_id not in world.store._runs:
                self.violation(f"row {view.number}: its run {view.run_id} was never made")
            elif view.run_id is not None and not status:
                self.violation(f"row {view.number}: its run {view.run_id} never ended")
            elif view.run_id is None:
                budget_reached = self.budget is not None and spend >= self.budget - 1e-9
                past = self.allowed is not None and self._failed(rows) > self.allowed
                if world.cancelled_at is None and not budget_reached and not past:
                    self.violation(f"row {view.number} lost: never started, nothing holds it")
                if view.state.value == "cancelled" and world.cancelled_at is None:
                    self.violation(f"row {view.number} cancelled, but no one cancelled")
            if status == "failed" and view.status.value != "failed":
                self.violation(f"row {view.number}: its run failed, the row says {view.status}")
            if status == "delivered" and view.status.value != "delivered":
                self.violation(f"row {view.number}: delivered, the row says {view.status}")
        for run_id in world.store._runs:
            row = run_id.removeprefix(f"{BATCH}-r").partition("-t")[0]
            if not row.isdigit() or int(row) not in {r.view.number for r in rows}:
                self.violation(f"run {run_id} belongs to no row")
