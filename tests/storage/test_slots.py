"""Concurrency-key slots on every backend: at most `limit` live runs of a key hold one, runs
of a key start in the order they were created, and two handles (two processes) taking the
last slot at once never both get it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from interlock.storage.base import Store

from .test_conformance import T0, TTL, batch, make_run

LIMIT = 2


def leased_run(store: Store, run_id: str, at: float) -> None:
    """A run created at `at` whose orchestrator holds its lease."""
    make_run(store, run_id, at=at)
    store.acquire_lease(run_id, "orch", TTL, T0)


def end(store: Store, run_id: str) -> None:
    """Record the run as delivered (it no longer counts)."""
    lease = store.acquire_lease(run_id, "orch", TTL, T0)
    store.append(batch(lease, "done", status="delivered"), T0)


def test_a_key_has_at_most_limit_slots_and_they_free_when_runs_end(store: Store) -> None:
    """Two runs of a key get slots, a third waits; another key is not affected; once one of
    the two ends, the third gets its slot."""
    for number in range(1, 5):
        leased_run(store, f"r{number}", T0 + number)
    assert store.take_slot("r1", "p/acme", LIMIT, T0)
    assert store.take_slot("r2", "p/acme", LIMIT, T0)
    assert not store.take_slot("r3", "p/acme", LIMIT, T0)
    assert store.take_slot("r4", "p/beta", LIMIT, T0)
    assert store.take_slot("r1", "p/acme", LIMIT, T0)  # held already: still held
    end(store, "r1")
    assert store.take_slot("r3", "p/acme", LIMIT, T0)


def test_runs_of_a_key_start_in_the_order_they_were_created(store: Store) -> None:
    """A freed slot goes to the oldest waiting run while its orchestrator still asks; once
    nobody asks for it (its lease ran out), a newer run may have the slot."""
    for number in range(1, 5):
        leased_run(store, f"r{number}", T0 + number)
    assert store.take_slot("r1", "p/acme", 1, T0)
    assert not store.take_slot("r2", "p/acme", 1, T0)
    assert not store.take_slot("r3", "p/acme", 1, T0)
    end(store, "r1")
    assert not store.take_slot("r3", "p/acme", 1, T0)  # r2 is older and still asks
    assert store.take_slot("r2", "p/acme", 1, T0)
    end(store, "r2")
    later = T0 + TTL + 1  # r3's lease has run out: nobody drives it
    store.acquire_lease("r4", "orch", TTL, later)
    assert store.take_slot("r4", "p/acme", 1, later)


def test_two_handles_racing_for_slots_never_exceed_the_limit(
    opener: Callable[[], Store],
) -> None:
    """Eight runs of one key ask at once through four handles: exactly two get a slot."""
    first = opener()
    for number in range(8):
        leased_run(first, f"r{number}", T0)  # created together: no order between them
    handles = [first, *(opener() for _ in range(3))]
    barrier = threading.Barrier(8)
    got: list[str] = []

    def ask(number: int) -> None:
        barrier.wait()
        if handles[number % 4].take_slot(f"r{number}", "p/acme", LIMIT, T0 - 1):
            got.append(f"r{number}")

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == LIMIT


def test_unowned_runs_take_turns_between_keys(pg_database: str) -> None:
    """Orchestrators looking for runs get each key's oldest run first: with four acme runs
    created before two beta runs, a look at four takes two of each."""
    from interlock.storage.postgres import PostgresStore

    store = PostgresStore(pg_database)
    try:
        names = [f"acme-{n}" for n in range(4)] + [f"beta-{n}" for n in range(2)]
        for number, name in enumerate(names):
            make_run(store, name, at=T0 + number)
            store.take_slot(name, f"p/{name.split('-')[0]}", 10, T0)  # marks its key
        assert set(store.unowned_runs(T0, 4)) == {"acme-0", "acme-1", "beta-0", "beta-1"}
    finally:
        store.close()


def test_unowned_runs_pass_over_runs_whose_key_has_no_free_slot(pg_database: str) -> None:
    """A run waiting for a slot of a full key is not offered to orchestrators; once the run
    holding the slot ends, it is."""
    from interlock.storage.postgres import PostgresStore

    store = PostgresStore(pg_database)
    try:
        make_run(store, "holder", at=T0)
        make_run(store, "waiter", at=T0 + 1)
        assert store.take_slot("holder", "p/acme", 1, T0)
        assert not store.take_slot("waiter", "p/acme", 1, T0)
        store.acquire_lease("holder", "orch", TTL, T0)
        assert store.unowned_runs(T0, 10) == []
        end(store, "holder")
        assert store.unowned_runs(T0, 10) == ["waiter"]
    finally:
        store.close()
