"""One run as the orchestrator drives it: its folded state, its lease, its running tasks.

The driver turns what happened since the last tick into events (`observe`), asks the engine
what follows (`settle`), and after the orchestrator committed both, carries the decisions out
(`act`). Acting is idempotent: it looks at the state, not at the decisions, so a crash between
"recorded" and "acted" is repaired by acting again on resume.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core import events as ev
from interlock.core.decide import failed_item_values, given_up
from interlock.core.extract import ExtractionError, extract_values
from interlock.core.loader import Definition
from interlock.core.observe import CommandKind
from interlock.core.review import sent_back, with_feedback
from interlock.core.state import (
    RunState,
    RunStatus,
    TaskState,
    artifact_name,
    listed_status,
)
from interlock.core.template_guard import MAX_TASK_SIZE, RenderLimits
from interlock.core.templates import TemplateProblem, render_system, render_task, template_item
from interlock.core.validate import read_name
from interlock.core.waits import signal_values
from interlock.engine import Recorded, RunMachine
from interlock.engine import effects as fx
from interlock.engine import inputs as obs
from interlock.errors import RunFolderTaken
from interlock.runtime import artifacts
from interlock.runtime.edits import REVIEW_KINDS, keep_hand_edit, pending_edits
from interlock.runtime.executors import Outcome, TaskSpec, escape_braces
from interlock.runtime.faults import crash_point
from interlock.runtime.projection import status_view
from interlock.runtime.reuse import Reuser
from interlock.runtime.runfiles import status_writer
from interlock.storage import codec
from interlock.storage.base import CommandRecord, Lease, NewEvent, RunSummary, Store

if TYPE_CHECKING:
    from interlock.core.workflow import Worker
    from interlock.runtime.orchestrator import Orchestrator

log = logging.getLogger("interlock.runtime")
STATUS_COST_FACTOR = 20  # status.json rewrites take at most about 1/20 of a running run's time


@dataclass
class Report:
    """A worker's report waiting for the next tick, with its output: a temporary file, or
    a small body held in memory."""

    event: (
        ev.TaskStarted
        | ev.TaskCompleted
        | ev.TaskFailed
        | ev.TaskTimedOut
        | ev.TaskReused
        | ev.ChildUpdated
        | ev.ChildSpent
    )
    tmp: Path | None = None
    body: bytes | None = None


@dataclass
class RunDriver:
    """The orchestrator's working copy of one run."""

    definition: Definition
    state: RunState
    lease: Lease
    run_dir: Path
    handles: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    handle_attempts: dict[str, int] = field(default_factory=dict)  # the attempt each runs
    reports: list[Report] = field(default_factory=list)
    stopping: set[str] = field(default_factory=set)  # tasks cancelled because the run ended
    # The reports the last `observe` turned into events, handed back by `reobserve` when
    # their commit failed: a worker's finished work is recorded later, never redone.
    observed_reports: list[Report] = field(default_factory=list)
    commands: list[CommandRecord] = field(default_factory=list)
    source: str = ""  # the workflow file the run was started from (may be gone)
    status_written: float = 0.0  # when status.json was last written
    status_shows: int = -1  # the number of events the written status.json reflects
    status_due: float | None = None  # when a coalesced rewrite is scheduled
    status_cost: float = 0.0  # seconds the last status.json write took
    spend_waits: dict[str, dict[str, Any]] = field(default_factory=dict)  # task: its cap wait
    batch_waits: dict[str, dict[str, Any]] = field(default_factory=dict)  # task: its batch
    checked_adoption: bool = False
    # Attempts a worker began before this driver took the run (see `begun_attempts`): each
    # gets its start recorded, if the orchestrator that began it did not record one.
    begun: set[tuple[str, int]] = field(default_factory=set)
    acted_mark: int = 0  # the number of events the state held when `act` last ran (0: never)
    dirty: bool = True
    # Bodies the last step stores with its events in the ledger (SHA-256, bytes).
    stored: list[tuple[str, bytes]] = field(default_factory=list)
    # Outputs held in memory, written into the run directory once their completion is
    # recorded (a crash before that loses nothing: the ledger holds them).
    writes: list[fx.WriteOutput] = field(default_factory=list)
    final_md_placed: bool = False  # final.md was found in place or handed over for writing
    # Outputs written from the ledger without an fsync (see `Orchestrator._write_outputs`),
    # made durable once the run ends, before it is archived or let go.
    unsynced: list[Path] = field(default_factory=list)
    syncing: bool = False  # a sync of the run's files is under way
    synced_mark: int = -1  # the number of events the state held when the last sync began
    # Fingerprints every completion and carries earlier outputs over (reruns, the cache).
    reuser: Reuser | None = None
    reusing: set[str] = field(default_factory=set)  # tasks whose reuse awaits recording
    placing_reused: bool = False  # a reused output waits in `writes`
    reviewed: str | None = None  # "edit" or "reject" just recorded, not yet acted on
    waits: set[str] = field(default_factory=set)  # signal/wait events recorded, not acted on
    children_stopped: bool = False  # the children of the ended run were asked to stop
    machine: RunMachine = field(init=False, repr=False)  # the run's step (`interlock.engine`)

    def __post_init__(self) -> None:
        self.machine = RunMachine(self.definition.pipeline, stamp=self._stamp)

    def _stamp(self, state: RunState, event: ev.TaskCompleted) -> ev.TaskCompleted:
        """A completion with its fingerprint (once the run has its `Reuser`)."""
        return event if self.reuser is None else self.reuser.stamp(state, event)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.state.run_id

    @functools.cached_property
    def workflow_dir(self) -> Path | None:
        """The directory of the workflow file the run was started from (None if unknown)."""
        return _folder_of(self.source, os.getcwd()) if self.source else None

    def step(
        self, now: float, granted: list[NewEvent] | None = None
    ) -> tuple[list[NewEvent], list[int]]:
        """Take the run's step: reports, files found on disk and commands become inputs,
        `granted` slots are recorded first, and the engine settles (`RunMachine`).
        The events are applied to state; the outputs to write after them are kept for `act`.
        Returns the events to append and the ids of the commands they consume."""
        # The slot keeper folded `granted` into the state before this step, so they are
        # recorded first: the ledger folds in the order the state was built (recorded after
        # a cancel the step observes, a slot would be held by an ended run on replay).
        inputs: list[obs.Input] = []
        if granted:
            inputs.append(obs.Granted(events=tuple((n.event, n.rule, n.why) for n in granted)))
        inputs += self._inputs(now)
        consumed = [record.id for record in self.commands]
        inputs += self._commands()
        made = self.machine.step(self.state, inputs, now, archive=self.durable(), act=False)
        for refused in made.refused:
            log.info(refused, extra={"run_id": self.run_id, "action": "command_refused"})
        self.stored += made.stored
        self.writes += made.of(fx.WriteOutput)
        return self._recorded(made.events), consumed

    def _inputs(self, now: float) -> list[obs.Input]:
        """What the reports, the files found on disk and the reuse notes observed."""
        inputs: list[obs.Input] = []
        committed = False
        # An output from a file is renamed into place below: if its commit fails, adoption
        # finds it.
        self.observed_reports = [r for r in self.reports if r.tmp is None]
        finished: set[tuple[str, int]] = set()  # attempts whose result this batch holds
        for report in self.reports:
            event = report.event
            if isinstance(event, ev.TaskReused):
                self.reusing.discard(event.task_id)
                assert report.body is not None
                stored = event.size <= artifacts.INLINE_LIMIT
                inputs.append(obs.Reused(event=event, body=report.body, stored=stored))
            elif isinstance(event, ev.ChildUpdated):
                inputs.append(obs.ChildChanged(event=event))
            elif isinstance(event, ev.ChildSpent):
                inputs.append(obs.ChildSpend(event=event))
            elif report.tmp is None:
                inputs.append(obs.Reported(event=event, body=report.body))
            else:
                # Renamed into place only when it is recorded: a stale or duplicate attempt's
                # file is dropped (what its call cost is kept, by the step).
                attempt = (event.task_id, event.attempt)
                fresh = attempt not in finished and self.machine.accepts(self.state, event)
                if isinstance(event, ev.TaskCompleted) and fresh:
                    finished.add(attempt)
                    event, body = self._commit_output(event, report.tmp)
                    committed = True
                    inputs.append(obs.Reported(event=event, body=body, on_disk=True))
                    continue
                artifacts.discard(report.tmp)
                inputs.append(obs.Reported(event=event))
        self.reports.clear()
        if committed:
            artifacts.fsync_dir(self.run_dir)  # the renames, durable before they are recorded
        if not self.checked_adoption:
            inputs += self._adopt(now)
            self.checked_adoption = True
        if self.reuser is not None and self.reuser.notes:
            inputs += [obs.Noted(message=note) for note in self.reuser.notes]
            self.reuser.notes.clear()
        return inputs

    def _commands(self) -> list[obs.Input]:
        """The commands waiting for the run, as inputs (each is consumed by the step)."""
        inputs: list[obs.Input] = []
        for record in self.commands:
            if record.kind in REVIEW_KINDS:
                crash_point("before_record_review")
            elif record.kind == CommandKind.SIGNAL.value:
                crash_point("before_record_signal")
            inputs.append(obs.PersonCommand(kind=record.kind, message=record.message, by=record.by))
        self.commands.clear()
        return inputs

    def _recorded(self, made: Sequence[Recorded]) -> list[NewEvent]:
        """The step's events to append; notes which wait for a crash point once acted on."""
        new = []
        for r in made:
            event = r.event
            if isinstance(event, ev.SignalReceived):
                self.waits.add("after_record_signal")
            elif isinstance(event, ev.WaitStarted):
                self.waits.add("after_record_wait")
            elif isinstance(event, ev.WaitEnded):
                self.waits.add("after_end_wait")
            elif isinstance(event, ev.OutputEdited):
                self.reviewed = "edit"
            elif isinstance(event, ev.Rejected):
                self.reviewed = "reject"
            elif isinstance(event, ev.TaskReused):
                self.placing_reused = True
            new.append(
                NewEvent(event=event, rule=None if r.rule is None else str(r.rule), why=r.why)
            )
        return new

    def reobserve(self) -> None:
        """After the commit of the last observation failed (and the state was rebuilt from
        the ledger): observe its reports again next time. Those the ledger holds after all
        (an ambiguous commit) are then dropped as duplicates."""
        self.reports[:0] = self.observed_reports
        self.observed_reports = []

    def decide(self, now: float) -> list[NewEvent]:
        """Settle the engine on the current state (decisions are applied to state)."""
        return self._recorded(self.machine.settle(self.state, now, archive=self.durable()))

    def durable(self) -> bool:
        """Whether everything written into the run's folder is durable, by a sync that began
        after the last event: only then is a delivered run archived (or an ended one let go),
        since a run that is archived is never resumed, whose resume would repair its files."""
        return (
            not self.syncing
            and not self.unsynced
            and not self.writes
            and self.synced_mark == self.state.events
        )

    def summary(self) -> RunSummary:
        """The listing row for the current state."""
        state = self.state
        return RunSummary(
            status=listed_status(state),
            phase=state.current.phase if state.current else None,
            cost_usd=state.cost_usd,
            tokens=state.tokens,
            warnings=len(state.warnings),
            updated_at=state.updated_at,
        )

    def final_path(self, task: TaskState) -> Path:
        """Where a task's output is committed."""
        worker = self.definition.pipeline.worker(task.role)
        return self.run_dir / artifact_name(worker.output_name, task.visit, task.item)

    def _commit_output(
        self, event: ev.TaskCompleted, tmp: Path
    ) -> tuple[ev.TaskCompleted, bytes | None]:
        """Rename the output into place; the completion to record, and the body to store
        with it (small outputs)."""
        task = self.state.tasks[event.task_id]
        final = self.final_path(task)
        crash_point("before_commit_output")
        sha, size, body = artifacts.commit(tmp, final)
        crash_point("after_commit_output")
        committed = ev.TaskCompleted(
            at=event.at,
            task_id=event.task_id,
            attempt=event.attempt,
            artifact=final.name,
            sha256=sha,
            size=size,
            values=event.values,
            usage=event.usage,
            records=event.records,
        )
        return committed, body

    def keep_recorded_outputs(self) -> None:
        """After a commit that may have failed: keep for writing only the in-memory outputs
        whose completions the ledger really holds."""
        recorded = {(t.artifact, t.sha256) for t in self.state.tasks.values() if t.artifact}
        self.writes = [w for w in self.writes if (w.artifact, w.sha256) in recorded]

    def restore_outputs(self, store: Store) -> None:
        """Rewrite committed outputs that are missing or damaged (after a crash or a power
        loss) from the bodies the ledger stored with their completions."""
        self.writes.clear()
        pending: set[str] | None = None  # asked for once, and only when a file differs
        for task in self.state.tasks.values():
            if task.artifact is None or task.sha256 is None:
                continue
            path = self.run_dir / task.artifact
            if _intact(path, task.size, task.sha256):
                continue
            if pending is None:
                pending = pending_edits(store, self.run_id)
            body = store.artifact(task.sha256)
            if body is None and self.reuser is not None:
                body = self.reuser.recover(task)  # carried over from a run's folder
            if body is not None:
                keep_hand_edit(self.state, path, task.size, task.sha256, body, pending)
                artifacts.write_atomic(path, body)
        if self.state.delivered is not None:
            final_md, delivered = self.run_dir / "final.md", self.run_dir / self.state.delivered
            both = final_md.is_file() and delivered.is_file()
            if both and final_md.stat().st_size != delivered.stat().st_size:
                final_md.unlink()  # cut short by a crash: `act` writes it again
                self.final_md_placed = False

    def _adopt(self, now: float) -> list[obs.Input]:
        """Outputs committed while no orchestrator was recording (it died in between); and
        the attempts a worker began unrecorded (see `begun_attempts`): the step records
        each start, then each output after the start it implies."""
        begun, self.begun = self.begun, set()
        flight = self.state.in_flight()
        adopted: list[obs.Input] = [
            obs.Begun(task_id=t.task_id, attempt=t.attempt)
            for t in flight
            if (t.task_id, t.attempt) in begun
        ]
        for task in flight:
            final = self.final_path(task)
            if task.task_id in self.handles or final.is_symlink() or not final.is_file():
                continue  # a symlink was not committed by us and may point outside the run
            if final.stat().st_size == 0:
                # Not a commit of ours (those are durable before they appear): what a power
                # loss can leave of a file renamed unsynced. The task runs again.
                continue
            worker = self.definition.pipeline.worker(task.role)
            try:
                values = extract_values(worker.extract, final.read_text(encoding="utf-8"))
            except (ExtractionError, UnicodeDecodeError):
                continue  # only outputs that passed extraction are ever committed
            sha, size = artifacts.digest(final)
            if sha == task.sha256:
                continue  # the output it had before an edit's re-run: not a new result
            body = None
            if size <= artifacts.INLINE_LIMIT:
                body = final.read_bytes()
            else:
                artifacts.fsync_file(final)
            event = ev.TaskCompleted(
                at=now,
                task_id=task.task_id,
                attempt=task.attempt,
                artifact=final.name,
                sha256=sha,
                size=size,
                values=values,
                adopted=True,
            )
            adopted.append(obs.Adopted(event=event, body=body))
        return adopted

    def pending_writes(self) -> tuple[list[tuple[Path, bytes]], bool]:
        """The files `act` writes before anything else (in-memory outputs whose completions
        are recorded, and final.md once delivered), handed over to be written; (files,
        whether final.md is among them). The orchestrator writes those of all the runs of a
        tick in one batch, so that their fsyncs are committed together."""
        state = self.state
        if self.writes and self.placing_reused:
            crash_point("after_record_reuse")  # recorded, not yet placed: resume repairs
            self.placing_reused = False
        if self.writes and self.reviewed == "edit":
            crash_point("after_record_edit")  # recorded, not yet written: resume repairs
        delivering = (
            state.delivered is not None and not self.final_md_placed and self._add_final_md()
        )
        if delivering:
            crash_point("before_deliver")
        files = [(self.run_dir / w.artifact, w.body) for w in self.writes]
        self.writes = []
        return files, delivering

    def act(self, orchestrator: Orchestrator) -> None:
        """Carry out what the state calls for; safe to repeat."""
        state = self.state
        files, delivering = self.pending_writes()
        if files:
            artifacts.write_files(files)  # before any task that reads them starts
        if delivering:
            crash_point("after_deliver")
        for point in sorted(self.waits):  # recorded, not yet acted on: resume repairs
            crash_point(point)
        self.waits.clear()
        if self.reviewed is not None:
            if self.reviewed == "reject":
                crash_point("after_record_reject")  # recorded, its visit's tasks not started
            self.reviewed = None
        if state.status.ended and not self.children_stopped:
            # A child never outlives its parent's end.
            self.children_stopped = orchestrator.cancel_children(self)
        if state.status.ended:
            if any(task_id not in self.stopping for task_id in self.handles):
                withdraw_batched(self.run_id)  # before its calls are stopped (see there)
            for task_id, handle in list(self.handles.items()):
                if task_id in self.stopping:
                    continue
                handle.cancel()
                if handle.done():  # stopped at once (simulated workers)
                    del self.handles[task_id]
                    continue
                # Stopped, a model call reports what it had cost: the run is looked at again
                # once the task ended, so that the report is recorded before the lease goes.
                self.stopping.add(task_id)
                handle.add_done_callback(lambda _: orchestrator.touch(self))
        elif state.inert:
            pass  # imported and not trusted (`RunImported`): nothing of it is started
        elif given_up(self.definition.pipeline, state) is None:
            # (A run that fails once its running attempts end starts nothing more.)
            for task in self._to_start():
                running = self.handles.get(task.task_id)
                if running is not None and self.handle_attempts.get(task.task_id) != task.attempt:
                    # The engine timed that attempt out and recorded the next one: the old
                    # worker must not stand in for the attempt that is now current.
                    running.cancel()
                    del self.handles[task.task_id]
                if task.task_id in self.reusing:
                    continue
                if self.definition.pipeline.worker(task.role).pipeline is not None:
                    if task.task_id not in self.handles:
                        self.handles[task.task_id] = orchestrator.start_task(self, task)
                        self.handle_attempts[task.task_id] = task.attempt
                    continue  # a child run: never carried over from another run
                if task.task_id not in self.handles and self._claim(orchestrator, task):
                    continue
                if task.task_id not in self.handles:
                    crash_point("before_dispatch")
                    self.handles[task.task_id] = orchestrator.start_task(self, task)
                    self.handle_attempts[task.task_id] = task.attempt
        else:
            orchestrator.dispatcher.withdraw_unstarted(self)
        self.acted_mark = state.events
        if state.archived:  # first: its last status.json is then written into the archive
            self._archive(orchestrator)
        if orchestrator.settings.write_status and state.events != self.status_shows:
            self.refresh_status(orchestrator)

    def _to_start(self) -> list[TaskState]:
        """The tasks in flight that `act` may have to start: those dispatched since it last
        ran (all of them the first time), oldest first. Every other task in flight has its
        worker, or a claim of an earlier output, since that act; should one not, all are
        looked at again."""
        state = self.state
        flight = state.flight
        if self.acted_mark == 0:
            return state.in_flight()
        fresh = []
        for task_id in reversed(flight):  # in dispatch order: the newest dispatch last
            task = state.tasks[task_id]
            if task.dispatch_mark <= self.acted_mark:
                break
            fresh.append(task)
        if len(flight) - len(fresh) > len(self.handles) + len(self.reusing):
            return state.in_flight()
        fresh.reverse()
        return fresh

    def _claim(self, orchestrator: Orchestrator, task: TaskState) -> bool:
        """Carry an earlier output over instead of starting the task, when one matches."""
        if self.reuser is None:
            return False
        claim = self.reuser.claim(self.state, task, orchestrator.clock())
        if claim is None:
            return False
        crash_point("before_record_reuse")
        self.reusing.add(task.task_id)
        orchestrator.report(self, Report(event=claim.event, body=claim.body))
        return True

    def _add_final_md(self) -> bool:
        """Queue `final.md` (a copy of the delivered output) for writing if it is not there;
        whether it was queued.

        Written with the outputs, and like them made durable before the run is archived (an
        archived run is never resumed, so a final.md that a power loss emptied would stay
        empty; see `Orchestrator._sync_ended`). Once it is in place or handed
        over, later acts of the ended run do not look for it again (`final_md_placed`): the
        batch it was handed over with is written before anything else happens, or the loop
        stops and a resume, with a driver of its own, looks again.
        """
        assert self.state.delivered is not None
        final_md, delivered = self.run_dir / "final.md", self.run_dir / self.state.delivered
        if final_md.exists():
            self.final_md_placed = True
            return False
        # The recorded hash picks the body: an output edited at a review after its worker
        # completed has a newer text than the one kept at completion.
        recorded = next(
            (t.sha256 for t in self.state.tasks.values() if t.artifact == self.state.delivered),
            None,
        )
        data = self._delivered_body(delivered, recorded)
        if data is None:
            return False  # nothing holds the recorded text yet: restore_outputs writes it
        self.writes.append(fx.WriteOutput(artifact=final_md.name, body=data, sha256=""))
        self.final_md_placed = True
        return True

    def _delivered_body(self, delivered: Path, recorded: str | None) -> bytes | None:
        """The recorded text of the delivered output (any, if none is recorded): one that
        waits to be written, else the file on disk if it holds it."""
        for w in reversed(self.writes):
            if w.artifact == delivered.name and recorded in (None, w.sha256):
                return w.body
        if delivered.is_file():
            data = delivered.read_bytes()
            if recorded is None or hashlib.sha256(data).hexdigest() == recorded:
                return data
        return None

    def refresh_status(self, orchestrator: Orchestrator) -> None:
        """Rewrite status.json for a changed state: at once at a pause or an end, or when
        `status_interval` has passed since the last write; otherwise at that time (the loop
        wakes the run then), so that changes in between cost one write."""
        now = orchestrator.clock()
        # A wide run's status.json costs time to build: it is then rewritten less often, so
        # that the rewrites never take more than a small share of the loop.
        spacing = max(orchestrator.status_interval(), self.status_cost * STATUS_COST_FACTOR)
        due = self.status_written + spacing
        state = self.state
        awaiting_archive = state.status is RunStatus.DELIVERED and not state.archived
        if awaiting_archive and self.status_due is None:
            # Archived once its files are durable, a fraction of a second from now, and the
            # status.json then written into the archive shows it delivered: this one is
            # written only if the archive is late (a sync that fails, say).
            due = max(due, now + spacing)
        if (state.status is RunStatus.RUNNING or awaiting_archive) and now < due:
            if self.status_due is None:
                self.status_due = due
                orchestrator.wake_at(due, self)
            return
        self.status_due = None
        if self.run_dir.is_dir():
            began = orchestrator.cost_timer()
            self.write_status()
            self.status_written = now
            self.status_shows = self.state.events
            self.status_cost = orchestrator.cost_timer() - began

    def write_status(self) -> None:
        """Hand `status.json` to the process's status writer (a projection, written
        atomically by a thread of its own, no fsync: see `runtime/runfiles.py`).

        One line of compact JSON: the C encoder writes it several times faster than an
        indented one; `interlock status RUN --json` shows it indented.
        """
        view = status_view(
            self.definition.pipeline,
            self.state,
            self.run_dir.name,
            spend_waits=self.spend_waits,
            batch_waits=self.batch_waits,
        )
        view["orchestrator"] = self.lease.owner  # who keeps this copy current
        status_writer().put(self.run_dir / "status.json", codec.dumpb(view))

    def _archive(self, orchestrator: Orchestrator) -> None:
        target = orchestrator.home.archive_dir(self.run_id)
        if self.run_dir == target:
            return
        status_writer().flush(self.run_dir / "status.json")  # no rewrite across the move
        crash_point("before_archive")
        try:
            os.rename(self.run_dir, target)  # the same file system: one atomic rename
        except FileNotFoundError:
            if self.run_dir.exists():  # only the archive folder is missing
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(self.run_dir, target)
            elif not target.exists():
                return  # neither is there: nothing to move
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise RunFolderTaken(
                f"run {self.run_id}: delivered, but it cannot be archived: {target} holds "
                "another run's files (a run of another store given the same state directory, "
                "say); move that folder away, then 'interlock resume "
                f"{self.run_id}' archives it"
            ) from None
        self.run_dir = target

    def task_spec(self, task: TaskState, tmp: Path) -> TaskSpec | Outcome:
        """What the worker of `task` receives, or why it cannot run."""
        return self.prepare_spec(task, tmp)()

    def prepare_spec(self, task: TaskState, tmp: Path) -> Callable[[], TaskSpec | Outcome]:
        """`task_spec` in two halves: what it reads of the run is read now, and the function
        returned renders the templates from that copy alone, so that it may run in a thread
        while the loop goes on changing the run's state."""
        pipeline = self.definition.pipeline
        worker = pipeline.worker(task.role)
        items = self.state.current.items if self.state.current else None
        item = items[task.item] if items is not None and task.item is not None else None
        text = worker.task
        templated = renders_templates(worker)
        values = self._template_values(task, item) if templated else {}
        inputs = dict(self.state.inputs)
        # The command gets the pipeline's `env` names as well as its own.
        env = pipeline.env_for(worker.role) if worker.command is not None else []
        sent = sent_back(pipeline, self.state, task)
        reads = self._reads(task)
        if isinstance(reads, Outcome):
            return functools.partial(_same, reads)
        if sent is not None and sent.previous is not None:
            reads.append((sent.shown_as, self.run_dir / sent.previous))
        key = hashlib.sha256(f"{self.run_id}/{task.task_id}/{task.attempt}".encode()).hexdigest()
        spec = TaskSpec(
            run_id=self.run_id,
            task_id=task.task_id,
            attempt=task.attempt,
            worker=worker,
            task=text,
            topic=self.state.topic,
            inputs=self.state.inputs,
            item=item,
            reads=reads,
            output=tmp,
            run_dir=self.run_dir,
            model=task.model,
            workflow_dir=self.workflow_dir,
            idempotency_key=key[:32],
            pipeline=self.state.pipeline,
        )

        def render() -> TaskSpec | Outcome:
            try:
                rendered, argv = _render_spec(worker, values, inputs) if templated else (text, None)
            except TemplateProblem as exc:
                return Outcome(ok=False, error=str(exc), retryable=False)
            ran = (
                worker if argv is None else worker.model_copy(update={"command": argv, "env": env})
            )
            if worker.system is not None and "{" in worker.system:
                try:
                    system = render_system(worker.system, values, render_limits(worker))
                except TemplateProblem as exc:
                    return Outcome(ok=False, error=str(exc), retryable=False)
                ran = ran.model_copy(update={"system": system})
            return dataclasses.replace(spec, task=with_feedback(rendered, sent), worker=ran)

        return render

    def _template_values(self, task: TaskState, item: Any) -> dict[str, Any]:
        """What a task's templates may use."""
        return {
            **self.state.inputs,
            "topic": self.state.topic,
            "inputs": self.state.inputs,
            "item": template_item(item),
            "item_index": task.item,
            "visit": task.visit,
            "run_id": self.run_id,
            "feedback": self.state.feedback,
            "signals": signal_values(self.definition.pipeline, self.state),
            "failed_items": failed_item_values(self.state, self.definition.pipeline),
        }

    def child_request(self, task: TaskState) -> tuple[str, dict[str, Any]] | str:
        """The topic and inputs of the child run a `pipeline` task starts (its `task` and
        `inputs` rendered), or why they cannot be rendered."""
        worker = self.definition.pipeline.worker(task.role)
        items = self.state.current.items if self.state.current else None
        item = items[task.item] if items is not None and task.item is not None else None
        values = self._template_values(task, item)
        try:
            limits = render_limits(worker)
            topic = render_task(worker.task, values, limits) if worker.task else self.state.topic
            inputs = {
                key: render_task(value, values, limits) if isinstance(value, str) else value
                for key, value in worker.inputs.items()
            }
        except TemplateProblem as exc:
            return str(exc)
        return topic, inputs

    def _reads(self, task: TaskState) -> list[tuple[str, Path]] | Outcome:
        pipeline = self.definition.pipeline
        worker = pipeline.worker(task.role)
        writers = pipeline.writers
        reads = []
        for entry in worker.reads:
            name, optional = read_name(entry)
            role = writers[name]
            visit_outputs = self.state.outputs.get(role)
            files: list[str] = []
            if visit_outputs is not None:
                by_item = visit_outputs[1]
                same_lane = pipeline.phase_of(role).id == task.phase and task.item is not None
                if same_lane:
                    files = [by_item[task.item]] if task.item in by_item else []
                else:
                    files = [
                        by_item[k] for k in sorted(by_item, key=lambda k: -1 if k is None else k)
                    ]
            if not files and not optional:
                return Outcome(ok=False, error=self._unwritten(name, role), retryable=False)
            reads += [(name, self.run_dir / f) for f in files]
        return reads

    def _unwritten(self, name: str, role: str) -> str:
        """Why a required input has no file, and the fix."""
        phase = self.definition.pipeline.phase_of(role)
        optional = f"mark the read optional ('{name}?') to go on without it"
        if not self.state.visits.get(phase.id):
            return (
                f"input {name!r} has not been written: phase {phase.id!r} has not run; {optional}"
            )
        failed = self.state.failed_items.get(phase.id, (0, {}))[1]
        if phase.for_each is not None and failed:  # its latest visit's every item failed
            return (
                f"input {name!r} has not been written: every item of phase {phase.id!r} failed "
                f"({len(failed)} of {len(failed)} items), within its tolerate "
                f"{phase.for_each.tolerate}, so {role!r} wrote none; {optional}"
            )
        if phase.for_each is not None:
            return (
                f"input {name!r} has not been written: phase {phase.id!r} fans out over "
                f"{phase.for_each.items}, which held no items, so {role!r} ran for none; {optional}"
            )
        return f"input {name!r} has not been written"


