"""The batch ledger: batches and their rows, beside the runs they start.

One contract (`BatchLedger`) with three backends: SQLite and PostgreSQL share the SQL of
`sql/<dialect>/batches.sql` through `SQLBatches` (the dialects differ only in placeholders,
kept in the files), and `MemoryBatches` (`batches_memory.py`) stands in for tests.
`batch_ledger(store)` picks the one for a store; all of them pass `tests/storage/test_batches.py`.

Guarantees every backend gives:
- A batch and all its rows are recorded in one transaction (`create_batch`), or nothing is.
- A row's try is claimed at most once (`claim_rows` only moves a pending row of that try):
  its run id is recorded before its run is made, so a crash in between leaves the id, and
  whoever drives the batch next makes the run under it (or finds it made).
- Only one process drives a batch at a time (`hold_batch`, a lease renewed while it runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from interlock.core.batches import DEFAULT_BATCH_WAITING, RowState, RowView
from interlock.core.tolerance import Tolerance
from interlock.errors import LeaseHeld, UsageError
from interlock.storage import codec
from interlock.storage.base import Store

T = TypeVar("T")


class BatchNotFound(UsageError):
    """No batch has the given id."""


class BatchExists(UsageError):
    """A new batch was given the id of one the ledger already holds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NewBatch:
    """A batch to record: what it runs, from which file, and its limits."""

    batch_id: str
    pipeline: str
    definition_hash: str
    definition: str  # canonical JSON, pinned like a run's
    source: str  # the workflow file
    inputs_file: str
    concurrency: int
    max_cost_usd: float | None
    created_at: float
    experiment: str | None = None  # the experiment's base batch (None: a batch of its own)
    variant: str | None = None  # the variant's name within its experiment (`base`...)
    tolerate: Tolerance | None = None  # failed rows allowed (None: no limit)
    # Rows whose run only waits for provider-batch answers that do not count against
    # `concurrency` (`--batch-waiting`).
    batch_waiting: int = DEFAULT_BATCH_WAITING


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchRecord:
    """A batch as recorded."""

    batch_id: str
    pipeline: str
    definition_hash: str
    source: str
    inputs_file: str
    concurrency: int
    max_cost_usd: float | None
    rows: int
    created_at: float
    cancelled_at: float | None = None
    driver: str | None = None  # the process driving it (host:pid:nonce), while its lease lasts
    driver_expires: float | None = None
    experiment: str | None = None  # the experiment's base batch (None: a batch of its own)
    variant: str | None = None  # the variant's name within its experiment
    tolerate: Tolerance | None = None  # failed rows allowed: a count or "P%" (None: no limit)
    # Changes to its rows made by anyone but its driver (retry, cancel): a driver that reads
    # only its rows in flight reads them all again when this moved.
    changes: int = 0
    batch_waiting: int = DEFAULT_BATCH_WAITING  # see `NewBatch.batch_waiting`


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchRow:
    """A row as recorded, with its current run's summary (`view`)."""

    view: RowView
    topic: str
    inputs: dict[str, Any]
    started_at: float | None = None
    error: str | None = None  # why its run could not be made (state `refused`)
    result: dict[str, Any] | None = None  # what its ended run delivered (values, output...)


