"""The live view of `interlock run` on a terminal between events: its clock goes on, and a
running task shows the latest line its model streamed."""

from __future__ import annotations

import io
import time
from typing import Any

from rich.console import Console

from interlock.cli.display import LiveProgress, latest_line
from interlock.core import events as ev
from interlock.core.loader import build_workflow
from interlock.core.state import RunState, fold
from interlock.storage.base import NewEvent

FLOW = {"p": {"phases": [{"id": "a", "workers": [{"role": "w", "model": "m", "final": True}]}]}}


def running() -> list[ev.Event]:
    """A run whose one task has started."""
    return [
        ev.RunCreated(at=0.0, run_id="r1", pipeline="p", definition_hash="h", topic="t"),
        ev.PhaseStarted(at=0.0, phase="a", visit=1),
        ev.TaskDispatched(
            at=0.0, task_id="w@1", phase="a", role="w", visit=1, item=None, attempt=1, model="m"
        ),
        ev.TaskStarted(at=0.0, task_id="w@1", attempt=1),
    ]


def render(renderable: Any) -> str:
    """`renderable` as plain text."""
    text = io.StringIO()
    Console(file=text, width=100, color_system=None).print(renderable)
    return text.getvalue()


def shown(view: LiveProgress, now: float) -> str:
    """What the terminal shows at `now`, as plain text."""
    return render(view.frame(now))


def live_view(events: list[ev.Event]) -> tuple[LiveProgress, RunState]:
    """A live view on a terminal, told of the last of `events`."""
    terminal = Console(file=io.StringIO(), force_terminal=True)
    return LiveProgress(terminal, build_workflow(FLOW).get("p"), "r1"), fold(events)


def test_the_clock_goes_on_between_events() -> None:
    """With no event for seconds, each frame shows the time since the command started, and
    the terminal's view is drawn from those frames (not from the last event's table)."""
    view, state = live_view(running())
    with view:
        assert view.live is not None
        view.on_event("r1", 4, NewEvent(event=running()[-1]), state)
        assert "1.0s" in shown(view, view.started + 1.0)
        later = shown(view, view.started + 7.5)
        assert "7.5s" in later and "1.0s" not in later
        # What the terminal redraws is a frame made at that moment: 0.3 s later, another.
        before = render(view.live.renderable)
        time.sleep(0.3)
        assert render(view.live.renderable) != before and "w" in before


def test_a_running_task_shows_the_latest_line_it_streamed() -> None:
    """Fragments of a running task's answer show as its latest line, across fragments; a
    child run's fragments and a task that ended show none."""
    view, state = live_view(running())
    with view:
        view.on_event("r1", 4, NewEvent(event=running()[-1]), state)
        view.on_progress("r1", "w@1", "Title\n\nThe first para")
        view.on_progress("r1", "w@1", "graph so far")
        view.on_progress("kid", "x@1", "a child's own words")
        text = shown(view, view.started)
        assert "w@1: The first paragraph so far" in text
        assert "Title" not in text and "child" not in text
        done = ev.TaskCompleted(
            at=1.0, task_id="w@1", attempt=1, artifact="w.md", sha256="0" * 64, size=2
        )
        view.on_event("r1", 5, NewEvent(event=done), fold([*running(), done]))
        assert "paragraph" not in shown(view, view.started) and view.streamed == {}


def test_the_latest_line_is_the_last_with_something_on_it() -> None:
    """A stream that ends in blank lines shows its last line of text, spaces collapsed, and
    an escape sequence a model wrote is shown, not sent to the terminal."""
    assert latest_line("one\n  two   words \n\n  \n") == "two words"
    assert latest_line("\n\n") == ""
    assert latest_line("clear \x1b[2J now") == "clear \\x1b[2J now"
