"""A PostgreSQL ledger shared by processes: one frozen in the middle of a transaction does not
hold the others up for longer than `stalled_transaction`."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tests.storage.test_conformance import make_run

from interlock.storage.postgres import PostgresStore


def test_a_transaction_left_open_by_a_frozen_process_is_ended(pg_database: str) -> None:
    """A process stopped while its transaction holds the run row (and the append lock) loses
    that transaction after `stalled_transaction`; another process then takes the lease."""
    frozen = PostgresStore(pg_database, stalled_transaction=0.5)
    other = PostgresStore(pg_database)
    try:
        make_run(frozen, "r", at=time.time())
        held = frozen.pool.getconn()
        held.execute("UPDATE runs SET topic = topic WHERE run_id = 'r'")  # row lock, then idle
        started = time.monotonic()
        taker = ThreadPoolExecutor(1)
        try:
            lease = taker.submit(other.acquire_lease, "r", "other", 30, time.time()).result(10)
            waited = time.monotonic() - started
            assert held.closed or held.broken or _fails(held)
        finally:
            held.close()  # a regression blocks the taker: release it, fail, do not hang
            taker.shutdown()
        assert lease.owner == "other" and 0.3 < waited < 5
    finally:
        frozen.close()
        other.close()


def _fails(db: object) -> bool:
    try:
        db.execute("SELECT 1")  # type: ignore[attr-defined]
    except Exception:
        return True
    return False
