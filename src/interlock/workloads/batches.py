"""Driving a batch: starting its rows' runs as room and budget allow, and watching them.

The batch and all its rows are recorded first (`record_batch`, one transaction). Then the
`BatchRunner` turns: it reads the rows with their runs' summaries (all of them once, then
those in flight: `batch_rows.RowMap`), asks the pure engine
(`interlock.core.batches.next_starts`) which rows start now, records their run ids on the
rows (`claim_rows`), and only then makes the runs, through the orchestrator's
`create_runs` under those ids. The orchestrator's own loop (`serve_forever`) drives them
meanwhile: the runner only runs while that loop sleeps, on the same event loop.

A row's run id is derived from the batch, the row and its try (`run_id_of`), so a crash at
any instant leaves nothing a second start could duplicate: a claimed row without its run is
made under the recorded id by the next runner, a row with its run is driven on (its lease
taken over from the dead process), and an ended run is left as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import unicodedata
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.batches import (
    DEFAULT_BATCH_WAITING,
    MAX_BATCH_ID,
    RUN_ENDED,
    BatchProgress,
    Held,
    RowInputs,
    RowState,
    RowStatus,
    RowView,
    fold,
    next_starts,
    run_id_of,
)
from interlock.core.experiments import BASE, variant_batch_id
from interlock.core.tolerance import Tolerance
from interlock.errors import InterlockError, LeaseHeld, StorageError, UsageError
from interlock.storage.batches import BatchLedger, BatchRecord, BatchRow, NewBatch, batch_ledger
from interlock.workloads.batch_rows import RowMap

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.core.loader import Definition
    from interlock.core.state import RunState
    from interlock.storage.base import NewEvent

log = logging.getLogger("interlock.runtime")

BATCH_TTL = 15.0  # seconds another process waits after a batch's driver dies
TAKE_EVERY = 2.0  # seconds between tries to take a row's run held by another process
_BATCH_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def new_batch_id(pipeline: str, now: float) -> str:
    """A readable, sortable id: the pipeline, the UTC time and a little randomness."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    plain = unicodedata.normalize("NFKD", pipeline).encode("ascii", "ignore").decode().lower()
    slug = re.sub("-+", "-", "".join(c if c.isalnum() else "-" for c in plain)).strip("-")
    return f"{slug[:20].strip('-') or 'batch'}-{stamp}-{uuid.uuid4().hex[:6]}"


def check_batch_id(batch_id: str) -> str:
    """Refuse an id its rows' run ids could not be made from."""
    if not _BATCH_ID.match(batch_id) or len(batch_id) > MAX_BATCH_ID:
        raise UsageError(
            f"--batch-id {batch_id!r} is not valid: lowercase letters, digits and '-', starting "
            f"with a letter or digit, at most {MAX_BATCH_ID} characters (its rows' runs are "
            f"named {batch_id[:12]}...-r1, -r2...)"
        )
    return batch_id


def record_batch(
    app: Interlock,
    definition: Definition,
    rows: list[RowInputs],
    *,
    batch_id: str,
    inputs_file: str,
    concurrency: int,
    max_cost_usd: float | None,
    now: float,
    variants: Sequence[tuple[str, Definition]] = (),
    tolerate: Tolerance | None = None,
    batch_waiting: int = DEFAULT_BATCH_WAITING,
) -> BatchRecord:
    """Record the batch and all its rows in one transaction, before any run starts; with
    `variants` (name, definition), an experiment: one batch more per variant, of the same
    rows, named `<batch id>-<name>`, recorded in the same transaction. `tolerate`: how many
    rows may fail (a count, or "P%" of the rows) before no more start (each variant's own).
    `batch_waiting`: how many rows whose run only waits for provider-batch answers do not
    count against `concurrency`."""
    ledger = batch_ledger(app.store)
    experiment = check_batch_id(batch_id) if variants else None

    def new(one: Definition, variant: str | None) -> NewBatch:
        return NewBatch(
            batch_id=check_batch_id(variant_batch_id(batch_id, variant or BASE)),
            pipeline=one.name,
            definition_hash=one.hash,
            definition=one.canonical,
            # Absolute, so that a resume from another directory finds `{workflow_dir}` and
            # the interlock.toml beside the workflow file.
            source=absolute_source(one.source),
            inputs_file=inputs_file,
            concurrency=concurrency,
            max_cost_usd=max_cost_usd,
            created_at=now,
            experiment=experiment,
            variant=variant,
            tolerate=tolerate,
            batch_waiting=batch_waiting,
        )

    base = new(definition, BASE if variants else None)
    ledger.create_batch(
        base,
        [(r.number, r.topic, r.inputs) for r in rows],
        also=[new(d, name) for name, d in variants],
    )
    return ledger.get_batch(batch_id)


