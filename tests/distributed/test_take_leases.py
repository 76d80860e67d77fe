"""A fleet orchestrator takes a look's worth of runs in one transaction (`take_leases`)."""

from __future__ import annotations

import time

import psycopg

from interlock.core import events as ev
from interlock.storage.base import AppendBatch, NewEvent, RunSummary
from interlock.storage.postgres import PostgresStore

TTL = 60.0


def _runs(store: PostgresStore, names: list[str], now: float) -> None:
    """Runs with two events each, their leases handed back (as `submit` leaves them)."""
    for name in names:
        store.create_run(
            run_id=name,
            pipeline="p",
            topic=f"topic {name}",
            definition_hash="h",
            definition="{}",
            source="",
            created_at=now,
        )
        lease = store.acquire_lease(name, "submitter", TTL, now)
        events = [
            NewEvent(
                event=ev.RunCreated(
                    at=now, run_id=name, pipeline="p", definition_hash="h", topic=name
                )
            ),
            NewEvent(event=ev.PhaseStarted(at=now, phase="one", visit=1)),
        ]
        summary = RunSummary(status="running", phase="one")
        store.append(AppendBatch(lease=lease, events=events, summary=summary), now)
        store.release_leases([lease])


def test_free_runs_come_with_their_records_and_histories_and_the_next_token(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        now = time.time()
        _runs(store, ["b", "a", "c"], now)
        taken = store.take_leases(["c", "a", "b", "missing"], "orch", TTL, now + 1)
        assert [lease.run_id for lease, _, _ in taken] == ["a", "b", "c"]
        for lease, record, history in taken:
            assert lease.owner == "orch" and lease.token == 2  # the submitter's was 1
            assert lease.expires_at == now + 1 + TTL
            assert record.topic == f"topic {record.run_id}" and record.lease_owner == "orch"
            assert [s.seq for s in history] == [1, 2]
            assert {s.run_id for s in history} == {record.run_id}
            assert isinstance(history[1].event, ev.PhaseStarted)
        # The leases are held: fenced appends with them are taken, and nobody takes them again.
        lease = taken[0][0]
        summary = RunSummary(status="running", phase="one")
        marker = [NewEvent(event=ev.PhaseStarted(at=now, phase="two", visit=1))]
        assert store.append(AppendBatch(lease=lease, events=marker, summary=summary), now) == 3
        assert store.take_leases(["a", "b", "c"], "other", TTL, now + 2) == []
        assert store.take_leases([], "orch", TTL, now) == []
    finally:
        store.close()


def test_another_owners_valid_lease_is_left_alone_an_expired_or_own_one_taken(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        now = time.time()
        _runs(store, ["held", "expired"], now)
        store.acquire_lease("held", "someone", TTL, now)
        store.acquire_lease("expired", "dead", 5.0, now)
        taken = store.take_leases(["held", "expired"], "orch", TTL, now + 10)
        assert [(lease.run_id, lease.token) for lease, _, _ in taken] == [("expired", 3)]
        assert store.get_run("held").lease_owner == "someone"
        # A take whose commit landed but whose answer was lost is taken again, by its owner.
        again = store.take_leases(["held", "expired"], "orch", TTL, now + 11)
        assert [(lease.run_id, lease.token) for lease, _, _ in again] == [("expired", 4)]
    finally:
        store.close()


def test_a_row_another_transaction_holds_is_skipped_without_waiting(pg_url: str) -> None:
    """A run whose row is locked (another orchestrator taking or appending to it) is left
    out at once: the look goes on with the others instead of queueing behind that lock."""
    store = PostgresStore(pg_url)
    try:
        now = time.time()
        _runs(store, ["a", "b"], now)
        with psycopg.connect(pg_url) as other:
            other.execute("SELECT 1 FROM runs WHERE run_id = 'a' FOR UPDATE")
            started = time.monotonic()
            taken = store.take_leases(["a", "b"], "orch", TTL, now + 1)
            assert time.monotonic() - started < 2.0
            assert [lease.run_id for lease, _, _ in taken] == ["b"]
        assert store.get_run("a").lease_owner is None
    finally:
        store.close()
