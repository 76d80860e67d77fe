"""A batch's driving turn reads only its rows in flight, on SQLite and on PostgreSQL, and
still sees the rows someone else changed (a retry, a cancel) while it drives."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.distributed.helpers import PG_ADMIN, admin

from interlock import Interlock
from interlock.core.batches import RowInputs, RowStatus
from interlock.core.loader import load_workflow
from interlock.runtime.orchestrator import Settings
from interlock.storage.base import Store
from interlock.storage.batches import BatchLedger, batch_ledger
from interlock.storage.postgres import PostgresStore
from interlock.storage.sqlite import SQLiteStore
from interlock.workloads.batches import BatchRunner, Snapshot, record_batch
from interlock.workloads.commands import retry_failed

# Row n sleeps SLEEP seconds, or fails until the file FIXED exists when n is in BROKEN.
WORKFLOW = """\
p:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: work
      workers:
        - role: w
          final: true
          command:
            - sh
            - -c
            - |
              case " BROKEN " in *" $1 "*) [ -e "$2" ] || exit 3;; esac
              sleep SLEEP
              echo "Score: $1" > "$3"
            - sh
            - "{{ n }}"
            - FIXED
            - "{output}"
"""


class Ledger:
    """A batch's ledger, as another process opens it: its own store handle on the database,
    and the SQL to set rows up in bulk."""

    def __init__(self, open_store: Callable[[], Store], execute: Callable[[str], None]) -> None:
        self.open_store = open_store
        self.execute = execute


@pytest.fixture(params=["sqlite", "postgres"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Interlock, Ledger]]:
    """An app on a fresh ledger of each kind, and a second way into that ledger."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_HOME", "INTERLOCK_STORE"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(heartbeat=0.05, lease_ttl=5)
    opened: list[Store] = []
    database = None
    if request.param == "sqlite":
        app = Interlock(tmp_path / "home", settings=settings)
        assert isinstance(app.store, SQLiteStore)
        path = app.store.path

        def open_store() -> Store:
            opened.append(SQLiteStore(path))
            return opened[-1]

        def execute(sql: str) -> None:
            import sqlite3

            with sqlite3.connect(path) as db:
                db.execute(sql)

    else:
        database = f"il_bt_{uuid.uuid4().hex[:12]}"
        admin(f"CREATE DATABASE {database}")
        url = PG_ADMIN.rsplit("/", 1)[0] + "/" + database
        PostgresStore(url).close()
        app = Interlock(tmp_path / "home", store=url, settings=settings)

        def open_store() -> Store:
            opened.append(PostgresStore(url))
            return opened[-1]

        def execute(sql: str) -> None:
            with psycopg.connect(url) as db:
                db.execute(sql)

    try:
        yield app, Ledger(open_store, execute)
    finally:
        app.close()
        for store in opened:
            store.close()
        if database is not None:
            admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def record(
    app: Interlock,
    tmp_path: Path,
    rows: int,
    *,
    concurrency: int,
    sleep: float | str,
    broken: str = "",
) -> str:
    """Record batch `b` of `rows` rows of WORKFLOW."""
    text = WORKFLOW.replace("FIXED", str(tmp_path / "fixed")).replace("BROKEN", broken)
    path = tmp_path / "workflow.yaml"
    path.write_text(text.replace("SLEEP", str(sleep)))
    definition = load_workflow(path).get("p")
    given = [RowInputs(number=n, topic=f"t{n}", inputs={"n": n}) for n in range(1, rows + 1)]
    record_batch(
        app,
        definition,
        given,
        batch_id="b",
        inputs_file="rows.csv",
        concurrency=concurrency,
        max_cost_usd=None,
        now=time.time(),
    )
    return "b"


class Counted:
    """The runner's batch ledger, counting the rows its reads give back."""

    def __init__(self, inner: BatchLedger) -> None:
        self.inner = inner
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in ("rows", "views", "views_of"):
            return found

        def counted(*args: Any) -> Any:
            result = found(*args)
            self.read += len(result)
            return result

        return counted


def drive(runner: BatchRunner) -> Snapshot:
    """Run the batch to its end (a minute at most)."""

    async def bounded() -> Snapshot:
        return await asyncio.wait_for(runner.run(), 60)

    return asyncio.run(bounded())


@pytest.mark.timeout(180)
def test_a_turn_reads_only_the_rows_in_flight(
    backend: tuple[Interlock, Ledger], tmp_path: Path
) -> None:
    """5,000 rows done and 2 to run: the first turn reads every row, each later one the two
    rows in flight at most, and the two are delivered."""
    app, ledger = backend
    batch_id = record(app, tmp_path, 5002, concurrency=4, sleep=1)
    ledger.execute(
        "UPDATE batch_rows SET state = 'refused', run_id = 'gone-' || row_no, error = 'set up' "
        "WHERE batch_id = 'b' AND row_no <= 5000"
    )
    counted: list[int] = []
    runner = BatchRunner(app, batch_id, poll=0.05, on_progress=lambda _: counted.append(reads.read))
    reads = Counted(runner.ledger)
    runner.ledger = runner.row_map.ledger = reads
    last = drive(runner)
    assert last.progress.counts == {RowStatus.FAILED: 5000, RowStatus.DELIVERED: 2}
    per_turn = [b - a for a, b in zip([0, *counted], counted, strict=False)]
    assert per_turn[0] >= 5002  # the whole batch, once
    assert len(per_turn) >= 4, per_turn  # turns while the two rows ran
    assert max(per_turn[1:]) <= 2, per_turn


@pytest.mark.timeout(180)
def test_a_retry_by_another_process_is_driven_on(
    backend: tuple[Interlock, Ledger], tmp_path: Path
) -> None:
    """Row 1 fails while row 2 still runs; `batch retry` from another process gives it its
    next try, which the running driver starts: both rows end delivered."""
    app, ledger = backend
    # Row 2 takes its time: the driver still drives when row 1 has failed.
    batch_id = record(app, tmp_path, 2, concurrency=2, sleep="$(( $1 * 2 - 2 ))", broken="1")
    other = ledger.open_store()
    retried: list[int] = []

    def retry(snapshot: Snapshot) -> None:
        failed = snapshot.progress.counts.get(RowStatus.FAILED, 0)
        if failed and not retried:
            (tmp_path / "fixed").touch()
            retried.append(retry_failed(other, batch_id))

    last = drive(BatchRunner(app, batch_id, poll=0.05, on_progress=retry))
    assert retried == [1]
    assert last.progress.counts == {RowStatus.DELIVERED: 2}
    rows = batch_ledger(other).rows(batch_id)
    assert [(r.view.tries, r.view.run_id) for r in rows] == [(2, "b-r1-t2"), (1, "b-r2")]


@pytest.mark.timeout(180)
def test_a_cancel_by_another_process_ends_the_drive(
    backend: tuple[Interlock, Ledger], tmp_path: Path
) -> None:
    """Cancelled from another process while its first row runs, the batch starts no more
    rows and its driver stops the run in flight: every row ends cancelled."""
    app, ledger = backend
    batch_id = record(app, tmp_path, 4, concurrency=1, sleep=30)
    other = batch_ledger(ledger.open_store())
    cancelled: list[int] = []

    def cancel(snapshot: Snapshot) -> None:
        if snapshot.progress.counts.get(RowStatus.RUNNING) and not cancelled:
            cancelled.append(other.cancel_batch(batch_id, time.time()))

    last = drive(BatchRunner(app, batch_id, poll=0.05, on_progress=cancel))
    assert cancelled == [3]
    assert last.progress.counts == {RowStatus.CANCELLED: 4}
