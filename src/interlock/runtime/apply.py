"""Carry out a run step's effects (`interlock.engine.effects`): the only place that writes
outputs and final.md, starts and stops workers and child runs, withdraws, archives and
rewrites status.json for a run.

What to do is the machine's decision (`RunMachine.effects`), asked from the state and from
what runs now (`Workers`): the applier decides nothing, it performs. Its effects are safe to
carry out twice (see `interlock.engine.effects`). It is handed values (the run's state and
folder, the records below) and the run's ports (`RunPorts`), never the loop's object.

The files come first, in a batch of their own: the orchestrator writes the files of every run
of a tick together (`stage_files`), before any of them starts a task that reads them; the rest
follows, run by run (`apply`).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.core.state import RunState, TaskState
from interlock.engine import RunMachine
from interlock.engine import effects as fx
from interlock.engine import inputs as obs
from interlock.errors import RunFolderTaken
from interlock.runtime.artifacts import StrPath
from interlock.runtime.faults import crash_point
from interlock.runtime.reports import Report
from interlock.runtime.run_outputs import FINAL_MD
from interlock.runtime.runfiles import status_writer
from interlock.runtime.status_file import StatusMarks, refresh_status

if TYPE_CHECKING:
    from interlock.runtime.reuse import Claim

log = logging.getLogger("interlock.runtime")


@dataclass(kw_only=True, slots=True)
class Workers:
    """What runs for one run now, as the applier left it: the machine decides on it
    (`handles`)."""

    handles: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)  # the attempt each handle runs
    stopping: set[str] = field(default_factory=set)  # tasks cancelled because the run ended
    claiming: set[str] = field(default_factory=set)  # tasks whose reuse awaits recording
    children_stopped: bool = False  # the children of the ended run were asked to stop
    final_placed: bool = False  # final.md was found in place or handed over for writing
    acted_mark: int = 0  # the number of events the state held when last acted on (0: never)


@dataclass(kw_only=True, slots=True)
class Unacted:
    """Events the last step recorded that a crash point waits for, once acted on (a crash
    there is repaired by the resume)."""

    reviewed: str | None = None  # "edit" or "reject" just recorded
    waits: set[str] = field(default_factory=set)  # crash points of signal and wait events
    placing_reused: bool = False  # a reused output waits to be written


@dataclass(frozen=True, kw_only=True, slots=True)
class RunPorts:
    """What the applier uses of the loop for one run: values and calls bound to the run
    once, when the loop takes it."""

    run_id: str
    archive_dir: Path  # where the delivered run's folder moves
    keep_status: bool  # keep status.json current (`Settings.write_status`)
    clock: Callable[[], float]
    cost_timer: Callable[[], float]  # measures what a status.json rewrite costs
    status_interval: Callable[[], float]  # seconds between a running run's rewrites now
    start: Callable[[TaskState], asyncio.Task[None]]  # a recorded attempt
    # An earlier output to carry over instead of running a task (None: no reuse).
    reuse: Callable[[RunState, TaskState, float], Claim | None] | None
    report: Callable[[Report], None]  # hand a report to the run's next tick
    # Ask the run's child runs to stop; False when the store was busy (tried again).
    stop_children: Callable[[], bool]
    withdraw: Callable[[], None]  # take the run's unstarted attempts out of a queue
    touch: Callable[[], None]  # look at the run again at the next tick
    wake_at: Callable[[float], None]  # tick the run again at that time
    write_status: Callable[[Path], None]  # write status.json into the run's folder


def handles(workers: Workers) -> obs.Handles:
    """What the runtime runs for the run now, for the machine to decide on."""
    attempts = workers.attempts
    return obs.Handles(
        # In the order the workers were started (dicts keep it); -1: an attempt unknown here,
        # never the current one.
        running={t: attempts.get(t, -1) for t in workers.handles},
        claiming=frozenset(workers.claiming),
        stopping=frozenset(workers.stopping),
        since=workers.acted_mark,
        children_stopped=workers.children_stopped,
        final_placed=workers.final_placed,
    )


def plan(
    machine: RunMachine, state: RunState, workers: Workers, writes: list[fx.WriteOutput]
) -> list[fx.Effect]:
    """The effects the run's state calls for now: the outputs waiting to be written, then
    what the machine asks for given what runs."""
    effects: list[fx.Effect] = [*writes]
    effects += machine.effects(state, handles(workers), writes)
    return effects


def stage_files(
    run_dir: Path,
    writes: Sequence[fx.WriteOutput],
    effects: Sequence[fx.Effect],
    workers: Workers,
    unacted: Unacted,
) -> tuple[list[tuple[StrPath, bytes]], bool]:
    """The files of `effects` (outputs, and final.md), handed over to be written before
    anything else; (files, whether final.md is among them). `writes` are the outputs that
    waited for it (the caller holds them no longer)."""
    if writes and unacted.placing_reused:
        crash_point("after_record_reuse")  # recorded, not yet placed: resume repairs
        unacted.placing_reused = False
    if writes and unacted.reviewed == "edit":
        crash_point("after_record_edit")  # recorded, not yet written: resume repairs
    # Joined as text: a `Path` join parses the name again, and the files' writer and the
    # sync only hand the paths to the system.
    folder = os.fspath(run_dir)
    files: list[tuple[StrPath, bytes]] = [
        (f"{folder}/{e.artifact}", e.body) for e in effects if isinstance(e, fx.WriteOutput)
    ]
    delivering = False
    for effect in effects:
        if isinstance(effect, fx.PlaceFinal):
            body = _final_body(run_dir, effect, workers)
            if body is not None:
                crash_point("before_deliver")
                files.append((f"{folder}/{FINAL_MD}", body))
                delivering = True
    return files, delivering


def _final_body(run_dir: Path, effect: fx.PlaceFinal, workers: Workers) -> bytes | None:
    """final.md's text if it is to be written (None: in place already, or nothing holds the
    recorded text yet, which `restore_outputs` then writes).

    Written with the outputs, and like them made durable before the run is archived (an
    archived run is never resumed, so a final.md that a power loss emptied would stay empty;
    see `runtime/ended_syncs.py`). Once it is in place or handed over, later steps of the
    ended run do not ask for it again (`final_placed`): the batch it was handed over with
    is written before anything else happens, or the loop stops and a resume, with a driver
    of its own, looks again.
    """
    if os.path.exists(f"{os.fspath(run_dir)}/{FINAL_MD}"):
        workers.final_placed = True
        return None
    body = effect.body
    if body is None:
        delivered = run_dir / effect.artifact
        if delivered.is_file():
            data = delivered.read_bytes()
            if effect.sha256 is None or hashlib.sha256(data).hexdigest() == effect.sha256:
                body = data
    if body is not None:
        workers.final_placed = True
    return body


def apply(
    state: RunState,
    run_dir: Path,
    effects: Sequence[fx.Effect],
    workers: Workers,
    unacted: Unacted,
    status: StatusMarks,
    ports: RunPorts,
) -> Path:
    """Carry out `effects` but the files (`stage_files` handed those over), in order;
    returns the run's folder (moved by an archive)."""
    for point in sorted(unacted.waits):  # recorded, not yet acted on: resume repairs
        crash_point(point)
    unacted.waits.clear()
    if unacted.reviewed is not None:
        if unacted.reviewed == "reject":
            crash_point("after_record_reject")  # recorded, its visit's tasks not started
        unacted.reviewed = None
    marked = False
    for effect in effects:
        if isinstance(effect, fx.StartAttempt):
            _start(state, effect, workers, ports)
        elif isinstance(effect, fx.CancelAttempt):
            handle = workers.handles.pop(effect.task_id, None)
            if handle is not None:
                handle.cancel()
        elif isinstance(effect, fx.StopChildren):
            # A child never outlives its parent's end.
            workers.children_stopped = ports.stop_children()
        elif isinstance(effect, fx.StopWorkers):
            _stop_workers(effect, workers, ports)
        elif isinstance(effect, fx.Withdraw):
            ports.withdraw()
        elif isinstance(effect, (fx.Archive, fx.RefreshStatus)):
            if not marked:
                workers.acted_mark, marked = state.events, True
            if isinstance(effect, fx.Archive):
                run_dir = archive(run_dir, ports)
            elif ports.keep_status and state.events != status.shows:
                refresh_status(
                    status,
                    state,
                    run_dir,
                    now=ports.clock(),
                    interval=ports.status_interval(),
                    cost_timer=ports.cost_timer,
                    wake_at=ports.wake_at,
                    write=ports.write_status,
                )
    if not marked:
        workers.acted_mark = state.events
    return run_dir


