"""Carry out a run step's effects (`interlock.engine.effects`): the only place that writes
outputs and final.md, starts and stops workers and child runs, withdraws, archives and
rewrites status.json for a run.

What to do is the machine's decision (`RunMachine.effects`), asked from the state and from
what runs now (`handles`): the applier decides nothing, it performs. Its effects are safe to
carry out twice (see `interlock.engine.effects`).

The files come first, in a batch of their own: the orchestrator writes the files of every run
of a tick together (`stage_files`), before any of them starts a task that reads them; the rest
follows, run by run (`apply`).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interlock.core.state import RunStatus, TaskState
from interlock.engine import effects as fx
from interlock.engine import inputs as obs
from interlock.errors import RunFolderTaken
from interlock.runtime.artifacts import StrPath
from interlock.runtime.faults import crash_point
from interlock.runtime.home import Home
from interlock.runtime.runfiles import status_writer

if TYPE_CHECKING:
    from interlock.runtime.driver import Report, RunDriver

STATUS_COST_FACTOR = 20  # status.json rewrites take at most about 1/20 of a running run's time
FINAL_MD = "final.md"


@dataclass(frozen=True, kw_only=True)
class ApplyPorts:
    """What the applier uses of the orchestrator that drives the runs: values and calls,
    built once per ports."""

    home: Home
    write_status: bool  # keep status.json current (`Settings.write_status`)
    clock: Callable[[], float]
    cost_timer: Callable[[], float]  # measures what a status.json rewrite costs
    status_interval: Callable[[], float]  # seconds between a running run's rewrites now
    start: Callable[[RunDriver, TaskState], asyncio.Task[None]]  # a recorded attempt
    # Ask the run's child runs to stop; False when the store was busy (tried again).
    stop_children: Callable[[RunDriver], bool]
    withdraw: Callable[[RunDriver], None]  # take the run's unstarted attempts out of a queue
    report: Callable[[RunDriver, Report], None]  # hand a report to the run's next tick
    touch: Callable[[RunDriver], None]  # look at the run again at the next tick
    wake_at: Callable[[float, RunDriver], None]  # tick the run again at that time


def handles(driver: RunDriver) -> obs.Handles:
    """What the runtime runs for the run now, for the machine to decide on."""
    attempts = driver.handle_attempts
    return obs.Handles(
        # In the order the workers were started (dicts keep it); -1: an attempt unknown here,
        # never the current one.
        running={t: attempts.get(t, -1) for t in driver.handles},
        claiming=frozenset(driver.reusing),
        stopping=frozenset(driver.stopping),
        since=driver.acted_mark,
        children_stopped=driver.children_stopped,
        final_placed=driver.final_md_placed,
    )


def plan(driver: RunDriver) -> list[fx.Effect]:
    """The effects the run's state calls for now: the outputs waiting to be written, then
    what the machine asks for given what runs."""
    effects: list[fx.Effect] = [*driver.writes]
    effects += driver.machine.effects(driver.state, handles(driver), driver.writes)
    return effects


def stage_files(
    driver: RunDriver, effects: Sequence[fx.Effect]
) -> tuple[list[tuple[StrPath, bytes]], bool]:
    """The files of `effects` (outputs, and final.md), handed over to be written before
    anything else; (files, whether final.md is among them)."""
    if driver.writes and driver.placing_reused:
        crash_point("after_record_reuse")  # recorded, not yet placed: resume repairs
        driver.placing_reused = False
    if driver.writes and driver.reviewed == "edit":
        crash_point("after_record_edit")  # recorded, not yet written: resume repairs
    # Joined as text: a `Path` join parses the name again, and the files' writer and the
    # sync only hand the paths to the system.
    folder = os.fspath(driver.run_dir)
    files: list[tuple[StrPath, bytes]] = [
        (f"{folder}/{e.artifact}", e.body) for e in effects if isinstance(e, fx.WriteOutput)
    ]
    driver.writes = []
    delivering = False
    for effect in effects:
        if isinstance(effect, fx.PlaceFinal):
            body = _final_body(driver, effect)
            if body is not None:
                crash_point("before_deliver")
                files.append((f"{folder}/{FINAL_MD}", body))
                delivering = True
    return files, delivering


def _final_body(driver: RunDriver, effect: fx.PlaceFinal) -> bytes | None:
    """final.md's text if it is to be written (None: in place already, or nothing holds the
    recorded text yet, which `restore_outputs` then writes).

    Written with the outputs, and like them made durable before the run is archived (an
    archived run is never resumed, so a final.md that a power loss emptied would stay empty;
    see `Orchestrator._sync_ended`). Once it is in place or handed over, later steps of the
    ended run do not ask for it again (`final_md_placed`): the batch it was handed over with
    is written before anything else happens, or the loop stops and a resume, with a driver
    of its own, looks again.
    """
    if os.path.exists(f"{os.fspath(driver.run_dir)}/{FINAL_MD}"):
        driver.final_md_placed = True
        return None
    body = effect.body
    if body is None:
        delivered = driver.run_dir / effect.artifact
        if delivered.is_file():
            data = delivered.read_bytes()
            if effect.sha256 is None or hashlib.sha256(data).hexdigest() == effect.sha256:
                body = data
    if body is not None:
        driver.final_md_placed = True
    return body


def apply(driver: RunDriver, effects: Sequence[fx.Effect], ports: ApplyPorts) -> None:
    """Carry out `effects` but the files (`stage_files` handed those over), in order."""
    for point in sorted(driver.waits):  # recorded, not yet acted on: resume repairs
        crash_point(point)
    driver.waits.clear()
    if driver.reviewed is not None:
        if driver.reviewed == "reject":
            crash_point("after_record_reject")  # recorded, its visit's tasks not started
        driver.reviewed = None
    state = driver.state
    marked = False
    for effect in effects:
        if isinstance(effect, fx.StartAttempt):
            _start(driver, effect, ports)
        elif isinstance(effect, fx.CancelAttempt):
            handle = driver.handles.pop(effect.task_id, None)
            if handle is not None:
                handle.cancel()
        elif isinstance(effect, fx.StopChildren):
            # A child never outlives its parent's end.
            driver.children_stopped = ports.stop_children(driver)
        elif isinstance(effect, fx.StopWorkers):
            _stop_workers(driver, effect, ports)
        elif isinstance(effect, fx.Withdraw):
            ports.withdraw(driver)
        elif isinstance(effect, (fx.Archive, fx.RefreshStatus)):
            if not marked:
                driver.acted_mark, marked = state.events, True
            if isinstance(effect, fx.Archive):
                archive(driver, ports)
            elif ports.write_status and state.events != driver.status_shows:
                refresh_status(driver, ports)
    if not marked:
        driver.acted_mark = state.events


def _start(driver: RunDriver, effect: fx.StartAttempt, ports: ApplyPorts) -> None:
    """Start a recorded attempt, or carry an earlier output over instead."""
    task = driver.state.tasks[effect.task_id]
    if not effect.child:
        if effect.may_reuse and _claim(driver, ports, effect.task_id):
            return
        crash_point("before_dispatch")
    driver.handles[task.task_id] = ports.start(driver, task)
    driver.handle_attempts[task.task_id] = task.attempt


def _claim(driver: RunDriver, ports: ApplyPorts, task_id: str) -> bool:
    """Carry an earlier output over instead of starting the task, when one matches."""
    if driver.reuser is None:
        return False
    claim = driver.reuser.claim(driver.state, driver.state.tasks[task_id], ports.clock())
    if claim is None:
        return False
    from interlock.runtime.driver import Report

    crash_point("before_record_reuse")
    driver.reusing.add(task_id)
    ports.report(driver, Report(event=claim.event, body=claim.body))
    return True


def _stop_workers(driver: RunDriver, effect: fx.StopWorkers, ports: ApplyPorts) -> None:
    from interlock.runtime.driver import withdraw_batched

    if effect.task_ids:
        withdraw_batched(driver.run_id)  # before its calls are stopped (see there)
    for task_id in effect.task_ids:
        handle = driver.handles[task_id]
        handle.cancel()
        if handle.done():  # stopped at once (simulated workers)
            del driver.handles[task_id]
            continue
        # Stopped, a model call reports what it had cost: the run is looked at again once
        # the task ended, so that the report is recorded before the lease goes.
        driver.stopping.add(task_id)
        handle.add_done_callback(lambda _: ports.touch(driver))


def refresh_status(driver: RunDriver, ports: ApplyPorts) -> None:
    """Rewrite status.json for a changed state: at once at a pause or an end, or when
    `status_interval` has passed since the last write; otherwise at that time (the loop
    wakes the run then), so that changes in between cost one write."""
    now = ports.clock()
    # A wide run's status.json costs time to build: it is then rewritten less often, so
    # that the rewrites never take more than a small share of the loop.
    spacing = max(ports.status_interval(), driver.status_cost * STATUS_COST_FACTOR)
    due = driver.status_written + spacing
    state = driver.state
    awaiting_archive = state.status is RunStatus.DELIVERED and not state.archived
    if awaiting_archive and driver.status_due is None:
        # Archived once its files are durable, a fraction of a second from now, and the
        # status.json then written into the archive shows it delivered: this one is
        # written only if the archive is late (a sync that fails, say).
        due = max(due, now + spacing)
    if (state.status is RunStatus.RUNNING or awaiting_archive) and now < due:
        if driver.status_due is None:
            driver.status_due = due
            ports.wake_at(due, driver)
        return
    driver.status_due = None
    if driver.run_dir.is_dir():
        began = ports.cost_timer()
        driver.write_status()
        driver.status_written = now
        driver.status_shows = state.events
        driver.status_cost = ports.cost_timer() - began


def archive(driver: RunDriver, ports: ApplyPorts) -> None:
    """Move the delivered run's folder to the archive (one atomic rename)."""
    target = ports.home.archive_dir(driver.run_id)
    if driver.run_dir == target:
        return
    status_writer().flush(driver.run_dir / "status.json")  # no rewrite across the move
    crash_point("before_archive")
    try:
        os.rename(driver.run_dir, target)  # the same file system: one atomic rename
    except FileNotFoundError:
        if driver.run_dir.exists():  # only the archive folder is missing
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(driver.run_dir, target)
        elif not target.exists():
            return  # neither is there: nothing to move
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise RunFolderTaken(
            f"run {driver.run_id}: delivered, but it cannot be archived: {target} holds "
            "another run's files (a run of another store given the same state directory, "
            f"say); move that folder away, then 'interlock resume {driver.run_id}' "
            "archives it"
        ) from None
    driver.run_dir = target
