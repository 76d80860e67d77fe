"""A fan-out lane whose item failed for good gives back the task slots its undispatched
workers waited for or held, so no other attempt waits behind them."""

from __future__ import annotations

from interlock.core import events as ev
from interlock.core.state import fold


def test_a_failed_lane_stops_waiting_for_task_slots() -> None:
    at = 1.0
    history: list[ev.Event] = [
        ev.RunCreated(at=at, run_id="r", pipeline="p", topic="t", definition_hash="h"),
        ev.PhaseStarted(at=at, phase="q", visit=1, items=["a", "b"]),
        ev.TaskDispatched(at=at, task_id="w@1.1", phase="q", role="w", visit=1, item=1, attempt=1),
        ev.TaskSlotAwaited(at=at, task_id="x@1.1", role="x", attempt=1, key="k", limit=1),
        ev.TaskSlotAwaited(at=at, task_id="y@1.1", role="y", attempt=1, key="k", limit=1),
        ev.TaskSlotTaken(at=at, task_id="y@1.1", attempt=1, key="k"),
        ev.TaskSlotAwaited(at=at, task_id="x@1.0", role="x", attempt=1, key="k", limit=1),
        ev.TaskFailed(at=at, task_id="w@1.1", attempt=1, error="bad"),
        ev.ItemFailed(at=at, task_id="w@1.1", phase="q", visit=1, item=1, error="bad", failed=1),
    ]
    state = fold(history)
    assert set(state.task_slot_waits) == {"x@1.0"}  # the other lane's still waits
    assert state.task_slots == {}