def _start(state: RunState, effect: fx.StartAttempt, workers: Workers, ports: RunPorts) -> None:
    """Start a recorded attempt, or carry an earlier output over instead."""
    task = state.tasks[effect.task_id]
    if not effect.child:
        if effect.may_reuse and _claim(state, workers, ports, effect.task_id):
            return
        crash_point("before_dispatch")
    workers.handles[task.task_id] = ports.start(task)
    workers.attempts[task.task_id] = task.attempt


def _claim(state: RunState, workers: Workers, ports: RunPorts, task_id: str) -> bool:
    """Carry an earlier output over instead of starting the task, when one matches."""
    if ports.reuse is None:
        return False
    claim = ports.reuse(state, state.tasks[task_id], ports.clock())
    if claim is None:
        return False
    crash_point("before_record_reuse")
    workers.claiming.add(task_id)
    ports.report(Report(event=claim.event, body=claim.body))
    return True


def _stop_workers(effect: fx.StopWorkers, workers: Workers, ports: RunPorts) -> None:
    if effect.task_ids:
        withdraw_batched(ports.run_id)  # before its calls are stopped (see there)
    touch = ports.touch
    for task_id in effect.task_ids:
        handle = workers.handles[task_id]
        handle.cancel()
        if handle.done():  # stopped at once (simulated workers)
            del workers.handles[task_id]
            continue
        # Stopped, a model call reports what it had cost: the run is looked at again once
        # the task ended, so that the report is recorded before the lease goes.
        workers.stopping.add(task_id)
        handle.add_done_callback(lambda _: touch())


