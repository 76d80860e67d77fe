"""A worker asks the ledger whether an attempt is still wanted, reading only what is new."""

from __future__ import annotations

import time

from interlock.core import events as ev
from interlock.distributed import payload
from interlock.distributed.queue import Claim
from interlock.distributed.worker import RemoteWorker
from interlock.storage.base import AppendBatch, NewEvent, RunSummary
from interlock.storage.postgres import PostgresStore


def _claim(attempt: int) -> Claim:
    return Claim(id=1, run_id="r", task_id="a@1", attempt=attempt, delivery=1, payload={})


def test_the_current_attempt_follows_the_ledger(pg_url: str) -> None:
    """Wanted while dispatched; not once superseded by a retry (the retry is); not once the
    run is cancelled. Each check reads the events appended since the previous one."""
    store = PostgresStore(pg_url)
    try:
        now = time.time()
        store.create_run(
            run_id="r",
            pipeline="p",
            topic="t",
            definition_hash="h",
            definition="{}",
            source="",
            created_at=now,
        )
        lease = store.acquire_lease("r", "orchestrator", 60, now)
        summary = RunSummary(status="running", phase="one")

        def append(*events: ev.Event) -> None:
            batch = AppendBatch(
                lease=lease, events=[NewEvent(event=e) for e in events], summary=summary
            )
            store.append(batch, time.time())

        append(
            ev.RunCreated(at=now, run_id="r", pipeline="p", definition_hash="h", topic="t"),
            ev.PhaseStarted(at=now, phase="one", visit=1),
            ev.TaskDispatched(
                at=now, task_id="a@1", role="a", phase="one", visit=1, item=None, attempt=1
            ),
        )
        worker = RemoteWorker(store, name="w")
        read: list[int] = []
        events = store.events

        def counting(run_id: str, since: int = 0, limit: int | None = None) -> list:  # type: ignore[type-arg]
            found = events(run_id, since, limit)
            read.append(len(found))
            return found

        store.events = counting  # type: ignore[method-assign]
        assert worker._current(_claim(1))
        assert worker._current(_claim(1)) and read[-1] == 0  # nothing new: nothing read
        append(
            ev.TaskTimedOut(at=now, task_id="a@1", attempt=1, detail="late"),
            ev.TaskDispatched(
                at=now, task_id="a@1", role="a", phase="one", visit=1, item=None, attempt=2
            ),
        )
        assert not worker._current(_claim(1)) and read[-1] == 2
        assert worker._current(_claim(2))
        append(ev.RunCancelled(at=now, by="ann"))
        assert not worker._current(_claim(2))
    finally:
        store.close()


def test_a_worker_definition_is_parsed_once_and_a_new_one_is_not_mixed_up() -> None:
    """Attempts carrying the same worker definition share one parsed `Worker`; a different
    definition (a new timeout) gets its own."""
    first = payload.parsed_worker({"role": "w", "call": "m:f", "timeout": 5})
    assert payload.parsed_worker({"call": "m:f", "timeout": 5, "role": "w"}) is first
    other = payload.parsed_worker({"role": "w", "call": "m:f", "timeout": 6})
    assert other.timeout == 6 and first.timeout == 5
