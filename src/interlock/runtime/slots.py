"""Concurrency keys: a run of a pipeline with `concurrency:` starts once it holds a slot.

The key (a CEL expression over topic and inputs) is computed when the run is created; an
error there refuses the run. The engine waits before a run's first phase until `SlotTaken`
is recorded (`interlock.core.decide.waits_for_slot`); the orchestrator asks the store for a
slot (`Store.take_slot`, atomic across every orchestrator of the store) each time it looks
at the run, and again every `SLOT_POLL_S` while there is none (less often when many wait).
Within a key runs start in the order they were created; runs of different keys never wait
for each other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import waits_for_slot
from interlock.core.expressions import ExpressionError, evaluate_text
from interlock.core.loader import Definition
from interlock.core.state import RunState, apply
from interlock.errors import StorageError, UsageError
from interlock.storage.base import NewEvent, Store

log = logging.getLogger("interlock.runtime")
SLOT_POLL_S = 0.5  # how often a run waiting for a slot asks again
SLOT_ASKS_PER_S = 100  # at most, from one orchestrator, however many runs it holds wait


def slot_poll(waiting: int) -> float:
    """Seconds before a waiting run asks again, when `waiting` runs of one orchestrator wait:
    SLOT_POLL_S, or longer so that their asks stay near SLOT_ASKS_PER_S together."""
    return max(SLOT_POLL_S, waiting / SLOT_ASKS_PER_S)


def slot_key(definition: Definition, topic: str, inputs: Mapping[str, Any]) -> str | None:
    """The value of the run's concurrency key (None: the pipeline has no concurrency).

    Raises:
        UsageError: the key cannot be computed from this topic and these inputs.
    """
    slots = definition.pipeline.slots
    if slots is None:
        return None
    try:
        return evaluate_text(slots.key, {"topic": topic, "inputs": dict(inputs)})
    except ExpressionError as exc:
        raise UsageError(
            f"pipeline {definition.name!r}, concurrency key: {exc}; give the input it reads "
            "(--input NAME=VALUE) or a default in the pipeline's inputs"
        ) from None


def store_key(definition: Definition, value: str) -> str:
    """The key as the store counts it: runs of different pipelines never share slots."""
    return f"{definition.name}\x1f{value}"


def awaiting(definition: Definition, state: RunState, now: float) -> list[NewEvent]:
    """`SlotAwaited` the first time the run finds no slot (applied to `state`), so that it is
    listed as waiting and says for what; nothing after that."""
    slots = definition.pipeline.slots
    if slots is None or state.slot_awaited is not None or state.slot is not None:
        return []
    value = slot_key(definition, state.topic, state.inputs)
    assert value is not None
    event = ev.SlotAwaited(at=now, key=value, limit=slots.limit)
    apply(state, event)
    return [NewEvent(event=event, why=f"{_shown(slots.key, value)} has no free slot")]


def _shown(key: str, value: str) -> str:
    return f"{key} = {value}" if key != '""' else "the pipeline"


def take_slot(store: Store, definition: Definition, state: RunState, now: float) -> NewEvent | None:
    """The `SlotTaken` to record when the waiting run gets a slot now; None otherwise
    (then the caller asks again after `SLOT_POLL_S`). Applies the event to `state`."""
    if not waits_for_slot(definition.pipeline, state):
        return None
    slots = definition.pipeline.slots
    assert slots is not None
    value = slot_key(definition, state.topic, state.inputs)
    assert value is not None
    try:
        taken = store.take_slot(state.run_id, store_key(definition, value), slots.limit, now)
    except StorageError as exc:
        log.warning("cannot take a slot: %s", exc, extra={"run_id": state.run_id})
        return None
    if not taken:
        return None
    event = ev.SlotTaken(at=now, key=value)
    apply(state, event)
    shown = _shown(slots.key, value)
    return NewEvent(event=event, why=f"a slot of {shown} (at most {slots.limit} at once)")