class BatchLedger(Protocol):
    """What the batch driver and commands need from a ledger."""

    def create_batch(
        self,
        batch: NewBatch,
        rows: Sequence[tuple[int, str, dict[str, Any]]],
        also: Sequence[NewBatch] = (),
    ) -> None:
        """Record the batch, its pinned definition and its rows (number, topic, inputs) in
        one transaction, with the batches `also` (an experiment's variants: the same rows,
        another definition). Raises BatchExists when an id is taken."""
        ...

    def experiment_batches(self, experiment: str) -> list[BatchRecord]:
        """The batches of an experiment (its base batch's id), the base first."""
        ...

    def get_batch(self, batch_id: str) -> BatchRecord:
        """One batch (raises BatchNotFound)."""
        ...

    def list_batches(self, limit: int = 100) -> list[BatchRecord]:
        """Batches, newest first."""
        ...

    def rows(self, batch_id: str) -> list[BatchRow]:
        """Every row of the batch in row order, each with its current run's summary."""
        ...

    def views(self, batch_id: str) -> list[RowView]:
        """Every row's view alone (no topic, inputs or result), in row order: what a driver
        reads when it starts, and again when the batch's `changes` moved."""
        ...

    def views_of(self, batch_id: str, numbers: Sequence[int]) -> list[RowView]:
        """The views of the rows `numbers` (those of them the batch has), in row order: what
        a driver reads at each turn, its rows in flight."""
        ...

    def claim_rows(
        self, batch_id: str, claims: Sequence[tuple[int, int, str]], now: float
    ) -> list[int]:
        """Record run ids for rows (number, try, run id) still pending at that try, in one
        transaction; returns the rows claimed (a row claimed before is left out)."""
        ...

    def refuse_row(self, batch_id: str, row: int, run_id: str, error: str) -> None:
        """Record that the row's run could not be made, and why."""
        ...

    def set_results(
        self, batch_id: str, results: Sequence[tuple[int, str, dict[str, Any]]]
    ) -> None:
        """Keep what ended runs delivered (row, run id, result), for status and export."""
        ...

    def retry_rows(self, batch_id: str, views: Sequence[RowView]) -> int:
        """Give rows (as last seen, their try ended) their next try: pending again, the
        spend of every try so far kept. A row that moved since is left alone; returns how
        many were given one. The batch's `changes` moves when any was."""
        ...

    def cancel_batch(self, batch_id: str, now: float) -> int:
        """Mark the batch cancelled and its pending rows cancelled; how many rows. The
        batch's `changes` moves."""
        ...

    def reopen_batch(self, batch_id: str, views: Sequence[RowView]) -> int:
        """Undo a cancel, in one transaction: the batch is no longer cancelled, its rows
        cancelled before they started wait again (the same try), and the rows `views` whose
        run was cancelled get their next try (as `retry_rows`); how many rows. The batch's
        `changes` moves."""
        ...

    def set_limits(
        self, batch_id: str, concurrency: int, max_cost_usd: float | None, batch_waiting: int
    ) -> None:
        """Change the batch's concurrency, budget and rows let wait in provider batches (a
        resume that says new ones)."""
        ...

    def hold_batch(
        self,
        batch_id: str,
        owner: str,
        ttl: float,
        now: float,
        *,
        take_over_from: str | None = None,
    ) -> None:
        """Take or renew the right to drive the batch until `now + ttl`.

        Raises:
            LeaseHeld: another live process drives it.
        """
        ...

    def release_batch(self, batch_id: str, owner: str) -> None:
        """Hand the batch back (nothing happens if `owner` no longer holds it)."""
        ...


def batch_ledger(store: Store) -> BatchLedger:
    """The batch ledger kept in `store`'s database (or beside a memory store)."""
    import sys

    from interlock.storage.sqlite import SQLiteStore

    # The batch tables live in the store's own database, so its own transactions and reads
    # (private to the storage package) carry the batch queries.
    if isinstance(store, SQLiteStore):
        return SQLBatches(_sqlite_transact(store), store._read, "sqlite")
    # A store of a module not imported yet cannot be this one: neither psycopg nor the test
    # support is imported to find out.
    postgres = sys.modules.get("interlock.storage.postgres")
    if postgres is not None and isinstance(store, postgres.PostgresStore):
        return SQLBatches(store.retrying, store._read, "postgres")
    testing = sys.modules.get("interlock.testing")
    if testing is not None and isinstance(store, testing.MemoryStore):
        from interlock.storage.batches_memory import MemoryBatches

        return MemoryBatches.of(store)
    raise UsageError(f"batches are not kept in a store of type {type(store).__name__}")


def _sqlite_transact(store: Any) -> Callable[[Callable[[Any], T]], T]:
    def transact(action: Callable[[Any], T]) -> T:
        with store._write() as db:  # the store's own write transaction (BEGIN IMMEDIATE)
            return action(db)

    return transact


def held_message(batch_id: str, holder: str, expires: float, now: float) -> str:
    """What is said when another process drives the batch."""
    return (
        f"batch {batch_id} is being driven by {holder} (for {max(0.0, expires - now):.0f}s more "
        "unless it renews): wait for it, or stop that process"
    )


