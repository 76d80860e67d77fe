"""Task concurrency-key slots on every backend: at most `limit` attempts of a key hold one
among live runs, the oldest waiting attempt of a key goes first, an attempt that ended frees
its slot, a run whose orchestrator died keeps its slots until it is taken up again, and
handles racing for the last slot never both get it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from interlock.storage.base import Store

from .test_conformance import T0, TTL, batch, make_run


def leased(store: Store, run_id: str) -> None:
    """A run whose orchestrator holds its lease."""
    make_run(store, run_id)
    store.acquire_lease(run_id, "orch", TTL, T0)


def take(store: Store, run_id: str, task_id: str, asked: float, now: float = T0) -> bool:
    """Ask for a slot of key `p/w/acme` (limit 2) for attempt 1 of the task."""
    return store.take_task_slot(run_id, task_id, 1, "p/w/acme", 2, asked, now)


def test_a_key_has_at_most_limit_slots_and_an_ended_attempt_frees_its_own(store: Store) -> None:
    """Two attempts get slots, a third waits; another key is not affected; once the run
    drops the row of an attempt that ended, the third gets its slot."""
    leased(store, "r1")
    leased(store, "r2")
    assert take(store, "r1", "w@1.0", T0)
    assert take(store, "r1", "w@1.1", T0 + 1)
    assert not take(store, "r2", "w@1", T0 + 2)
    assert store.take_task_slot("r2", "v@1", 1, "p/v/acme", 1, T0 + 2, T0)
    assert take(store, "r1", "w@1.0", T0)  # held already: still held
    store.keep_task_slots("r1", {"w@1.1": 1})
    assert take(store, "r2", "w@1", T0 + 2)


def test_the_oldest_waiting_attempt_of_a_key_goes_first(store: Store) -> None:
    """A freed slot goes to the attempt that has waited longest while its run is driven;
    once nobody drives that run (its lease ran out), a newer attempt may have it."""
    for run_id in ("holder", "old", "new"):
        leased(store, run_id)
    assert store.take_task_slot("holder", "w@1", 1, "k", 1, T0, T0)
    assert not store.take_task_slot("old", "w@1", 1, "k", 1, T0 + 1, T0)
    assert not store.take_task_slot("new", "w@1", 1, "k", 1, T0 + 2, T0)
    store.keep_task_slots("holder", {})
    assert not store.take_task_slot("new", "w@1", 1, "k", 1, T0 + 2, T0)  # old asked first
    assert store.take_task_slot("old", "w@1", 1, "k", 1, T0 + 1, T0)
    store.keep_task_slots("old", {})
    later = T0 + TTL + 1  # new's lease is renewed; nobody else asks
    store.acquire_lease("new", "orch", TTL, later)
    assert store.take_task_slot("new", "w@1", 1, "k", 1, T0 + 2, later)


def test_a_run_that_ended_frees_its_slots_and_one_whose_driver_died_keeps_them(
    store: Store,
) -> None:
    """A run that ended holds no slot. A run whose lease ran out (its orchestrator died)
    keeps its slots, since its attempt may still run on a worker, until whoever takes it up
    drops the rows its ledger does not hold; meanwhile it does not hold back waiters."""
    for run_id in ("ended", "orphan", "next"):
        leased(store, run_id)
    assert store.take_task_slot("ended", "w@1", 1, "k", 1, T0, T0)
    assert store.take_task_slot("orphan", "w@1", 1, "j", 1, T0, T0)
    assert not store.take_task_slot("next", "w@1", 1, "k", 1, T0 + 1, T0)
    assert not store.take_task_slot("next", "v@1", 1, "j", 1, T0 + 1, T0)
    lease = store.acquire_lease("ended", "orch", TTL, T0)
    store.append(batch(lease, "done", status="delivered"), T0)
    assert store.take_task_slot("next", "w@1", 1, "k", 1, T0 + 1, T0)
    later = T0 + TTL + 1
    store.acquire_lease("next", "orch", TTL, later)
    assert not store.take_task_slot("next", "v@1", 1, "j", 1, T0 + 1, later)
    store.acquire_lease("orphan", "other", TTL, later)  # taken up: its ledger holds nothing
    store.keep_task_slots("orphan", {})
    assert store.take_task_slot("next", "v@1", 1, "j", 1, T0 + 1, later)


def test_a_new_attempt_asks_again_from_the_back(store: Store) -> None:
    """A task's next attempt replaces its previous row: it no longer holds the slot its
    failed attempt had, and waits behind attempts that asked before it."""
    leased(store, "r")
    assert store.take_task_slot("r", "w@1", 1, "k", 1, T0, T0)
    assert store.take_task_slot("r", "w@1", 2, "k", 1, T0 + 5, T0)  # the only asker
    assert not store.take_task_slot("r", "v@1", 1, "k", 1, T0 + 1, T0)
    store.keep_task_slots("r", {"v@1": 1})
    assert store.take_task_slot("r", "v@1", 1, "k", 1, T0 + 1, T0)


def test_handles_racing_for_task_slots_never_exceed_the_limit(
    opener: Callable[[], Store],
) -> None:
    """Eight attempts of one key ask at once through four handles: exactly two get a slot."""
    first = opener()
    leased(first, "r")
    handles = [first, *(opener() for _ in range(3))]
    barrier = threading.Barrier(8)
    got: list[int] = []

    def ask(number: int) -> None:
        barrier.wait()
        if handles[number % 4].take_task_slot("r", f"w@1.{number}", 1, "k", 2, T0, T0):
            got.append(number)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 2
