"""Task concurrency keys in the core: an attempt of a worker with `concurrency:` records that it
waits for a slot (`TaskSlotAwaited`) instead of being dispatched, is dispatched only once
`TaskSlotTaken` is recorded, and frees its slot when the attempt or the run ends; `check`
explores the wait and validates the key."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName, next_wake
from interlock.core.explore import explore
from interlock.core.state import listed_status
from interlock.errors import WorkflowError

from .runs import Run, pipeline_of, worker

KEY = {"key": "inputs.customer", "limit": 1}


def keyed(key: dict[str, Any] = KEY, **extra: Any) -> Any:
    """One keyed worker `w` (one retry), then a final worker `v` without a key."""
    return pipeline_of(
        {
            "inputs": {"customer": {"required": True}},
            "phases": [
                {"id": "a", "workers": [worker("w", concurrency=key, retries=1, **extra)]},
                {"id": "b", "workers": [worker("v", final=True)]},
            ],
        }
    )


PLAN = {"id": "plan", "workers": [worker("p", extract={"items": {"json": "i", "type": "list"}})]}
MERGE = {"id": "merge", "workers": [worker("m", final=True)]}


def fanned(key: dict[str, Any], cap: int | None = None) -> Any:
    """A planner extracts `items`; a keyed worker `w` runs once per item; `m` merges."""
    for_each: dict[str, Any] = {"items": "p.items"}
    if cap is not None:
        for_each["concurrency"] = cap
    fan = {"id": "fan", "for_each": for_each, "workers": [worker("w", concurrency=key)]}
    return pipeline_of({"phases": [PLAN, fan, MERGE]})


def take(driver: Run, task_id: str) -> list[Any]:
    """Record the slot the runtime got for the task's waiting attempt, then settle."""
    wait = driver.state.task_slot_waits[task_id]
    driver.record(
        ev.TaskSlotTaken(at=driver.now, task_id=task_id, attempt=wait.attempt, key=wait.key)
    )
    return driver.settle()


def test_a_keyed_task_waits_for_its_slot_before_dispatch() -> None:
    """The phase starts, but its keyed task is recorded as waiting for a slot of the key's
    value, not dispatched; the run is listed as waiting. With the slot it is dispatched."""
    driver = Run(keyed())
    made = driver.start(inputs={"customer": "acme"})
    assert [d.rule for d in made] == [RuleName.START, RuleName.TASK_SLOT]
    awaited = made[-1].event
    assert isinstance(awaited, ev.TaskSlotAwaited)
    assert (awaited.task_id, awaited.attempt, awaited.key, awaited.limit) == ("w@1", 1, "acme", 1)
    assert made[-1].why == (
        "attempt 1 of w@1 first takes a slot of inputs.customer = acme (at most 1 at once)"
    )
    assert driver.in_flight() == [] and listed_status(driver.state) == "waiting"
    assert driver.settle() == []  # waiting is recorded once
    made = take(driver, "w@1")
    assert [d.rule for d in made] == [RuleName.DISPATCH]
    assert driver.in_flight() == ["w@1"] and driver.state.task_slots["w@1"].attempt == 1


def test_no_deadline_runs_while_a_task_waits_for_its_slot() -> None:
    """A waiting attempt is not dispatched, so nothing times out however long it waits; its
    start_timeout counts from the dispatch that follows the slot, its timeout from its start."""
    driver = Run(keyed(timeout=10, grace=0))
    driver.start(inputs={"customer": "acme"})
    assert next_wake(driver.pipeline, driver.state) is None
    driver.now = 1_000.0
    assert driver.settle() == []
    take(driver, "w@1")
    assert driver.state.tasks["w@1"].dispatched_at == 1_000.0
    assert next_wake(driver.pipeline, driver.state) == 1_000.0 + 86_400
    driver.begin("w@1")
    assert next_wake(driver.pipeline, driver.state) == 1_010.0


def test_the_slot_is_freed_when_the_attempt_ends_and_a_retry_asks_again() -> None:
    """A failed attempt frees its slot; its retry, once due, waits for a slot of its own
    before it is dispatched; a completed attempt frees its slot too."""
    driver = Run(keyed())
    driver.start(inputs={"customer": "acme"})
    take(driver, "w@1")
    driver.fail("w@1")
    assert "w@1" not in driver.state.task_slots
    driver.now = 100.0
    made = driver.settle()
    assert [d.rule for d in made] == [RuleName.TASK_SLOT]
    assert driver.state.task_slot_waits["w@1"].attempt == 2
    take(driver, "w@1")
    assert driver.state.tasks["w@1"].attempt == 2
    driver.complete("w@1")
    assert driver.state.task_slots == {} and driver.state.task_slot_waits == {}


def test_an_ended_run_holds_no_slot_and_waits_for_none() -> None:
    """Cancelling a run with a task holding a slot and one waiting clears both."""
    driver = Run(fanned({"key": "item", "limit": 1}))
    driver.start()
    driver.complete("p@1", {"items": ["a", "b"]})
    take(driver, "w@1.0")
    assert set(driver.state.task_slot_waits) == {"w@1.1"}
    driver.record(ev.RunCancelled(at=driver.now, reason="stop"))
    assert driver.state.task_slots == {} and driver.state.task_slot_waits == {}