def absolute_source(source: str) -> str:
    """A workflow file's path made absolute (a source such as `<api>` is left alone)."""
    if not source or source.startswith("<"):
        return source
    from pathlib import Path

    return str(Path(source).absolute())


def batch_definition(app: Interlock, record: BatchRecord) -> Definition:
    """The definition the batch pinned, with its workflow file as its source (where
    `{workflow_dir}` and interlock.toml are found)."""
    pinned = app.definition_of(record.pipeline, record.definition_hash)
    return replace(pinned, source=record.source)


def result_of(definition: Definition, state: RunState) -> dict[str, Any]:
    """What an ended run gives its row: the final worker's extracted values, the output it
    delivered, and why it failed."""
    final = definition.pipeline.final_worker.role
    return {
        "values": dict(state.values.get(final, {})),
        "output": state.delivered,
        "failure": state.failure,
        # Every worker's values, for the pipeline's `metrics:` (computed when compared, so
        # that a metric added later still reads the rows run before it).
        "roles": {role: dict(values) for role, values in sorted(state.values.items())},
        "seconds": max(0.0, state.updated_at - state.created_at),
        "reused": sum(1 for t in state.tasks.values() if t.reused_from is not None),
    }


def row_results(app: Interlock, definition: Definition, rows: list[BatchRow]) -> list[BatchRow]:
    """The rows with the result of each ended run, folded from its history where the
    batch's driver has not kept it yet (a run ended while no batch driver ran)."""
    filled = []
    for row in rows:
        view = row.view
        if row.result is None and view.run_id is not None and view.run_status in RUN_ENDED:
            with contextlib.suppress(InterlockError):
                row = replace(row, result=result_of(definition, app.state(view.run_id)))
        filled.append(row)
    return filled