class SQLBatches:
    """`BatchLedger` on a SQL database: `transact` runs a function in one transaction on a
    connection, `read` runs one query; the queries are `sql/<dialect>/batches.sql`."""

    def __init__(
        self,
        transact: Callable[[Callable[[Any], Any]], Any],
        read: Callable[..., list[Any]],
        dialect: str,
    ) -> None:
        from interlock.storage.queries import named

        self._transact = transact
        self._read = read
        self._q = named(dialect, "batches.sql")
        self._dialect = dialect

    def create_batch(
        self,
        batch: NewBatch,
        rows: Sequence[tuple[int, str, dict[str, Any]]],
        also: Sequence[NewBatch] = (),
    ) -> None:
        """See `BatchLedger.create_batch`."""
        q = self._q

        def create(db: Any) -> None:
            for one in (batch, *also):
                if db.execute(q["get_batch"], (one.batch_id,)).fetchone() is not None:
                    raise BatchExists(exists_message(one.batch_id))
            for one in (batch, *also):
                db.execute(q["insert_definition"], (one.definition_hash, one.definition))
                db.execute(
                    q["insert_batch"],
                    (
                        one.batch_id,
                        one.pipeline,
                        one.definition_hash,
                        one.source,
                        one.inputs_file,
                        one.concurrency,
                        one.max_cost_usd,
                        len(rows),
                        one.created_at,
                        one.experiment,
                        one.variant,
                        None if one.tolerate is None else str(one.tolerate),
                        one.batch_waiting,
                    ),
                )
                with contextlib.closing(db.cursor()) as cursor:
                    cursor.executemany(
                        q["insert_row"],
                        [(one.batch_id, n, topic, codec.dumps(v)) for n, topic, v in rows],
                    )

        self._transact(create)

    def experiment_batches(self, experiment: str) -> list[BatchRecord]:
        """See `BatchLedger.experiment_batches`."""
        found = [_batch(r) for r in self._read(self._q["experiment_batches"], experiment)]
        return sorted(found, key=lambda b: (b.variant != "base", b.variant or ""))

    def get_batch(self, batch_id: str) -> BatchRecord:
        """See `BatchLedger.get_batch`."""
        found = self._read(self._q["get_batch"], batch_id)
        if not found:
            raise BatchNotFound(not_found_message(batch_id))
        return _batch(found[0])

    def list_batches(self, limit: int = 100) -> list[BatchRecord]:
        """See `BatchLedger.list_batches`."""
        return [_batch(r) for r in self._read(self._q["list_batches"], limit)]

    def rows(self, batch_id: str) -> list[BatchRow]:
        """See `BatchLedger.rows`."""
        return [_row(r) for r in self._read(self._q["batch_rows"], batch_id)]

    def views(self, batch_id: str) -> list[RowView]:
        """See `BatchLedger.views`."""
        return [_view(r) for r in self._read(self._q["batch_views"], batch_id)]

    def views_of(self, batch_id: str, numbers: Sequence[int]) -> list[RowView]:
        """See `BatchLedger.views_of`."""
        if not numbers:
            return []
        # One parameter whatever the count: SQLite reads a JSON array, PostgreSQL an array.
        given: Any = [int(n) for n in numbers]
        if self._dialect == "sqlite":
            given = codec.dumps(given)
        return [_view(r) for r in self._read(self._q["batch_views_of"], batch_id, given)]

    def claim_rows(
        self, batch_id: str, claims: Sequence[tuple[int, int, str]], now: float
    ) -> list[int]:
        """See `BatchLedger.claim_rows`."""
        q = self._q["claim_row"]

        def claim(db: Any) -> list[int]:
            return [
                row
                for row, attempt, run_id in claims
                if db.execute(q, (run_id, now, batch_id, row, attempt)).rowcount == 1
            ]

        result: list[int] = self._transact(claim)
        return result

    def refuse_row(self, batch_id: str, row: int, run_id: str, error: str) -> None:
        """See `BatchLedger.refuse_row`."""
        q = self._q["refuse_row"]
        self._transact(lambda db: db.execute(q, (error, batch_id, row, run_id)))

    def set_results(
        self, batch_id: str, results: Sequence[tuple[int, str, dict[str, Any]]]
    ) -> None:
        """See `BatchLedger.set_results`."""
        if not results:
            return
        q = self._q["set_result"]

        def put(db: Any) -> None:
            for row, run_id, result in results:
                db.execute(q, (codec.dumps(result), batch_id, row, run_id))

        self._transact(put)

    def retry_rows(self, batch_id: str, views: Sequence[RowView]) -> int:
        """See `BatchLedger.retry_rows`."""

        def retry(db: Any) -> int:
            given = self._retry(db, batch_id, views)
            if given:
                db.execute(self._q["count_change"], (batch_id,))
            return given

        result: int = self._transact(retry)
        return result

    def _retry(self, db: Any, batch_id: str, views: Sequence[RowView]) -> int:
        q = self._q["retry_row"]
        return int(
            sum(
                db.execute(
                    q, (v.cost_usd, v.tokens, v.estimated, batch_id, v.number, v.tries)
                ).rowcount
                for v in views
            )
        )

    def reopen_batch(self, batch_id: str, views: Sequence[RowView]) -> int:
        """See `BatchLedger.reopen_batch`."""
        q = self._q

        def reopen(db: Any) -> int:
            db.execute(q["reopen_batch"], (batch_id,))
            waiting = int(db.execute(q["reopen_rows"], (batch_id,)).rowcount)
            given = waiting + self._retry(db, batch_id, views)
            db.execute(q["count_change"], (batch_id,))
            return given

        result: int = self._transact(reopen)
        return result

    def cancel_batch(self, batch_id: str, now: float) -> int:
        """See `BatchLedger.cancel_batch`."""
        q = self._q

        def cancel(db: Any) -> int:
            db.execute(q["cancel_batch"], (now, batch_id))
            db.execute(q["count_change"], (batch_id,))
            return int(db.execute(q["cancel_rows"], (batch_id,)).rowcount)

        result: int = self._transact(cancel)
        return result

    def set_limits(
        self, batch_id: str, concurrency: int, max_cost_usd: float | None, batch_waiting: int
    ) -> None:
        """See `BatchLedger.set_limits`."""
        q = self._q["set_limits"]
        args = (concurrency, max_cost_usd, batch_waiting, batch_id)
        self._transact(lambda db: db.execute(q, args))

    def hold_batch(
        self,
        batch_id: str,
        owner: str,
        ttl: float,
        now: float,
        *,
        take_over_from: str | None = None,
    ) -> None:
        """See `BatchLedger.hold_batch`."""
        q = self._q
        args = (owner, now + ttl, batch_id, now, owner, take_over_from or owner)

        def hold(db: Any) -> None:
            if db.execute(q["hold_batch"], args).rowcount == 1:
                return
            row = db.execute(q["get_batch"], (batch_id,)).fetchone()
            if row is None:
                raise BatchNotFound(not_found_message(batch_id))
            record = _batch(row)
            raise LeaseHeld(
                held_message(batch_id, record.driver or "?", record.driver_expires or now, now)
            )

        self._transact(hold)

    def release_batch(self, batch_id: str, owner: str) -> None:
        """See `BatchLedger.release_batch`."""
        q = self._q["release_batch"]
        self._transact(lambda db: db.execute(q, (batch_id, owner)))


