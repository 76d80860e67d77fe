"""SQLite appends after the store's own last append of a run set its seq and chain head in
the lease fence, and fall back to reading them when the row ends elsewhere."""

from __future__ import annotations

from pathlib import Path

from tests.storage.test_conformance import T0, TTL, batch, make_run

from interlock.storage import chain
from interlock.storage.base import AppendBatch, RunSummary
from interlock.storage.sqlite import SQLiteStore


def _updates(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    store._db.set_trace_callback(
        lambda sql: seen.append(sql[sql.index("UPDATE runs") :]) if "UPDATE runs" in sql else None
    )
    return seen


def test_an_append_after_the_stores_own_is_one_update_of_the_run(tmp_path: Path) -> None:
    """The second append of a run by the same store and lease updates the run row once (seq,
    chain head and summary together), and its chain verifies."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        make_run(store, "r1")
        lease = store.acquire_lease("r1", "a", TTL, T0)
        store.append(batch(lease, "one", "two"), T0)
        updates = _updates(store)
        assert store.append(batch(lease, "three"), T0) == 3
        assert len(updates) == 1 and "chain_head" in updates[0]
        assert chain.verify_events(store.events("r1")).ok
        assert store.get_run("r1").last_seq == 3
    finally:
        store.close()


def test_an_unchanged_status_leaves_its_columns_alone(tmp_path: Path) -> None:
    """An append that keeps the run's status and cost does not set them (so their indexes are
    not rewritten); one that changes them does, and listings see the new status."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        make_run(store, "r1")
        lease = store.acquire_lease("r1", "a", TTL, T0)
        store.append(batch(lease, "one"), T0)
        updates = _updates(store)
        store.append(batch(lease, "two"), T0)
        assert " status =" not in updates[-1].partition("WHERE")[0]
        ended = batch(lease, "three")
        failed = AppendBatch(
            lease=lease, events=ended.events, summary=RunSummary(status="failed", phase="x")
        )
        store.append(failed, T0)
        assert " status =" in updates[-1].partition("WHERE")[0]
        assert store.get_run("r1").summary.status == "failed"
        assert [r.run_id for r in store.list_runs(status="failed")] == ["r1"]
    finally:
        store.close()


def test_an_append_after_another_writer_reads_where_the_run_ends(tmp_path: Path) -> None:
    """When the run's row moved on since this store's last append (another store appended
    with the same lease), the append numbers and chains its events after what is stored."""
    path = tmp_path / "ledger.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        make_run(first, "r1")
        lease = first.acquire_lease("r1", "a", TTL, T0)
        first.append(batch(lease, "one"), T0)
        second.append(batch(lease, "two", "three"), T0)
        assert first.append(batch(lease, "four"), T0) == 4
        assert [s.seq for s in first.events("r1")] == [1, 2, 3, 4]
        assert chain.verify_events(first.events("r1")).ok
    finally:
        first.close()
        second.close()
