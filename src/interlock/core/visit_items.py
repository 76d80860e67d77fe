"""The fan-out item of a task, read from the phase visit it belongs to."""

from __future__ import annotations

from typing import Any

from interlock.core.state import RunState


def visit_item(state: RunState, phase: str, visit: int, item: int | None) -> Any:
    """The item `item` of visit `visit` of `phase`, or None when not known here.

    Only the run's current visit keeps its items. A task of another visit may still run: an
    edit at a review runs again the tasks that read the old version, in whatever phase and
    visit they ran. The items of the current visit are not its items (another phase's list,
    or a later visit's, which may be shorter), so none is given rather than a wrong one.
    """
    current = state.current
    if item is None or current is None or (current.phase, current.visit) != (phase, visit):
        return None
    items = current.items
    if items is None or not 0 <= item < len(items):
        return None
    return items[item]