def test_a_fan_out_key_reads_the_item_and_the_phase_cap_still_holds() -> None:
    """Each item's task waits on the key of its own item; `for_each.concurrency` still caps
    how many of the phase's tasks are under way, waiting or running."""
    driver = Run(fanned({"key": "item.customer", "limit": 1}, cap=2))
    driver.start()
    items = [{"customer": c} for c in ("acme", "beta", "acme")]
    made = driver.complete("p@1", {"items": items})
    waits = [d.event for d in made if isinstance(d.event, ev.TaskSlotAwaited)]
    assert [(w.task_id, w.key) for w in waits] == [("w@1.0", "acme"), ("w@1.1", "beta")]
    take(driver, "w@1.0")
    driver.complete("w@1.0")
    assert driver.state.task_slot_waits["w@1.2"].key == "acme"


def test_a_key_that_cannot_be_computed_fails_the_run_saying_why() -> None:
    """An item without the field the key reads: the run fails naming the task and the key."""
    driver = Run(fanned({"key": "item.customer", "limit": 1}))
    driver.start()
    made = driver.complete("p@1", {"items": [{"name": "x"}]})
    assert made[-1].rule is RuleName.TASK_SLOT
    assert isinstance(made[-1].event, ev.RunFailed)
    assert "task w@1.0: its worker's concurrency key cannot be computed" in (made[-1].why or "")


def test_check_explores_the_wait_for_a_task_slot() -> None:
    """The wait is no dead end: every phase is reached and a result delivered, with and
    without the reduced search."""
    for reduce in (True, False):
        report = explore(keyed(), reduce=reduce)
        assert report.problems == [] and report.delivered
        assert report.phases_reached == {"a", "b"}


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "visits.a",
            "worker 'w', concurrency, key: 'visits.a' reads 'visits'; a task's key may read "
            "only 'topic', 'inputs', 'item' and 'model', e.g. inputs.customer",
        ),
        ("inputs.", "worker 'w', concurrency, key: expression 'inputs.' does not parse"),
        ("item.x", "reads 'item', but phase 'a' has no for_each"),
    ],
)
def test_check_refuses_a_task_key_that_reads_what_it_cannot(key: str, message: str) -> None:
    """A task's key reads topic, inputs, its item (in a fan-out) and its model, nothing else."""
    with pytest.raises(WorkflowError) as info:
        keyed({"key": key, "limit": 1})
    assert message in str(info.value)


def test_a_worker_without_a_key_keeps_its_definition_hash() -> None:
    """`concurrency` is left out of a worker's canonical form when unset."""
    plain = pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True)]}]})
    assert "concurrency" not in plain.phases[0].workers[0].model_dump(by_alias=True)


def test_a_key_reads_the_field_of_an_item_extracted_as_json_text() -> None:
    """Objects in an extracted list are kept as JSON text (as `extract` stores them): the key
    `item.customer` still reads each one's field instead of failing the run."""
    from interlock.core.extract import extract_values
    from interlock.core.workflow import Extract

    driver = Run(fanned({"key": "item.customer", "limit": 1}, cap=2))
    driver.start()
    text = '{"items": [{"customer": "acme"}, {"customer": "beta"}]}'
    items = extract_values(
        {"items": Extract.model_validate({"json": "items", "type": "list"})}, text
    )["items"]
    assert items == ['{"customer": "acme"}', '{"customer": "beta"}']
    made = driver.complete("p@1", {"items": items})
    waits = [d.event for d in made if isinstance(d.event, ev.TaskSlotAwaited)]
    assert [(w.task_id, w.key) for w in waits] == [("w@1.0", "acme"), ("w@1.1", "beta")]


def test_a_task_whose_slot_comes_after_later_tasks_were_recorded_is_still_dispatched() -> None:
    """Tasks of a keyed fan-out are recorded in the order their slots come, not plan order.
    With items 5 and 8 waiting while 0-4, 6, 7 and 9 are dispatched, and 8 recorded last, 9
    tasks are recorded and the last is the plan's 9th: that is no dispatched prefix of the
    plan, and item 5 is dispatched once its slot is taken (the run was stuck with the slot
    held and nothing in flight)."""
    driver = Run(fanned({"key": "item", "limit": 1}))
    driver.start()
    made = driver.complete("p@1", {"items": [f"k{n}" for n in range(10)]})
    assert len([d for d in made if isinstance(d.event, ev.TaskSlotAwaited)]) == 10
    for n in (0, 1, 2, 3, 4, 6, 7, 9, 8):
        made = take(driver, f"w@1.{n}")
        assert [(d.rule, getattr(d.event, "task_id", None)) for d in made] == [
            (RuleName.DISPATCH, f"w@1.{n}")
        ]
    current = driver.state.current
    assert current is not None and len(current.task_ids) == 9
    assert current.task_ids[-1] == "w@1.8"
    made = take(driver, "w@1.5")
    assert [(d.rule, getattr(d.event, "task_id", None)) for d in made] == [
        (RuleName.DISPATCH, "w@1.5")
    ]
    assert sorted(driver.in_flight()) == sorted(f"w@1.{n}" for n in range(10))