@functools.lru_cache(maxsize=64)
def _folder_of(source: str, cwd: str) -> Path:
    """The absolute folder of a workflow file (the runs of one file share it: paths are
    built once)."""
    return Path(cwd, source).parent


def _intact(path: Path, size: int | None, sha256: str) -> bool:
    """Whether a committed output is on disk as recorded (large ones: by size alone)."""
    if not path.is_file() or path.stat().st_size != size:
        return False
    return size > artifacts.INLINE_LIMIT or artifacts.digest(path)[0] == sha256


def _same(outcome: Outcome) -> Outcome:
    return outcome


def renders_templates(worker: Worker) -> bool:
    """Whether a worker's task, system prompt or command has templates to render (most
    tasks are plain text, rendered by nothing)."""
    return "{" in worker.task or "{" in (worker.system or "") or worker.command is not None


def render_limits(worker: Worker) -> RenderLimits:
    """The bounds of rendering a worker's templates: its `max_task_size`, and wall-clock time
    besides the steps counted."""
    size = worker.max_task_size or MAX_TASK_SIZE
    return RenderLimits(size=size, clock=time.monotonic)


def _render_spec(
    worker: Worker, values: dict[str, Any], inputs: dict[str, Any]
) -> tuple[str, list[str] | None]:
    """A worker's task text and command rendered (raises TemplateProblem)."""
    limits = render_limits(worker)
    text = render_task(worker.task, values, limits)
    if worker.command is None:
        return text, None
    # Values rendered into an argument keep their braces literal, so that a topic or an
    # extracted item can never turn into a placeholder such as {output}.
    literal = {k: escape_braces(v) if isinstance(v, str) else v for k, v in values.items()}
    literal["inputs"] = {
        k: escape_braces(v) if isinstance(v, str) else v for k, v in inputs.items()
    }
    return text, [render_task(arg, literal, limits) for arg in worker.command]


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