def row_worst_usd(
    app: Interlock,
    record: BatchRecord,
    rows: Sequence[BatchRow],
    definition: Definition | None = None,
) -> Mapping[int, float]:
    """row -> the most its run can cost (its quote with its own topic and inputs, the
    models as its batch's workflow folder configures them), for the rows whose worst case
    is known: what the batch's budget holds back while each row runs."""
    from interlock.runtime.budget_reserve import row_worst_cases

    definition = definition or batch_definition(app, record)
    source = record.source
    folder = Path(source).parent if source and not source.startswith("<") else None
    models = app.orchestrator.models
    if models is None:  # a stand-in orchestrator with no model configuration (the simulator)
        return {}
    inputs = [RowInputs(number=r.view.number, topic=r.topic, inputs=dict(r.inputs)) for r in rows]
    return row_worst_cases(models, definition, folder, inputs)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What a progress display shows after a turn of the runner."""

    batch: BatchRecord
    progress: BatchProgress
    rows: tuple[RowView, ...]
    elapsed: float  # seconds since this runner started
    eta: float | None  # seconds to go, at the rate rows ended here (None: no rate yet)
    # Rows in flight whose run's calls wait on a spend cap: row -> what it waits for.
    capped: Mapping[int, str] = field(default_factory=dict)


class BatchRunner:
    """Drives one batch in this process until nothing runs and nothing more may start."""

    def __init__(
        self,
        app: Interlock,
        batch_id: str,
        *,
        on_progress: Callable[[Snapshot], None] = lambda _: None,
        clock: Callable[[], float] = time.time,
        poll: float = 0.25,
    ) -> None:
        self.app = app
        self.ledger: BatchLedger = batch_ledger(app.store)
        self.batch = self.ledger.get_batch(batch_id)
        self.definition = batch_definition(app, self.batch)
        self.on_progress = on_progress
        self.clock = clock
        self.poll = poll
        self._changed: asyncio.Event | None = None
        self._results: dict[str, dict[str, Any]] = {}  # run id -> result, seen ending here
        self._tried: dict[str, float] = {}  # run id -> when this runner last tried to take it
        self._stopped: set[str] = set()  # runs of a cancelled batch this runner cancelled
        self._rows: dict[int, BatchRow] = {}  # row -> its topic and inputs, read when first needed
        # row -> the most its run can cost, quoted when the batch first has a budget here.
        self._worst: Mapping[int, float] | None = None
        self._started = clock()
        self._done_at_start: int | None = None
        self._held_until = 0.0
        # A variant of an experiment: its rows start once their base rows have ended, each
        # as a rerun of its base row's run (`_sources`), so that what both do alike is done
        # once. `blocked`: nothing runs and every waiting row waits for a base row that will
        # not end in this drive (paused, held by the budget, or the base batch not driven).
        batch = self.batch
        self.base_id = batch.experiment if batch.variant not in (None, BASE) else None
        self._sources: dict[int, str] = {}
        self.blocked = False
        # The rows as last read: each turn rereads those in flight (and, of a base batch,
        # those not ended), and all of them when someone else changed some (`RowMap`).
        self.row_map = RowMap(self.ledger, batch.batch_id, _in_flight)
        self.base_map = RowMap(self.ledger, self.base_id or "", _not_ended)

    # -- the listener the orchestrator calls for every event it records ----------------------

    def _on_event(self, run_id: str, seq: int, new: NewEvent, state: RunState) -> None:
        if state.status.ended:
            self._results[run_id] = result_of(self.definition, state)
        # A run that ended, paused, or whose call went into (or came back from) a provider
        # batch may leave room for another row: the next turn looks at once.
        moved = state.status.ended or state.status.value == "paused"
        if (moved or new.event.kind == "task_batch_waited") and self._changed is not None:
            self._changed.set()

    # -- the loop ------------------------------------------------------------------------

    async def run(self) -> Snapshot:
        """Drive the batch with the orchestrator's loop run here (`interlock batch`); returns
        how it stands when nothing more runs.

        Raises:
            LeaseHeld: another live process drives the batch.
        """
        from interlock.runtime.shared_limits import limits_shared_for

        orchestrator = self.app.orchestrator
        self.hold()
        stop = asyncio.Event()
        loop = asyncio.create_task(orchestrator.serve_forever(stop))
        # The rows share their providers' rate limits with every process on the store (a
        # PostgreSQL one), and keep spend caps and provider batches in the ledger, as `drive`
        # does.
        shared = limits_shared_for(None, store=self.app.store)
        try:
            with shared:
                return await self.feed(loop)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await loop
            await orchestrator.shutdown()
            from interlock.providers import aclose_providers

            await aclose_providers()

    async def feed(
        self, loop: asyncio.Task[None] | None = None, stop: asyncio.Event | None = None
    ) -> Snapshot:
        """Start and watch the batch's rows beside an orchestrator loop that runs already
        (`loop`, or a server's), until nothing more runs or `stop` is set; the batch is held
        meanwhile and handed back at the end.

        Raises:
            LeaseHeld: another live process drives the batch.
        """
        orchestrator = self.app.orchestrator
        self.hold()
        self._changed = asyncio.Event()
        orchestrator.listeners.append(self._on_event)
        try:
            while True:
                snapshot = self._turn()
                self.on_progress(snapshot)
                if snapshot.progress.settled or self.blocked:
                    return snapshot
                if stop is not None and stop.is_set():
                    return snapshot
                if loop is not None and loop.done():  # its error says why
                    loop.result()
                    raise StorageError("the orchestrator's loop stopped; resume the batch")
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll):
                        await self._changed.wait()
        finally:
            orchestrator.listeners.remove(self._on_event)
            with contextlib.suppress(InterlockError):
                self.ledger.release_batch(self.batch.batch_id, orchestrator.owner)

    def hold(self) -> None:
        """Take (or renew) the batch's lease; a holder that was a process of this host that
        has died is taken over at once."""
        from interlock.runtime.processes import holder_is_dead

        now = self.clock()
        owner = self.app.orchestrator.owner
        try:
            self.ledger.hold_batch(self.batch.batch_id, owner, BATCH_TTL, now)
        except LeaseHeld:
            holder = self.ledger.get_batch(self.batch.batch_id).driver or ""
            if not holder_is_dead(holder):
                raise
            self.ledger.hold_batch(
                self.batch.batch_id, owner, BATCH_TTL, now, take_over_from=holder
            )
        self._held_until = now + BATCH_TTL

    def _turn(self) -> Snapshot:
        """One look: keep results, drive on runs left by a dead process, make the runs of
        rows claimed but not made, claim and make the rows that may start."""
        now = self.clock()
        if now > self._held_until - BATCH_TTL * 2 / 3:
            self.hold()
        batch = self.batch = self.ledger.get_batch(self.batch.batch_id)
        views = self.row_map.refresh(batch)
        self._keep_results(self.row_map.flying)
        self._take_orphans(self.row_map.flying, now)
        ready, base_settled = self._base_ready()
        worst = self.worst_usd()
        starts = next_starts(
            views,
            concurrency=batch.concurrency,
            max_cost_usd=batch.max_cost_usd,
            cancelled=batch.cancelled_at is not None,
            ready=ready,
            tolerate=batch.tolerate,
            batch_waiting=batch.batch_waiting,
            worst_usd=worst,
        )
        tries = {n: self.row_map.view(n).tries for n in starts.rows}
        claims = [(n, tries[n], run_id_of(batch.batch_id, n, tries[n])) for n in starts.rows]
        claimed = set(self.ledger.claim_rows(batch.batch_id, claims, now)) if claims else set()
        # Rows claimed before (by a driver that stopped before making their runs) are made
        # now under the id recorded for them, unless that run was made and pruned since.
        specs = [
            (v.number, v.run_id)
            for v in self.row_map.flying
            if v.status is RowStatus.STARTING
            and v.run_id is not None
            and self.app.store.pruned_run(v.run_id) is None
        ]
        specs += [(n, run_id) for n, _, run_id in claims if n in claimed]
        if specs or claims:
            self._make(specs)
            # Only the rows moved here: claimed, made (or refused), or left by the claim.
            self.row_map.reread([n for n, _ in specs] + [n for n, _, _ in claims])
        if batch.cancelled_at is not None:
            self._stop_flying(self.row_map.flying)
        progress = fold(
            views, max_cost_usd=batch.max_cost_usd, tolerate=batch.tolerate, worst_usd=worst
        )
        self.blocked = base_settled and progress.running == 0 and starts.held is Held.BASE
        elapsed = max(0.0, now - self._started)
        if self._done_at_start is None:
            self._done_at_start = progress.done
        return Snapshot(
            batch=batch,
            progress=progress,
            rows=tuple(views),
            elapsed=elapsed,
            eta=progress.eta(elapsed, progress.done - self._done_at_start),
            capped=self._capped(),
        )

    def worst_usd(self) -> Mapping[int, float] | None:
        """row -> the most its run can cost, for a batch with a budget (None without one):
        the budget holds each row's back while it runs (see `core.batches.next_starts`).
        Quoted once, as `interlock batch` quotes the rows before it records them."""
        if self.batch.max_cost_usd is None:
            return None
        if self._worst is None:
            rows = list((self._rows or self._read_rows()).values())
            self._worst = row_worst_usd(self.app, self.batch, rows, self.definition)
        return self._worst

    def _capped(self) -> dict[int, str]:
        """The rows in flight whose run, driven here, has calls waiting on a spend cap (as
        the run's status.json says it): row -> what it waits for."""
        from interlock.runtime.projection import live_spend_waits, spend_waiting_view, waiting_text

        drivers = self.app.orchestrator.drivers
        capped: dict[int, str] = {}
        for view in self.row_map.flying:
            driver = drivers.get(view.run_id) if view.run_id is not None else None
            if driver is None or not driver.spend_waits:
                continue
            waits = live_spend_waits(driver.state, driver.spend_waits)
            if waits:
                capped[view.number] = waiting_text(spend_waiting_view(waits))
        return capped

    def _stop_flying(self, views: list[RowView]) -> None:
        """Cancel the runs in flight of a cancelled batch, once each here. `batch cancel`
        stops those it finds; a row claimed before it and made only after (its driver died
        in between) has a run that it could not find."""
        for view in views:
            run_id = view.run_id
            if run_id is None or view.run_status in (*RUN_ENDED, None) or run_id in self._stopped:
                continue
            self._stopped.add(run_id)
            with contextlib.suppress(InterlockError):  # it ended meanwhile
                self.app.cancel(run_id, f"batch {self.batch.batch_id} cancelled")

    def _base_ready(self) -> tuple[frozenset[int] | None, bool]:
        """For a variant: the rows whose base row has ended (its run's id kept as the
        source of the row's run), and whether the base batch is settled; else (None, True)."""
        if self.base_id is None:
            return None, True
        base = self.ledger.get_batch(self.base_id)
        views = self.base_map.refresh(base)
        # A base row cancelled before it started has nothing to reuse and was not meant
        # to run: its variant rows wait (a refused one runs them afresh).
        ended = (RowStatus.DELIVERED, RowStatus.FAILED, RowStatus.CANCELLED)
        ready = frozenset(
            v.number for v in views if v.status in ended and v.state is not RowState.CANCELLED
        )
        for view in views:
            if view.number in ready and view.run_id is not None and view.run_status in RUN_ENDED:
                self._sources[view.number] = view.run_id
        progress = fold(views, max_cost_usd=base.max_cost_usd, tolerate=base.tolerate)
        return ready, progress.settled or base.cancelled_at is not None

    def _row(self, number: int) -> BatchRow:
        """A row's topic and inputs (read once: they never change)."""
        if number not in self._rows:
            self._read_rows()
        return self._rows[number]

    def _read_rows(self) -> dict[int, BatchRow]:
        self._rows = {r.view.number: r for r in self.ledger.rows(self.batch.batch_id)}
        return self._rows

    def _make(self, specs: list[tuple[int, str]]) -> None:
        """Make the runs of claimed rows (number, run id), in one transaction; when that is
        refused, one by one, so that a row whose run cannot be made is marked so and the
        others start."""
        definition = self.definition
        entries: list[tuple[Definition, str, dict[str, Any] | None, str | None]] = []
        fresh: list[tuple[int, str]] = []
        for number, run_id in specs:
            row = self._row(number)
            entry: tuple[Definition, str, dict[str, Any] | None, str | None] = (
                definition,
                row.topic,
                dict(row.inputs),
                run_id,
            )
            source = self._sources.get(number)
            if source is None:
                entries.append(entry)
                fresh.append((number, run_id))
            else:  # a variant's row: a rerun of its base row's run, one transaction each
                self._make_one(number, run_id, entry, origin={"rerun_of": source})
        if not entries:
            return
        specs = fresh
        try:
            self.app.orchestrator.create_runs(entries, origin=self._config())
            return
        except StorageError:
            raise
        except InterlockError:
            pass
        for (number, run_id), entry in zip(specs, entries, strict=True):
            self._make_one(number, run_id, entry)

    def _config(self) -> dict[str, Any]:
        """The rows' runs record which interlock.toml their models use (`status` names it)."""
        from interlock.runtime.run_config import config_origin

        return config_origin(self.app.orchestrator.models, self.definition)

    def _make_one(
        self, number: int, run_id: str, entry: Any, origin: dict[str, Any] | None = None
    ) -> None:
        """Make one row's run (`origin`: further fields of its `run_created`, a variant row's
        source run), or record why it cannot be made."""
        try:
            self.app.orchestrator.create_runs([entry], origin={**self._config(), **(origin or {})})
        except StorageError:
            raise
        except InterlockError as exc:
            log.warning(
                "batch %s row %d: its run cannot be made: %s",
                self.batch.batch_id,
                number,
                exc.message,
                extra={"run_id": run_id, "action": "batch_row_refused"},
            )
            self.ledger.refuse_row(self.batch.batch_id, number, run_id, exc.message)

    def _keep_results(self, views: list[RowView]) -> None:
        """Record what ended runs delivered, once: from the states seen ending here, or
        folded from the history of a run that ended while no batch driver ran."""
        found = []
        lost = []
        for view in views:
            if view.kept or view.run_id is None or view.run_status not in RUN_ENDED:
                continue
            result = self._results.pop(view.run_id, None)
            if result is None:
                try:
                    result = result_of(self.definition, self.app.state(view.run_id))
                except StorageError:  # the ledger failed for now: tried again next turn
                    continue
                except InterlockError:
                    lost.append(view.number)
                    continue
            found.append((view.number, view.run_id, result))
        if found:
            self.ledger.set_results(self.batch.batch_id, found)
            self.row_map.kept(n for n, _, _ in found)
        # A run whose state is gone (pruned) keeps no result: its row is not reread for it.
        self.row_map.settle(lost)

    def _take_orphans(self, views: list[RowView], now: float) -> None:
        """Drive on the runs of this batch that are in flight and driven by no one here
        (left by a driver that stopped): their leases are taken over from a dead process."""
        orchestrator = self.app.orchestrator
        for view in views:
            run_id = view.run_id
            if view.status not in (RowStatus.RUNNING, RowStatus.BATCHED) or run_id is None:
                continue
            if run_id in orchestrator.drivers or now - self._tried.get(run_id, -1e9) < TAKE_EVERY:
                continue
            self._tried[run_id] = now
            try:
                orchestrator.take(run_id)
            except InterlockError as exc:  # driven elsewhere, or not drivable: said once
                log.info(
                    "batch %s row %d: its run is not driven here: %s",
                    self.batch.batch_id,
                    view.number,
                    exc.message,
                    extra={"run_id": run_id, "action": "batch_run_not_taken"},
                )
        if orchestrator.drivers:
            orchestrator.wake()


def _in_flight(view: RowView) -> bool:
    """A row of the batch driven here that may move without its driver: its run in flight
    (or not made yet), or ended with its result not kept yet."""
    if view.state is not RowState.STARTED:
        return False
    return view.run_status not in RUN_ENDED or not view.kept


def _not_ended(view: RowView) -> bool:
    """A row of a variant's base batch that may move (its own driver moves it): not ended."""
    return view.status not in (RowStatus.DELIVERED, RowStatus.FAILED, RowStatus.CANCELLED)
