"""Task concurrency keys: an attempt of a worker with `concurrency:` waits for a slot first.

The engine never dispatches such an attempt until the run's history holds a `TaskSlotTaken`
for it: the decision that would dispatch it records a `TaskSlotAwaited` instead (once), and
the runtime asks the store for a slot of the key (`interlock.runtime.task_slots`). Waiting
happens before dispatch, so neither the attempt's timeout nor any deadline counted from its
dispatch runs meanwhile, and a waiting attempt holds nothing but its place in the queue.
A slot is held until the attempt ends or the run does (`interlock.core.state.apply`).
"""

from __future__ import annotations

import json
from typing import Any

from interlock.core import events as ev
from interlock.core.expressions import ExpressionError, evaluate_text
from interlock.core.state import RunState
from interlock.core.visit_items import visit_item
from interlock.core.workflow import Pipeline, Worker

KEY_NAMES = frozenset({"topic", "inputs", "item", "model"})  # what a task's key may read


def key_context(state: RunState, event: ev.TaskDispatched) -> dict[str, Any]:
    """What a task's key reads: the run's topic and inputs, the attempt's fan-out item (null
    outside a fan-out) and model alias (null for workers that call none)."""
    item = visit_item(state, event.phase, event.visit, event.item)
    if item is not None:
        item = _object(item)
    return {"topic": state.topic, "inputs": state.inputs, "item": item, "model": event.model}


def _object(item: Any) -> Any:
    """An item as its key reads it: an extracted list keeps each object item as JSON text
    (`interlock.core.extract`), so `item.customer` reads that object's field."""
    if isinstance(item, str) and item.startswith("{"):
        try:
            parsed = json.loads(item)
        except ValueError:
            return item
        return parsed if isinstance(parsed, dict) else item
    return item


def gate(
    pipeline: Pipeline, state: RunState, event: ev.TaskDispatched, now: float, *, exploring: bool
) -> tuple[ev.Event | None, str]:
    """What to record instead of dispatching `event`, and why.

    Returns the dispatch itself when the worker has no key or the attempt holds a slot; a
    `TaskSlotAwaited` the first time the attempt finds none; None while it keeps waiting; a
    `RunFailed` when the key cannot be computed.
    """
    worker = pipeline.worker(event.role)
    slots = worker.concurrency
    if slots is None:
        return event, ""
    held = state.task_slots.get(event.task_id)
    if held is not None and held.attempt == event.attempt:
        return event, ""
    waiting = state.task_slot_waits.get(event.task_id)
    if waiting is not None and waiting.attempt == event.attempt:
        return None, ""
    try:
        value = "check" if exploring else evaluate_text(slots.key, key_context(state, event))
    except ExpressionError as exc:
        reason = f"task {event.task_id}: its worker's concurrency key cannot be computed: {exc}"
        return ev.RunFailed(at=now, reason=reason, task_id=event.task_id), reason
    awaited = ev.TaskSlotAwaited(
        at=now,
        task_id=event.task_id,
        role=event.role,
        attempt=event.attempt,
        key=value,
        limit=slots.limit,
    )
    why = (
        f"attempt {event.attempt} of {event.task_id} first takes a slot of "
        f"{shown(worker, value)} (at most {slots.limit} at once)"
    )
    return awaited, why


def shown(worker: Worker, value: str) -> str:
    """The key as people read it: `inputs.customer = acme`."""
    assert worker.concurrency is not None
    return f"{worker.concurrency.key} = {value}"