def exists_message(batch_id: str) -> str:
    """What is said of a --batch-id already taken."""
    return (
        f"batch {batch_id!r} already exists: nothing was recorded; give another --batch-id (or "
        f"none, for a fresh one), or go on with it: 'interlock batch resume {batch_id}'"
    )


def not_found_message(batch_id: str) -> str:
    """What is said of an unknown batch id."""
    return f"no batch {batch_id!r} (see 'interlock batches')"


def _batch(row: Sequence[Any]) -> BatchRecord:
    return BatchRecord(
        batch_id=str(row[0]),
        pipeline=str(row[1]),
        definition_hash=str(row[2]),
        source=str(row[3]),
        inputs_file=str(row[4]),
        concurrency=int(row[5]),
        max_cost_usd=None if row[6] is None else float(row[6]),
        rows=int(row[7]),
        created_at=float(row[8]),
        cancelled_at=None if row[9] is None else float(row[9]),
        driver=None if row[10] is None else str(row[10]),
        driver_expires=None if row[11] is None else float(row[11]),
        experiment=None if row[12] is None else str(row[12]),
        variant=None if row[13] is None else str(row[13]),
        tolerate=tolerance_of(row[14]),
        changes=int(row[15]),
        batch_waiting=int(row[16]),
    )


def tolerance_of(text: str | None) -> Tolerance | None:
    """A tolerance as stored (`5` or `10%`), as `--tolerate` gave it."""
    if text is None:
        return None
    return int(text) if str(text).isdigit() else str(text)


def _view(row: Sequence[Any]) -> RowView:
    number, state, tries, run_id, spent, used, run_status, cost, tokens, kept, parked, estimated = (
        row
    )
    return RowView(
        number=int(number),
        state=RowState(state),
        tries=int(tries),
        run_id=None if run_id is None else str(run_id),
        run_status=None if run_status is None else str(run_status),
        cost_usd=float(spent) + float(cost or 0.0),
        tokens=int(used) + int(tokens or 0),
        kept=bool(kept),
        parked=bool(parked),
        estimated=bool(estimated),
    )


def _row(row: Sequence[Any]) -> BatchRow:
    (number, topic, inputs, state, tries, run_id, started, error, result) = row[:9]
    spent, used, run_status, cost, tokens, parked, estimated = row[9:]
    view = RowView(
        number=int(number),
        state=RowState(state),
        tries=int(tries),
        run_id=None if run_id is None else str(run_id),
        run_status=None if run_status is None else str(run_status),
        cost_usd=float(spent) + float(cost or 0.0),
        tokens=int(used) + int(tokens or 0),
        kept=result is not None,
        parked=bool(parked),
        estimated=bool(estimated),
    )
    return BatchRow(
        view=view,
        topic=str(topic),
        inputs=codec.loads(inputs),
        started_at=None if started is None else float(started),
        error=None if error is None else str(error),
        result=None if result is None else codec.loads(result),
    )
