"""A phase much wider than the local concurrency: the tasks waiting for a slot do not time out.

A task's `timeout` counts from its start; the time it waits, dispatched, for one of the
process's `max_concurrency` slots counts only against its `start_timeout`.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.reliability.crash_points import cli

from interlock import Interlock, RunStatus
from interlock.core import events as ev
from interlock.runtime.orchestrator import Settings

from .conftest import WriteWorkflow

WIDTH = 24


def wide_flow(write_workflow: WriteWorkflow, width: int, sleep: float, extra: str = "") -> Path:
    """A phase of `width` command workers that each take `sleep` seconds, then a final one."""
    script = f'sleep {sleep}; echo "$INTERLOCK_TASK_ID" > "$INTERLOCK_OUTPUT"'
    workers = "".join(
        f"""
                - role: w{i}
                  timeout: 1
                  grace: 0{extra}
                  command: ["sh", "-c", '{script}']"""
        for i in range(width)
    )
    return write_workflow(f"""
        p:
          phases:
            - id: wide
              workers:{workers}
            - id: end
              workers:
                - role: last
                  final: true
                  command: ["sh", "-c", 'echo done > "$INTERLOCK_OUTPUT"']
    """)


def test_a_phase_wider_than_the_slots_delivers_without_timeouts(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """24 tasks of 0.2 s, two at a time, with a 1 s timeout and no grace: the phase takes
    over 2 s, longer than any task's timeout, and every task delivers without a timeout
    (counted from dispatch, the tail would have timed out and failed the run)."""
    path = wide_flow(write_workflow, WIDTH, 0.2)
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05, max_concurrency=2))
    try:
        began = time.monotonic()
        state = app.run(path, topic="t")
        took = time.monotonic() - began
        assert state.status is RunStatus.DELIVERED, state.failure
        events = [s.event for s in app.events(state.run_id)]
        assert not [e for e in events if isinstance(e, ev.TaskTimedOut)]
        assert took > 2.0  # the tail of the phase waited longer than its timeout
        starts = {e.task_id: e.at for e in events if isinstance(e, ev.TaskStarted)}
        dispatches = {e.task_id: e.at for e in events if isinstance(e, ev.TaskDispatched)}
        waited = max(starts[t] - dispatches[t] for t in dispatches)
        assert waited > 1.0, waited  # some task waited for a slot past its timeout
    finally:
        app.close()


def test_tasks_dispatched_but_not_started_before_a_kill_run_after_resume(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """The CLI is SIGKILLed at the 20th task start of a 40-task phase (16 slots), and resumed
    once every task waiting for a slot is past its dispatch + timeout: those are started and
    deliver; only an attempt that had started may time out (the kill stopped it)."""
    path = wide_flow(write_workflow, 40, 0.05, extra="\n                  retries: 2")
    home, run_id = tmp_path / "home", "wide-kill"
    first = cli(home, "run", str(path), "p", "--topic", "t", "--run-id", run_id,
                crash_at="after_dispatch:20")  # fmt: skip
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    time.sleep(1.5)  # past every dispatch's timeout (1 s, no grace)
    resumed = cli(home, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    app = Interlock(home)
    try:
        state = app.state(run_id)
        assert state.status is RunStatus.DELIVERED, state.failure
        started: set[tuple[str, int]] = set()
        for stored in app.events(run_id):
            event = stored.event
            if isinstance(event, ev.TaskStarted):
                started.add((event.task_id, event.attempt))
            elif isinstance(event, ev.TaskTimedOut):
                assert (event.task_id, event.attempt) in started, event
                assert event.detail.startswith("no result within timeout + grace"), event
    finally:
        app.close()