def refresh(status: StatusMarks, state: RunState, run_dir: Path, ports: RunPorts) -> None:
    """`status_file.refresh_status` with the run's ports."""
    refresh_status(
        status,
        state,
        run_dir,
        now=ports.clock(),
        interval=ports.status_interval(),
        cost_timer=ports.cost_timer,
        wake_at=ports.wake_at,
        write=ports.write_status,
    )


def archive(run_dir: Path, ports: RunPorts) -> Path:
    """Move the delivered run's folder to the archive (one atomic rename); where it is."""
    target, run_id = ports.archive_dir, ports.run_id
    if run_dir == target:
        return run_dir
    status_writer().flush(run_dir / "status.json")  # no rewrite across the move
    crash_point("before_archive")
    try:
        os.rename(run_dir, target)  # the same file system: one atomic rename
    except FileNotFoundError:
        if run_dir.exists():  # only the archive folder is missing
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(run_dir, target)
        elif not target.exists():
            return run_dir  # neither is there: nothing to move
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise RunFolderTaken(
            f"run {run_id}: delivered, but it cannot be archived: {target} holds "
            "another run's files (a run of another store given the same state directory, "
            f"say); move that folder away, then 'interlock resume {run_id}' "
            "archives it"
        ) from None
    return target


def withdraw_batched(run_id: str) -> None:
    """Withdraw an ended run's model calls waiting in provider batches (``batch = true``),
    before its running attempts are stopped: a stopped call whose request was withdrawn
    cancels its provider batch once nothing else waits in it. A call stopped for another
    reason (this process shutting down) stays in its batch for the attempt started again."""
    from interlock.providers.batch_provider import withdraw_run
    from interlock.providers.batch_store import batch_store

    try:
        withdrawn = withdraw_run(batch_store(), run_id)
    except Exception as exc:  # the ledger's batch tables unreachable: the batch ends by itself
        log.warning(
            "could not withdraw the run's calls from provider batches: %s",
            exc,
            extra={"run_id": run_id, "action": "provider_batch_withdraw_failed"},
        )
        return
    if withdrawn:
        log.info(
            "withdrew %d call(s) from provider batches",
            withdrawn,
            extra={"run_id": run_id, "action": "provider_batch_withdrawn"},
        )
