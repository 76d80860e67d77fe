"""The orchestrator's keeper of task slots (`interlock.runtime.task_slots.TaskSlots`) on an
in-memory store: after a commit that may not have landed it catches the store up with the
ledger before asking again, and the attempts of a paused run that did not ask are known to
ask once it runs again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from interlock.core import events as ev
from interlock.core.loader import Definition, build_workflow
from interlock.core.state import RunState, fold
from interlock.runtime.task_slots import TaskSlots, ledger_slots, store_key
from interlock.testing import MemoryStore

if TYPE_CHECKING:
    from interlock.runtime.driver import RunDriver

RUN = "run-1"
NOW = 100.0


def definition() -> Definition:
    """A planner, then a fan-out whose worker `w` takes one slot of one key at a time."""
    fan = {
        "id": "fan",
        "for_each": {"items": "p.items"},
        "workers": [{"role": "w", "model": "m", "concurrency": {"key": "'k'", "limit": 1}}],
    }
    plan = {
        "id": "plan",
        "workers": [
            {"role": "p", "model": "m", "extract": {"items": {"json": "i", "type": "list"}}}
        ],
    }
    merge = {"id": "merge", "workers": [{"role": "m", "model": "m", "final": True}]}
    return build_workflow({"p": {"phases": [plan, fan, merge]}}).get("p")


@dataclass
class Driver:
    """What the keeper reads of a run's driver."""

    run_id: str
    state: RunState
    definition: Definition


def history(*, second_waits: bool, first_ended: bool) -> list[ev.Event]:
    """Item 0's attempt holds the key's slot; then (optionally) it completed and item 1's
    attempt waits for the slot."""
    created = ev.RunCreated(at=0.0, run_id=RUN, pipeline="p", definition_hash="h", topic="t")
    events: list[ev.Event] = [
        created,
        ev.PhaseStarted(at=1.0, phase="fan", visit=1, items=["a", "b"]),
        ev.TaskSlotAwaited(at=1.0, task_id="w@1.0", role="w", attempt=1, key="k", limit=1),
        ev.TaskSlotTaken(at=1.0, task_id="w@1.0", attempt=1, key="k"),
        ev.TaskDispatched(
            at=1.0, task_id="w@1.0", phase="fan", role="w", visit=1, item=0, attempt=1, model="m"
        ),
    ]
    if first_ended:
        events.append(
            ev.TaskCompleted(
                at=2.0, task_id="w@1.0", attempt=1, artifact="w.0.md", sha256="0" * 64, size=1
            )
        )
    if second_waits:
        events.append(
            ev.TaskSlotAwaited(at=2.0, task_id="w@1.1", role="w", attempt=1, key="k", limit=1)
        )
    return events


def keeper_with_first_slot_held() -> tuple[MemoryStore, TaskSlots, Driver]:
    """A store whose only slot of the key is item 0's, as the keeper last told it."""
    store = MemoryStore()
    store.create_run(
        run_id=RUN,
        pipeline="p",
        topic="t",
        definition_hash="h",
        definition="",
        source="",
        created_at=0.0,
    )
    store.acquire_lease(RUN, "me", 60.0, NOW)
    driver = Driver(RUN, fold(history(second_waits=False, first_ended=False)), definition())
    key = store_key("p", "w", "k")
    assert store.take_task_slot(RUN, "w@1.0", 1, key, 1, 1.0, NOW)
    slots = TaskSlots(store)
    slots.take([cast("RunDriver", driver)], NOW)  # the run's first look: in step with the store
    return store, slots, driver


def test_a_run_rebuilt_from_its_ledger_frees_what_a_commit_that_landed_ended() -> None:
    """A commit reported as failed had landed: item 0's attempt ended and item 1's waits.
    Rebuilt from the ledger, the run's next look drops item 0's row before asking, so item 1
    gets the slot instead of waiting for a slot nothing holds."""
    _, slots, driver = keeper_with_first_slot_held()
    driver.state = fold(history(second_waits=True, first_ended=True))
    slots.reloaded(RUN)
    taken = slots.take([cast("RunDriver", driver)], NOW + 1)
    assert [n.event for n in taken[RUN]] == [
        ev.TaskSlotTaken(at=NOW + 1, task_id="w@1.1", attempt=1, key="k")
    ]
    assert RUN not in slots.waiting()
    assert ledger_slots(driver.state) == {"w@1.1": 1}


def test_a_commit_that_did_not_land_keeps_the_slot_of_the_attempt_still_running() -> None:
    """Rebuilt from a ledger where item 0's attempt still runs, the run keeps its slot: item
    1, whose wait was not recorded, neither holds nor waits."""
    store, slots, driver = keeper_with_first_slot_held()
    slots.reloaded(RUN)
    assert slots.take([cast("RunDriver", driver)], NOW + 1) == {}
    key = store_key("p", "w", "k")
    assert not store.take_task_slot("run-2", "w@1.0", 1, key, 1, 2.0, NOW + 1)


def test_attempts_of_a_paused_run_ask_once_it_runs_again() -> None:
    """A paused run's waiting attempt does not ask (a slot would sit idle) and is not left
    polling; once an approval lets the run go on, the keeper says it has to ask."""
    _, slots, driver = keeper_with_first_slot_held()
    paused = [
        *history(second_waits=True, first_ended=True),
        ev.Paused(at=3.0, phase="fan", visit=1, reason="budget"),
    ]
    driver.state = fold(paused)
    assert slots.take([cast("RunDriver", driver)], NOW + 1) == {}
    assert RUN not in slots.waiting()
    assert not slots.resumed(cast("RunDriver", driver))
    driver.state = fold([*paused, ev.Approved(at=4.0, message="ok")])
    assert slots.resumed(cast("RunDriver", driver))
    slots.take([cast("RunDriver", driver)], NOW + 2)
    assert not slots.resumed(cast("RunDriver", driver))  # it asked
