"""A fleet orchestrator looks for runs to take when one is handed back, not on every commit."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from tests.distributed.helpers import WORKFLOW, Processes, submit_runs, wait_until

from interlock.distributed.orchestrate import Fleet, submit
from interlock.runtime.home import Home
from interlock.storage.postgres import PostgresStore


class CountingStore(PostgresStore):
    """A real store that counts the looks for runs to take."""

    looks = 0

    def unowned_runs(self, now: float, limit: int = 10) -> list[str]:
        self.looks += 1
        return super().unowned_runs(now, limit)


def listening(pg_url: str) -> bool:
    """Whether a connection of the database has done its last LISTEN (the fleet's listener:
    notifications sent from now on are heard)."""
    with psycopg.connect(pg_url, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query ILIKE 'LISTEN %interlock_commands%'"
        ).fetchone()
    return bool(row and row[0])


@contextlib.contextmanager
def fleet_running(pg_url: str, tmp_path: Path) -> Iterator[tuple[CountingStore, Fleet]]:
    """A fleet orchestrator with a 60 s scan, driving in a thread of its own until the block
    ends."""
    store = CountingStore(pg_url)
    fleet = Fleet(store, Home(tmp_path / "home"), scan=60.0)
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(fleet.run(stop),))
    thread.start()
    try:
        yield store, fleet
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()
        store.close()


def test_submitted_run_is_taken_at_once_and_own_commits_wake_no_look(
    pg_url: str, procs: Processes, tmp_path: Path
) -> None:
    """With a 60 s scan, a submitted run is taken within seconds (its lease handed back is
    announced), and driving it to the end with a worker process (a dozen commits of its own
    events) adds no look for runs to take."""
    with fleet_running(pg_url, tmp_path) as (store, fleet):
        wait_until(lambda: store.looks >= 1, 10, "the first look")
        wait_until(lambda: listening(pg_url), 30, "the fleet's listener")
        run_id = submit(pg_url, WORKFLOW, topic="t", home=tmp_path / "submit")
        wait_until(lambda: run_id in fleet.orchestrator.drivers, 10, "the run taken")
        looks = store.looks
        procs.worker("w1")
        delivered = lambda: store.get_run(run_id).summary.status == "delivered"  # noqa: E731
        wait_until(delivered, 60, "the run delivered")
        assert len(store.events(run_id)) > 10
        assert store.looks == looks


def test_a_backlog_is_taken_look_after_look_not_a_few_runs_per_scan(
    pg_url: str, tmp_path: Path
) -> None:
    """Runs submitted before the orchestrator started announce nothing it can hear: with a
    60 s scan it still takes all 30 within seconds, a few per look, looking again as long as
    a look finds as many as it asked for (it took 8 runs a scan before, one look a second by
    default, however long the backlog)."""
    run_ids = submit_runs(pg_url, 30, tmp_path / "submit")
    with fleet_running(pg_url, tmp_path) as (store, fleet):
        wait_until(lambda: set(run_ids) <= set(fleet.orchestrator.drivers), 20, "all runs taken")
        assert store.looks >= 4


def test_a_look_for_runs_to_take_reads_the_live_runs_not_the_history(pg_url: str) -> None:
    """With 20,000 finished runs in the store, a look for runs to take reads the few live
    ones through their index: it read every run ever recorded before (10 ms at 100,000
    runs), and its estimate then passed the server's JIT threshold, which compiled the
    statement anew on every look (a quarter of a second). The store's connections leave
    JIT off."""
    store = PostgresStore(pg_url, pool_size=1)
    try:
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute("INSERT INTO definitions VALUES ('h', '{}')")
            db.execute(
                "INSERT INTO runs (run_id, pipeline, topic, definition_hash, created_at, status,"
                " updated_at) SELECT 'old-' || n, 'p', 't', 'h', n, 'delivered', n"
                " FROM generate_series(1, 20000) n"
            )
            db.execute(
                "INSERT INTO runs (run_id, pipeline, topic, definition_hash, created_at, status,"
                " updated_at) SELECT 'live-' || n, 'p', 't', 'h', 30000 + n, 'running', n"
                " FROM generate_series(1, 5) n"
            )
            db.execute("ANALYZE runs")
        assert store.single(lambda db: db.execute("SHOW jit").fetchone()) == ("off",)
        before = _run_scans(pg_url, store)
        for _ in range(3):
            assert len(store.unowned_runs(time.time(), 8)) == 5
        assert _run_scans(pg_url, store) == before
    finally:
        store.close()


def _run_scans(pg_url: str, store: PostgresStore) -> int:
    """Whole-table reads of `runs` so far, the store's connection's included."""
    store.single(lambda db: db.execute("SELECT pg_stat_force_next_flush()"))
    with psycopg.connect(pg_url, autocommit=True) as db:
        row = db.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'runs'")
        return int(row.fetchone()[0])  # type: ignore[index]
