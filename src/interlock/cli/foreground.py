"""Driving a run in the foreground: the live display, Ctrl-C and SIGTERM, how it ended.

SIGTERM (what systemd, Docker and Kubernetes send) is handled like Ctrl-C: the tasks are
stopped (their process groups killed), the lease is handed back, and the command exits 130
with the command that resumes the run. A reader closing stdout (`| head -1`) does not stop
the run: it goes on to its end with its output discarded (`base.outlive_closed_output`).
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING

from interlock.cli.base import (
    driver_of,
    err,
    out,
    outlive_closed_output,
    terminate_as_interrupt,
)
from interlock.errors import ExitCode, InterlockError

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.core.state import RunState


def drive_in_foreground(app: Interlock, run_id: str, *, since: int | None = None) -> int:
    """Drive a run with a live display; the exit code says how it ended.

    Off a terminal every event after `since` is printed, one a line (None: only the events
    recorded from now on); on a terminal a table is redrawn instead.
    """
    from interlock.cli.display import LiveProgress, LogPaths
    from interlock.storage.base import NewEvent

    orchestrator = app.orchestrator
    driver = orchestrator.drivers.get(run_id) or orchestrator.take(run_id)
    outlive_closed_output()
    paths = LogPaths(app.home)
    try:
        with LiveProgress(out, driver.definition, run_id, paths=paths) as progress:
            progress.state = driver.state
            if since is not None and progress.live is None:
                # What was recorded before the loop starts: the run's creation, warnings and
                # first dispatches of a new run.
                for stored in app.store.events(run_id, since):
                    new = NewEvent(event=stored.event, rule=stored.rule, why=stored.why)
                    progress.print_event(stored.seq, new)
            orchestrator.listeners.append(progress.on_event)
            # On a terminal, what the models stream shows as it comes (off one, only events).
            streams = progress.live is not None
            if streams:
                orchestrator.progress_listeners.append(progress.on_progress)
            try:
                asyncio.run(_drive(app, run_id))
            finally:
                orchestrator.listeners.remove(progress.on_event)
                if streams:
                    orchestrator.progress_listeners.remove(progress.on_progress)
    except KeyboardInterrupt:
        err.print(f"interrupted: the run is resumable with 'interlock resume {run_id}'")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:  # a write to the closed stdout that bypassed the console
        err.print(f"output closed: the run is resumable with 'interlock resume {run_id}'")
        raise
    return report_end(app, run_id)


async def _drive(app: Interlock, run_id: str) -> None:
    """`drive_async`, with SIGTERM turned into an interrupt that stops the tasks first."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    terminated: list[bool] = []

    def on_terminate() -> None:
        terminated.append(True)
        main.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_terminate)
    try:
        await app.drive_async(run_id)
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, terminate_as_interrupt)


def report_end(app: Interlock, run_id: str) -> int:
    """Print how the run stands and return the matching exit code. The lines are never
    wrapped (`soft_wrap`): their paths and commands are copied whole from a terminal."""
    from interlock.core.state import RunStatus

    state = app.state(run_id)
    if state.status.ended or state.status is RunStatus.PAUSED:
        err.print(spent_line(state), soft_wrap=True)
    if state.status is RunStatus.DELIVERED:
        out.print(f"delivered: {app.run_dir(run_id) / 'final.md'}", soft_wrap=True)
        return int(ExitCode.OK)
    if state.status is RunStatus.PAUSED and state.pause_reason == "tool":
        from interlock.core.tool_calls import waiting_calls

        for call in waiting_calls(state):  # each names the call a decision is for
            ref = call["ref"]
            out.print(
                f"paused: tool call {ref} ({call['tool']}) waits: interlock approve {run_id} "
                f"--call {ref}, or interlock reject {run_id} --call {ref} --reason TEXT",
                soft_wrap=True,
            )
        return int(ExitCode.PAUSED)
    if state.status is RunStatus.PAUSED:
        out.print(
            f"paused for approval: interlock approve {run_id} [--message TEXT]", soft_wrap=True
        )
        hint = source_review(app, state)
        if hint:
            err.print(hint, soft_wrap=True, markup=False)
        return int(ExitCode.PAUSED)
    if state.status is RunStatus.RUNNING and state.slot_awaited is not None:
        key = state.slot_awaited.key
        out.print(
            f"waiting for a slot of {key!r}: interlock resume {run_id} drives it on", soft_wrap=True
        )
        return int(ExitCode.INTERRUPTED)
    if state.status is RunStatus.RUNNING and state.waiting is not None:
        waiting = state.waiting
        if waiting.signal is not None:
            out.print(
                f"waiting for signal {waiting.signal!r}: interlock signal {run_id} "
                f"{waiting.signal} [--data JSON]; then interlock resume {run_id}",
                soft_wrap=True,
            )
        else:
            out.print(f"waiting: interlock resume {run_id} drives it on", soft_wrap=True)
        return int(ExitCode.INTERRUPTED)
    if state.status is RunStatus.RUNNING:
        out.print(f"still running: interlock resume {run_id}", soft_wrap=True)
        return int(ExitCode.INTERRUPTED)
    from interlock.cli.display import LogPaths, ended_text

    line = LogPaths(app.home)(ended_text(state.status.value, state.failure), run_id)
    out.print(line, soft_wrap=True)
    return int(ExitCode.RUN_FAILED)


