"""Task concurrency keys at run time: slots for the attempts that wait, and their release.

The engine records `TaskSlotAwaited` instead of dispatching an attempt of a worker with
`concurrency:` (`interlock.core.task_slots`). Each tick, the orchestrator asks the store for a
slot for every waiting attempt of the runs it looks at (`Store.take_task_slot`, atomic across
every orchestrator of the store) and records `TaskSlotTaken` for those that got one, before
the engine decides: the attempt is dispatched in the same tick. Within a key they ask oldest
first and stop at the first refusal. Waiting attempts ask again every `SLOT_POLL_S` (less
often when many runs wait), and at once when an attempt of this process frees a slot.

A slot is held in the store while the ledger says the attempt holds it: after each commit
the rows of attempts that ended are dropped (`Store.keep_task_slots`), and a run taken up
from its ledger first drops what an orchestrator that died did not get to. Until a run whose
orchestrator died is taken up again (`interlock resume`, or another orchestrator of a fleet)
its slots stay held: the attempt may still be running on a worker, and the limit is never
exceeded.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from interlock.core import events as ev
from interlock.core.state import RunState, RunStatus, apply
from interlock.core.task_slots import shown
from interlock.errors import StorageError
from interlock.runtime.slots import slot_poll
from interlock.storage.base import NewEvent, Store

if TYPE_CHECKING:
    from interlock.runtime.driver import RunDriver

log = logging.getLogger("interlock.runtime")


def store_key(pipeline: str, role: str, value: str) -> str:
    """The key as the store counts it: each worker of each pipeline has its own slots."""
    return f"{pipeline}\x1f{role}\x1f{value}"


def ledger_slots(state: RunState) -> dict[str, int]:
    """task id -> attempt of every attempt the ledger says waits for or holds a slot."""
    held = {t: e.attempt for t, e in state.task_slots.items()}
    return {t: w.attempt for t, w in state.task_slot_waits.items()} | held


def fair_order(waits: Iterable[tuple[str, ev.TaskSlotAwaited, RunDriver]]) -> list[int]:
    """Indexes of `waits` (store key, wait, driver) in the order to ask: oldest first within
    a key, and round-robin between keys (the first of each key before the second of any), so
    a key with a long backlog does not crowd out the others."""
    lanes: dict[str, list[tuple[float, str, str, int]]] = defaultdict(list)
    for index, (key, wait, driver) in enumerate(waits):
        lanes[key].append((wait.at, driver.run_id, wait.task_id, index))
    for lane in lanes.values():
        lane.sort()
    keys = sorted(lanes, key=lambda k: (lanes[k][0], k))
    order: list[int] = []
    for turn in range(max((len(lane) for lane in lanes.values()), default=0)):
        order += [lanes[k][turn][3] for k in keys if turn < len(lanes[k])]
    return order


class TaskSlots:
    """One orchestrator's side of task concurrency keys."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._synced: dict[str, dict[str, int]] = {}  # run -> what the store was last told
        self._waiters: set[str] = set()  # runs with an attempt that asked and got no slot
        self._paused: set[str] = set()  # runs with waiting attempts that did not ask: paused

    def take(self, dirty: list[RunDriver], now: float) -> dict[str, list[NewEvent]]:
        """`TaskSlotTaken` for each waiting attempt of `dirty` that gets a slot now (applied
        to its run's state), by run; runs that still wait are left in `waiting()`."""
        waits = []
        for driver in dirty:
            state = driver.state
            if not driver.definition.pipeline.task_keys:
                continue
            if driver.run_id not in self._synced:  # taken up from the ledger: catch up first
                self._sync(driver.run_id, ledger_slots(state))
            if state.status is not RunStatus.RUNNING:
                if state.task_slot_waits:  # they ask once it runs again (`resumed`)
                    self._paused.add(driver.run_id)
                continue  # a paused run dispatches nothing: a slot would sit idle
            self._paused.discard(driver.run_id)
            for wait in state.task_slot_waits.values():
                waits.append((store_key(state.pipeline, wait.role, wait.key), wait, driver))
        found: dict[str, list[NewEvent]] = {}
        still: set[str] = set()
        full: set[str] = set()  # keys that refused an attempt in this look
        for index in fair_order(waits):
            key, wait, driver = waits[index]
            if key in full:
                # A younger attempt of a key that just refused an older one would be refused
                # too: not asking keeps a backlog of thousands at one ask per key and look.
                still.add(driver.run_id)
                continue
            try:
                taken = self.store.take_task_slot(
                    driver.run_id, wait.task_id, wait.attempt, key, wait.limit, wait.at, now
                )
            except StorageError as exc:
                log.warning("cannot take a task slot: %s", exc, extra={"run_id": driver.run_id})
                taken = False
            synced = self._synced.setdefault(driver.run_id, {})
            synced[wait.task_id] = wait.attempt
            if not taken:
                still.add(driver.run_id)
                full.add(key)
                continue
            event = ev.TaskSlotTaken(
                at=now, task_id=wait.task_id, attempt=wait.attempt, key=wait.key
            )
            apply(driver.state, event)
            worker = driver.definition.pipeline.worker(wait.role)
            why = f"a slot of {shown(worker, wait.key)} (at most {wait.limit} at once)"
            found.setdefault(driver.run_id, []).append(NewEvent(event=event, why=why))
        self._waiters -= {d.run_id for d in dirty}
        self._waiters |= still
        return found

    def reloaded(self, run_id: str) -> None:
        """The run's state was rebuilt from its ledger after a commit that failed or may have
        failed: what the store was told may not match it (an attempt that ended in a commit
        that did land still holds its row), so its next look catches up first."""
        self._synced.pop(run_id, None)

    def resumed(self, driver: RunDriver) -> bool:
        """Whether the run has attempts that did not ask for their slot while it was paused
        and it runs again: they ask now, as nothing else would wake them."""
        return driver.run_id in self._paused and driver.state.status is RunStatus.RUNNING

    def waiting(self) -> set[str]:
        """Runs with an attempt that asked for a slot and got none."""
        return self._waiters

    def poll(self) -> float:
        """Seconds before a run whose attempts got no slot asks again."""
        return slot_poll(len(self._waiters))

    def committed(self, driver: RunDriver) -> bool:
        """After the run's events were recorded: drop the store's rows of the attempts that
        no longer wait or hold (they ended, or the run did). True when a slot was freed."""
        if not driver.definition.pipeline.task_keys:
            return False
        now_held = ledger_slots(driver.state)
        before = self._synced.get(driver.run_id)
        if before is None or all(now_held.get(t) == a for t, a in before.items()):
            return False
        return self._sync(driver.run_id, now_held)

    def keep_only(self, driven: AbstractSet[str]) -> None:
        """Forget runs this process no longer drives (a later driver of one syncs again)."""
        if (
            len(self._synced) > len(driven)
            or not self._waiters <= driven
            or not self._paused <= driven
        ):
            self._synced = {r: s for r, s in self._synced.items() if r in driven}
            self._waiters &= set(driven)
            self._paused &= set(driven)

    def _sync(self, run_id: str, keep: dict[str, int]) -> bool:
        try:
            self.store.keep_task_slots(run_id, keep)
        except StorageError as exc:  # tried again after the run's next commit
            log.warning("cannot free task slots: %s", exc, extra={"run_id": run_id})
            return False
        self._synced[run_id] = dict(keep)
        return True
