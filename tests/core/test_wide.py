"""A wide phase costs the engine a bounded amount of work per event, whatever its width.

The work is counted, not timed: every line the engine executes (`interlock.core`) while a
run of N tasks is played to its end. Linear engines do about 4x the work for 4x the tasks; one
that scans every task at every event does 16x.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import next_wake
from interlock.engine import Recorded

from .runs import Run, pipeline_of, worker

CORE = str(Path(__file__).resolve().parents[2] / "src" / "interlock" / "core")


def lines_run(play: Callable[[], None]) -> int:
    """How many lines of `interlock.core` `play` executes."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if not frame.f_code.co_filename.startswith(CORE):
            return None  # lines of other code are not followed
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        play()
    finally:
        sys.settrace(None)
    return count


def wide_phase(width: int) -> Run:
    """A run whose first phase has `width` workers, then one final worker."""
    fan = {"id": "fan", "workers": [worker(f"w{i}") for i in range(width)]}
    end = {"id": "end", "workers": [worker("s", final=True)]}
    return Run(pipeline_of({"phases": [fan, end]}))


def fan_out(width: int) -> Run:
    """A run that fans out over `width` items, 16 at a time."""
    planner = worker("planner", extract={"items": {"json": "t", "type": "list"}})
    write = {
        "id": "write",
        "for_each": {"items": "planner.items", "concurrency": 16, "max_items": 100_000},
        "workers": [worker("writer")],
    }
    end = {"id": "end", "workers": [worker("s", final=True)]}
    return Run(pipeline_of({"phases": [{"id": "plan", "workers": [planner]}, write, end]}))


def play(driver: Run, width: int) -> None:
    """Start the run, then report each dispatched task started and completed, one event at
    a time as workers would (the clock moving on), asking for the next wake-up after each, as
    the orchestrator does; to the end."""
    queue = deque(dispatched(driver.start()))
    while queue:
        task_id = queue.popleft()
        driver.now += 0.01
        task = driver.state.tasks[task_id]
        started = ev.TaskStarted(at=driver.now, task_id=task_id, attempt=task.attempt, worker="w")
        queue += dispatched(driver.observe(started) or [])
        next_wake(driver.pipeline, driver.state)
        values = {"items": list(range(width))} if task_id == "planner@1" else None
        queue += dispatched(driver.complete(task_id, values))
        next_wake(driver.pipeline, driver.state)
    assert driver.state.status.value == "delivered"


def play_queued(driver: Run, width: int, slots: int = 8) -> None:
    """Start the run, then run its dispatched tasks `slots` at a time as a local dispatcher
    does: the rest of a wide phase waits, dispatched but not started, for a free slot."""
    waiting = deque(dispatched(driver.start()))
    running: deque[str] = deque()
    while waiting or running:
        while waiting and len(running) < slots:
            task_id = waiting.popleft()
            driver.now += 0.01
            task = driver.state.tasks[task_id]
            started = ev.TaskStarted(
                at=driver.now, task_id=task_id, attempt=task.attempt, worker="w"
            )
            waiting += dispatched(driver.observe(started) or [])
            next_wake(driver.pipeline, driver.state)
            running.append(task_id)
        driver.now += 0.01
        waiting += dispatched(driver.complete(running.popleft()))
        next_wake(driver.pipeline, driver.state)
    assert driver.state.status.value == "delivered"


def dispatched(decisions: list[Recorded]) -> list[str]:
    """The tasks these decisions dispatched."""
    return [d.event.task_id for d in decisions if isinstance(d.event, ev.TaskDispatched)]


def work(make: Callable[[int], Run], width: int) -> int:
    """Lines the engine runs to play a run of `width` tasks."""
    driver = make(width)
    return lines_run(lambda: play(driver, width))


def test_a_wide_phase_costs_the_engine_linear_work() -> None:
    """A phase of 1,200 workers costs at most ~5x what one of 300 does (16x if each event
    looked at every task)."""
    small, large = work(wide_phase, 300), work(wide_phase, 1200)
    assert large < 5 * small, (small, large)


def test_a_capped_fan_out_costs_the_engine_linear_work() -> None:
    """A fan-out over 1,200 items, 16 at a time, costs at most ~5x one over 300."""
    small, large = work(fan_out, 300), work(fan_out, 1200)
    assert large < 5 * small, (small, large)


def test_a_wide_phase_waiting_for_slots_costs_the_engine_linear_work() -> None:
    """A phase of 1,200 workers run 8 at a time, the rest waiting to start, costs at most ~5x
    what one of 300 does: the attempts waiting are not walked at every event."""

    def queued(width: int) -> int:
        driver = wide_phase(width)
        return lines_run(lambda: play_queued(driver, width))

    small, large = queued(300), queued(1200)
    assert large < 5 * small, (small, large)