def source_review(app: Interlock, state: RunState) -> str | None:
    """For a rerun paused where its source run was sent back: what the source's reviewer did
    there, and the command that does the same (reusing its outputs rather than paying)."""
    from interlock.cli.printable import shell_word
    from interlock.core.review import rejection_at

    current = state.current
    if state.rerun_of is None or current is None:
        return None
    try:
        history = [stored.event for stored in app.events(state.rerun_of)]
    except InterlockError:  # the source was pruned since: nothing to tell
        return None
    rejected = rejection_at(history, current.phase, current.visit)
    if rejected is None:
        return None
    return (
        f"note: at this review, {state.rerun_of} was sent back to {rejected.to!r} with "
        f"{rejected.feedback!r}; the same rejection reuses what that produced, "
        f"at no cost: interlock reject {state.run_id} --to {shell_word(rejected.to)} "
        f"-m {shell_word(rejected.feedback)}"
    )


def spent_line(state: RunState) -> str:
    """What the run cost and how much of it was carried over: what someone iterating on a
    pipeline looks at after each run."""
    from interlock.core.state import TaskStatus

    cost, tokens, before = state.imported_spend  # an imported run's spend at its source
    done = [
        t for i, t in state.tasks.items() if t.status is TaskStatus.COMPLETED and i not in before
    ]
    reused = sum(1 for t in done if t.reused_from is not None)
    # Attempts whose call was paid for but gave no output (refused, cut off, not JSON); not
    # those that stopped at a tool call waiting for a person: their loop goes on.
    wasted, wasted_usd = 0, 0.0
    for task_id, task in state.tasks.items():
        if task_id in before:
            continue
        kept = (
            {task.attempt} if task.status in (TaskStatus.COMPLETED, TaskStatus.AWAITING) else set()
        )
        for attempt in task.charged - kept - set(task.held_attempts):
            wasted += 1
            wasted_usd += task.attempt_cost.get(attempt, 0.0)
    mark = "~" if any(t.estimated for t in state.tasks.values()) else ""
    line = (
        f"spent {mark}${state.cost_usd - cost:.4f}, {mark}{state.tokens - tokens:,} tokens; "
        f"{len(done) - reused} task(s) completed"
    )
    if state.imported:
        line += f" here (the bundle's source spent ${cost:.4f}, {tokens:,} tokens)"
    if reused:
        line += f", {reused} reused (paid for by earlier runs)"
    if wasted:
        line += f"; {wasted} paid call(s) failed or were refused ({mark}${wasted_usd:.4f})"
    if mark:
        line += " (~: estimated, a server reported no token counts)"
    if state.unpriced:
        from interlock.runtime.projection import unpriced_note

        line += f"\nnote: {unpriced_note(list(state.unpriced))}"
    return line


def driven_elsewhere(app: Interlock, run_id: str) -> bool:
    """True when a live orchestrator holds the run's lease."""
    return driver_of(app.store.get_run(run_id)) is not None
