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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core import events as ev
from interlock.core.decide import given_up, settle
from interlock.core.extract import ExtractionError, extract_values
from interlock.core.loader import Definition
from interlock.core.observe import (
    Command,
    CommandKind,
    accept_child_spend,
    accept_child_update,
    accept_result,
    implied_start,
    interpret_command,
    late_usage,
)
from interlock.core.review import sent_back, with_feedback
from interlock.core.state import (
    RunState,
    RunStatus,
    TaskState,
    apply,
    artifact_name,
    listed_status,
)
from interlock.core.template_guard import MAX_TASK_SIZE, RenderLimits
from interlock.core.templates import TemplateProblem, render_task, template_item
from interlock.core.validate import read_name
from interlock.core.waits import signal_values
from interlock.errors import RunFolderTaken
from interlock.runtime import artifacts
from interlock.runtime.edits import (
    REVIEW_KINDS,
    keep_hand_edit,
    pending_edits,
    review_command,
)
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
    checked_adoption: bool = False
    # Attempts a worker began before this driver took the run (see `begun_attempts`): each
    # gets its start recorded, if the orchestrator that began it did not record one.
    begun: set[tuple[str, int]] = field(default_factory=set)
    acted_mark: int = 0  # the number of events the state held when `act` last ran (0: never)
    dirty: bool = True
    inline: list[tuple[str, bytes]] = field(default_factory=list)  # outputs for the next append
    # Outputs held in memory, written into the run directory once their completion is
    # recorded (a crash before that loses nothing: the ledger holds them).
    unwritten: list[tuple[Path, bytes]] = field(default_factory=list)
    # The final worker's output (file name, body, SHA-256), for final.md.
    final_body: tuple[str, bytes, str] | None = None
    final_md_placed: bool = False  # final.md was found in place or handed over for writing
    # Outputs written from the ledger without an fsync (see `Orchestrator._write_outputs`),
    # made durable once the run ends, before it is archived or let go.
    unsynced: list[Path] = field(default_factory=list)
    syncing: bool = False  # a sync of the run's files is under way
    synced_mark: int = -1  # the number of events the state held when the last sync began
    # Fingerprints every completion and carries earlier outputs over (reruns, the cache).
    reuser: Reuser | None = None
    reusing: set[str] = field(default_factory=set)  # tasks whose reuse awaits recording
    placing_reused: bool = False  # a reused output waits in `unwritten`
    reviewed: str | None = None  # "edit" or "reject" just recorded, not yet acted on
    waits: set[str] = field(default_factory=set)  # signal/wait events recorded, not acted on
    children_stopped: bool = False  # the children of the ended run were asked to stop

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.state.run_id

    @functools.cached_property
    def workflow_dir(self) -> Path | None:
        """The directory of the workflow file the run was started from (None if unknown)."""
        return _folder_of(self.source, os.getcwd()) if self.source else None

    def observe(self, now: float) -> tuple[list[NewEvent], list[int]]:
        """Turn reports, files found on disk and commands into events (applied to state)."""
        observed: list[NewEvent] = []
        committed = False
        # An output from a file is renamed into place below: if its commit fails, adoption
        # finds it.
        self.observed_reports = [r for r in self.reports if r.tmp is None]
        for report in self.reports:
            event = report.event
            if isinstance(event, ev.TaskReused):
                observed += self._reused(event, report.body)
                continue
            if isinstance(event, ev.ChildUpdated):
                if accept_child_update(self.state, event):
                    apply(self.state, event)
                    observed.append(NewEvent(event=event, why=event.detail or None))
                continue
            if isinstance(event, ev.ChildSpent):
                if accept_child_spend(self.state, event):
                    apply(self.state, event)
                    observed.append(NewEvent(event=event, why="the child run spent more"))
                continue
            if not accept_result(self.state, event):
                if report.tmp is not None:
                    artifacts.discard(report.tmp)  # a stale or duplicate attempt: drop it
                late = late_usage(self.state, event)  # ...but what its call cost is kept
                if late is not None:
                    apply(self.state, late)
                    observed.append(NewEvent(event=late, why="answered after it stopped counting"))
                continue
            if isinstance(event, ev.TaskCompleted) and report.body is not None:
                event = self._keep_body(event, report.body)
            elif isinstance(event, ev.TaskCompleted) and report.tmp is not None:
                event = self._commit_output(event, report.tmp)
                committed = True
            if isinstance(event, ev.TaskCompleted) and self.reuser is not None:
                event = self.reuser.stamp(self.state, event)
            start = implied_start(self.state, event)
            if start is not None:
                apply(self.state, start)
                observed.append(NewEvent(event=start, why="implied by the attempt's result"))
            why = restarted(self.state, event)
            apply(self.state, event)
            observed.append(NewEvent(event=event, why=why))
        self.reports.clear()
        if committed:
            artifacts.fsync_dir(self.run_dir)  # the renames, durable before they are recorded
        if not self.checked_adoption:
            observed += self._adopt(now)
            self.checked_adoption = True
        if self.reuser is not None and self.reuser.notes:
            for note in self.reuser.notes:
                warned = ev.Warned(at=now, message=note)
                apply(self.state, warned)
                observed.append(NewEvent(event=warned))
            self.reuser.notes.clear()
        consumed = []
        for record in self.commands:
            if record.kind in REVIEW_KINDS:
                observed += review_command(self, record, now)
                consumed.append(record.id)
                continue
            command = Command(kind=CommandKind(record.kind), message=record.message, by=record.by)
            if command.kind is CommandKind.SIGNAL:
                crash_point("before_record_signal")
            outcome = interpret_command(self.state, command, now)
            if isinstance(outcome, ev.Event):
                if isinstance(outcome, ev.SignalReceived):
                    self.waits.add("after_record_signal")
                apply(self.state, outcome)
                observed.append(NewEvent(event=outcome, why=f"{record.kind} from {record.by}"))
            else:
                log.info(outcome, extra={"run_id": self.run_id, "action": "command_refused"})
            consumed.append(record.id)
        self.commands.clear()
        return observed, consumed

    def _reused(self, event: ev.TaskReused, body: bytes | None) -> list[NewEvent]:
        """Record a reuse claimed at the last act; its file is placed once it is recorded."""
        self.reusing.discard(event.task_id)
        task = self.state.tasks.get(event.task_id)
        if task is None or task.attempt != event.attempt or not task.status.in_flight:
            return []  # claimed twice, or the run moved on (cancelled): nothing to record
        assert body is not None
        if event.size <= artifacts.INLINE_LIMIT:
            self.inline.append((event.sha256, body))
        final = self.final_path(task)
        self.unwritten.append((final, body))
        self.placing_reused = True
        if self.definition.pipeline.worker(task.role).final:
            self.final_body = (final.name, body, event.sha256)
        apply(self.state, event)
        why = f"same fingerprint as {event.source_task} of {event.source_run}"
        return [NewEvent(event=event, why=why)]

    def reobserve(self) -> None:
        """After the commit of the last observation failed (and the state was rebuilt from
        the ledger): observe its reports again next time. Those the ledger holds after all
        (an ambiguous commit) are then dropped as duplicates."""
        self.reports[:0] = self.observed_reports
        self.observed_reports = []

    def decide(self, now: float) -> list[NewEvent]:
        """Settle the engine on the current state (decisions are applied to state)."""
        decisions = settle(self.definition.pipeline, self.state, now, archive=self.durable())
        for decision in decisions:
            if isinstance(decision.event, ev.WaitStarted):
                self.waits.add("after_record_wait")
            elif isinstance(decision.event, ev.WaitEnded):
                self.waits.add("after_end_wait")
        return [NewEvent(event=d.event, rule=str(d.rule), why=d.why) for d in decisions]

    def durable(self) -> bool:
        """Whether everything written into the run's folder is durable, by a sync that began
        after the last event: only then is a delivered run archived (or an ended one let go),
        since a run that is archived is never resumed, whose resume would repair its files."""
        return (
            not self.syncing
            and not self.unsynced
            and not self.unwritten
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

    def _commit_output(self, event: ev.TaskCompleted, tmp: Path) -> ev.TaskCompleted:
        """Rename the output into place; the completion to record."""
        task = self.state.tasks[event.task_id]
        final = self.final_path(task)
        crash_point("before_commit_output")
        sha, size, body = artifacts.commit(tmp, final)
        crash_point("after_commit_output")
        if body is not None:
            self.inline.append((sha, body))
        return ev.TaskCompleted(
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

    def _keep_body(self, event: ev.TaskCompleted, body: bytes) -> ev.TaskCompleted:
        """A completion whose output is in memory: stored with it, written after it."""
        task = self.state.tasks[event.task_id]
        final = self.final_path(task)
        sha = hashlib.sha256(body).hexdigest()
        self.inline.append((sha, body))
        self.unwritten.append((final, body))
        if self.definition.pipeline.worker(task.role).final:
            self.final_body = (final.name, body, sha)
        return ev.TaskCompleted(
            at=event.at,
            task_id=event.task_id,
            attempt=event.attempt,
            artifact=final.name,
            sha256=sha,
            size=len(body),
            values=event.values,
            usage=event.usage,
            records=event.records,
        )

    def keep_recorded_outputs(self) -> None:
        """After a commit that may have failed: keep for writing only the in-memory outputs
        whose completions the ledger really holds."""
        recorded = {(t.artifact, t.sha256) for t in self.state.tasks.values() if t.artifact}
        self.unwritten = [
            (path, body)
            for path, body in self.unwritten
            if (path.name, hashlib.sha256(body).hexdigest()) in recorded
        ]

    def restore_outputs(self, store: Store) -> None:
        """Rewrite committed outputs that are missing or damaged (after a crash or a power
        loss) from the bodies the ledger stored with their completions."""
        self.unwritten.clear()
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

    def _adopt(self, now: float) -> list[NewEvent]:
        """Outputs committed while no orchestrator was recording (it died in between), each
        after the start it implies; and the starts of attempts a worker began unrecorded."""
        adopted = self._begun_starts(now)
        for task in self.state.in_flight():
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
            if size <= artifacts.INLINE_LIMIT:
                self.inline.append((sha, final.read_bytes()))
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
            if self.reuser is not None:
                event = self.reuser.stamp(self.state, event)
            if task.started_at is None:  # it ran: its worker began it, unrecorded
                start = ev.TaskStarted(at=now, task_id=task.task_id, attempt=task.attempt)
                apply(self.state, start)
                adopted.append(NewEvent(event=start, why="implied by its output found on disk"))
            apply(self.state, event)
            adopted.append(NewEvent(event=event, why="output found committed on disk"))
        return adopted

    def _begun_starts(self, now: float) -> list[NewEvent]:
        """The starts of attempts in flight that a worker began (its process or prompt
        record was found) though none was recorded: the orchestrator that began them
        stopped first. They run again, and show both starts."""
        begun, self.begun = self.begun, set()
        starts = []
        for task in self.state.in_flight():
            if task.started_at is not None or (task.task_id, task.attempt) not in begun:
                continue
            start = ev.TaskStarted(at=now, task_id=task.task_id, attempt=task.attempt)
            apply(self.state, start)
            why = "begun by a worker of an orchestrator that stopped before recording it"
            starts.append(NewEvent(event=start, why=why))
        return starts

    def pending_writes(self) -> tuple[list[tuple[Path, bytes]], bool]:
        """The files `act` writes before anything else (in-memory outputs whose completions
        are recorded, and final.md once delivered), handed over to be written; (files,
        whether final.md is among them). The orchestrator writes those of all the runs of a
        tick in one batch, so that their fsyncs are committed together."""
        state = self.state
        if self.unwritten and self.placing_reused:
            crash_point("after_record_reuse")  # recorded, not yet placed: resume repairs
            self.placing_reused = False
        if self.unwritten and self.reviewed == "edit":
            crash_point("after_record_edit")  # recorded, not yet written: resume repairs
        delivering = (
            state.delivered is not None and not self.final_md_placed and self._add_final_md()
        )
        if delivering:
            crash_point("before_deliver")
        files, self.unwritten = self.unwritten, []
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
        candidates = self._delivered_bodies(delivered)
        if recorded is None:
            data = next(candidates, None)
        else:
            data = next((b for b in candidates if self._sha_of(b) == recorded), None)
        if data is None:
            return False  # nothing holds the recorded text yet: restore_outputs writes it
        self.unwritten.append((final_md, data))
        self.final_body = None
        self.final_md_placed = True
        return True

    def _delivered_bodies(self, delivered: Path) -> Iterator[bytes]:
        """The texts that may be the delivered output, newest first; the file on disk is
        looked at only if none of those held in memory is the recorded one."""
        for path, body in reversed(self.unwritten):
            if path == delivered:
                yield body
        if self.final_body is not None and self.final_body[0] == delivered.name:
            yield self.final_body[1]
        if delivered.is_file():
            yield delivered.read_bytes()

    def _sha_of(self, body: bytes) -> str:
        """SHA-256 of an output, taken from its completion when it is the final worker's."""
        if self.final_body is not None and body is self.final_body[1]:
            return self.final_body[2]
        return hashlib.sha256(body).hexdigest()

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
        view = status_view(self.definition.pipeline, self.state, self.run_dir.name)
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
        )

        def render() -> TaskSpec | Outcome:
            try:
                rendered, argv = _render_spec(worker, values, inputs) if templated else (text, None)
            except TemplateProblem as exc:
                return Outcome(ok=False, error=str(exc), retryable=False)
            ran = (
                worker if argv is None else worker.model_copy(update={"command": argv, "env": env})
            )
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


def restarted(state: RunState, event: ev.Event) -> str | None:
    """Why a start is recorded for an attempt that had started already, else None."""
    if not isinstance(event, ev.TaskStarted):
        return None
    task = state.tasks.get(event.task_id)
    if task is None or task.started_at is None:
        return None
    return (
        f"attempt {event.attempt} started again by {event.worker or 'another process'}: "
        f"{task.worker or 'the process'} that started it stopped before it ended"
    )


def _intact(path: Path, size: int | None, sha256: str) -> bool:
    """Whether a committed output is on disk as recorded (large ones: by size alone)."""
    if not path.is_file() or path.stat().st_size != size:
        return False
    return size > artifacts.INLINE_LIMIT or artifacts.digest(path)[0] == sha256


def _same(outcome: Outcome) -> Outcome:
    return outcome


def renders_templates(worker: Worker) -> bool:
    """Whether a worker's task or command has templates to render (most tasks are plain
    text, rendered by nothing)."""
    return "{" in worker.task or worker.command is not None


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
