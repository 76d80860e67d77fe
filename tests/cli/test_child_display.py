"""The live display of a run that drives its child run in the same process."""

from __future__ import annotations

import io

from rich.console import Console

from interlock.cli.display import LiveProgress
from interlock.core import events as ev
from interlock.core.loader import build_workflow
from interlock.core.state import fold
from interlock.storage.base import NewEvent

FLOW = {
    "parent": {
        "phases": [{"id": "p", "workers": [{"role": "sub", "pipeline": "child", "final": True}]}]
    },
    "child": {"phases": [{"id": "c", "workers": [{"role": "cw", "model": "m", "final": True}]}]},
}


def created(run_id: str, pipeline: str) -> ev.RunCreated:
    """The first event of a run."""
    return ev.RunCreated(at=0.0, run_id=run_id, pipeline=pipeline, definition_hash="", topic="t")


def test_a_childs_events_are_lines_of_their_own_and_never_the_parents_table() -> None:
    """Off a terminal a child's events are printed with its run id; on one, the table keeps
    showing the parent (the child's state would not fit the parent's pipeline)."""
    parent = build_workflow(FLOW).get("parent")
    child_event = NewEvent(event=created("kid", "child"))
    child_state = fold([child_event.event])
    text = io.StringIO()
    lines = LiveProgress(Console(file=text, width=200), parent, "dad")
    lines.on_event("kid", 1, child_event, child_state)
    assert "kid    1 run_created" in text.getvalue() and lines.state is None
    table = LiveProgress(Console(file=io.StringIO(), force_terminal=True), parent, "dad")
    with table:
        table.on_event("kid", 1, child_event, child_state)
        assert table.state is None
        parent_event = NewEvent(event=created("dad", "parent"))
        table.on_event("dad", 1, parent_event, fold([parent_event.event]))
        assert table.state is not None and table.state.run_id == "dad"
