"""Transactions that lock several runs' rows lock them in one order: no deadlocks."""

from __future__ import annotations

import threading
import time

from interlock.core import events as ev
from interlock.storage.base import AppendBatch, Lease, NewEvent, RunSummary
from interlock.storage.postgres import PostgresStore


def test_appends_and_renewals_in_opposite_orders_never_deadlock(pg_url: str) -> None:
    """An orchestrator appending for runs a, b, c while renewing their leases listed the
    other way round (as its tick and its renewal loop may) never has a transaction ended
    as a deadlock: both lock the rows in run id order."""
    store = PostgresStore(pg_url, pool_size=4)
    try:
        now = time.time()
        leases: list[Lease] = []
        for run_id in ("a", "b", "c"):
            store.create_run(
                run_id=run_id,
                pipeline="p",
                topic="t",
                definition_hash="h",
                definition="{}",
                source="",
                created_at=now,
            )
            leases.append(store.acquire_lease(run_id, "o", 600, now))
        summary = RunSummary(status="running", phase="one")
        failures: list[BaseException] = []
        stop = time.monotonic() + 3.0

        def append() -> None:
            try:
                while time.monotonic() < stop:
                    batches = [
                        AppendBatch(
                            lease=lease,
                            events=[NewEvent(event=ev.PhaseStarted(at=now, phase="one", visit=1))],
                            summary=summary,
                        )
                        for lease in leases
                    ]
                    for result in store.append_many(batches, time.time()):
                        assert isinstance(result, int), result
            except BaseException as exc:
                failures.append(exc)

        def renew() -> None:
            try:
                while time.monotonic() < stop:
                    renewed = store.renew_leases(leases[::-1], 600, time.time())
                    assert all(isinstance(lease, Lease) for lease in renewed), renewed
                    assert [lease.run_id for lease in renewed if isinstance(lease, Lease)] == [
                        "c", "b", "a"
                    ]  # fmt: skip
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=append), threading.Thread(target=renew)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert all(len(store.events(run_id)) > 10 for run_id in "abc")
    finally:
        store.close()
