"""One run as the orchestrator drives it: its folded state, its lease, its running tasks.

The driver turns what happened since the last tick into the engine's inputs and takes the
run's step (`step`); after the orchestrator committed its events, `act` asks the engine for the
effects the state calls for, given what runs now, and `runtime/apply.py` carries them out. The
driver decides nothing itself. Acting is idempotent: the effects are asked from the state, not
from what changed, so a crash between "recorded" and "acted" is repaired by acting again on
resume.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.loader import Definition
from interlock.core.observe import CommandKind
from interlock.core.state import (
    RunState,
    batch_parked,
    listed_status,
)
from interlock.engine import Recorded, RunMachine
from interlock.engine import effects as fx
from interlock.engine import inputs as obs
from interlock.runtime import apply, artifacts, run_outputs, status_file
from interlock.runtime.artifacts import StrPath
from interlock.runtime.edits import REVIEW_KINDS
from interlock.runtime.faults import crash_point
from interlock.runtime.reports import Report
from interlock.runtime.reuse import Reuser
from interlock.runtime.status_file import StatusMarks
from interlock.storage.base import CommandRecord, Lease, NewEvent, RunSummary, Store

log = logging.getLogger("interlock.runtime")


@dataclass
class RunDriver:
    """The orchestrator's working copy of one run."""

    definition: Definition
    state: RunState
    lease: Lease
    run_dir: Path
    workers: apply.Workers = field(default_factory=apply.Workers)  # what runs for it now
    reports: list[Report] = field(default_factory=list)
    # The reports the last `observe` turned into events, handed back by `reobserve` when
    # their commit failed: a worker's finished work is recorded later, never redone.
    observed_reports: list[Report] = field(default_factory=list)
    commands: list[CommandRecord] = field(default_factory=list)
    source: str = ""  # the workflow file the run was started from (may be gone)
    status: StatusMarks = field(default_factory=StatusMarks)
    spend_waits: dict[str, dict[str, Any]] = field(default_factory=dict)  # task: its cap wait
    batch_waits: dict[str, dict[str, Any]] = field(default_factory=dict)  # task: its batch
    checked_adoption: bool = False
    # Attempts a worker began before this driver took the run (see `begun_attempts`): each
    # gets its start recorded, if the orchestrator that began it did not record one.
    begun: set[tuple[str, int]] = field(default_factory=set)
    dirty: bool = True
    # Bodies the last step stores with its events in the ledger (SHA-256, bytes).
    stored: list[tuple[str, bytes]] = field(default_factory=list)
    # Outputs held in memory, written into the run directory once their completion is
    # recorded (a crash before that loses nothing: the ledger holds them).
    writes: list[fx.WriteOutput] = field(default_factory=list)
    # Outputs written from the ledger without an fsync (see `Orchestrator._write_outputs`),
    # made durable once the run ends, before it is archived or let go.
    unsynced: list[artifacts.StrPath] = field(default_factory=list)
    syncing: bool = False  # a sync of the run's files is under way
    synced_mark: int = -1  # the number of events the state held when the last sync began
    # Fingerprints every completion and carries earlier outputs over (reruns, the cache).
    reuser: Reuser | None = None
    unacted: apply.Unacted = field(default_factory=apply.Unacted)  # crash points to pass
    machine: RunMachine = field(init=False, repr=False)  # the run's step (`interlock.engine`)
    # What the applier calls of the loop for this run (bound by the orchestrator that
    # takes it, once it has its `reuser`).
    ports: apply.RunPorts = field(init=False, repr=False)

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
                self.workers.claiming.discard(event.task_id)
                assert report.body is not None
                stored = event.size <= artifacts.INLINE_LIMIT
                inputs.append(obs.Reused(event=event, body=report.body, stored=stored))
            elif isinstance(event, ev.ChildUpdated):
                inputs.append(obs.ChildChanged(event=event))
            elif isinstance(event, ev.ChildSpent):
                inputs.append(obs.ChildSpend(event=event))
            elif isinstance(event, ev.TaskBatchWaited):
                inputs.append(obs.BatchWait(event=event))
            elif report.tmp is None:
                inputs.append(obs.Reported(event=event, body=report.body))
            else:
                # Renamed into place only when it is recorded: a stale or duplicate attempt's
                # file is dropped (what its call cost is kept, by the step).
                attempt = (event.task_id, event.attempt)
                fresh = attempt not in finished and self.machine.accepts(self.state, event)
                if isinstance(event, ev.TaskCompleted) and fresh:
                    finished.add(attempt)
                    event, body = run_outputs.commit_output(
                        self.definition.pipeline, self.state, self.run_dir, event, report.tmp
                    )
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
            mark = _MARKED.get(type(event))  # most events mark nothing: one look-up for them
            if mark is None:
                pass
            elif mark == "reviewed":
                self.unacted.reviewed = "edit" if isinstance(event, ev.OutputEdited) else "reject"
            elif mark == "placing_reused":
                self.unacted.placing_reused = True
            else:
                self.unacted.waits.add(mark)
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
            batch_parked=batch_parked(state),
            estimated=state.estimated,
        )

    def keep_recorded_outputs(self) -> None:
        """After a commit that may have failed: keep for writing only the in-memory outputs
        whose completions the ledger really holds."""
        self.writes = run_outputs.recorded_writes(self.state, self.writes)

    def restore_outputs(self, store: Store) -> None:
        """Rewrite committed outputs that are missing or damaged (`run_outputs`)."""
        self.writes.clear()
        if run_outputs.restore_outputs(store, self.state, self.run_dir, self.reuser):
            self.workers.final_placed = False

    def _adopt(self, now: float) -> list[obs.Input]:
        """Outputs committed while no orchestrator was recording (it died in between); and
        the attempts a worker began unrecorded (see `begun_attempts`): the step records
        each start, then each output after the start it implies."""
        begun, self.begun = self.begun, set()
        adopted: list[obs.Input] = [
            obs.Begun(task_id=t.task_id, attempt=t.attempt)
            for t in self.state.in_flight()
            if (t.task_id, t.attempt) in begun
        ]
        pipeline = self.definition.pipeline
        adopted += run_outputs.adopted(
            pipeline, self.state, self.run_dir, self.workers.handles, now
        )
        return adopted

    def plan(self) -> list[fx.Effect]:
        """The effects the run's state calls for now (`apply.plan`)."""
        return apply.plan(self.machine, self.state, self.workers, self.writes)

    def stage(self, effects: Sequence[fx.Effect]) -> tuple[list[tuple[StrPath, bytes]], bool]:
        """The files of `effects`, handed over to be written (`apply.stage_files`): the
        outputs waiting for it are no longer held."""
        writes, self.writes = self.writes, []
        return apply.stage_files(self.run_dir, writes, effects, self.workers, self.unacted)

    def act(self, effects: Sequence[fx.Effect] | None = None) -> None:
        """Carry out what the state calls for (`effects`, planned already when the
        orchestrator wrote the tick's files; else planned and written here); safe to repeat."""
        if effects is None:
            effects = self.plan()
            files, delivering = self.stage(effects)
            if files:
                artifacts.write_files(files)  # before any task that reads them starts
            if delivering:
                crash_point("after_deliver")
        self.run_dir = apply.apply(
            self.state, self.run_dir, effects, self.workers, self.unacted, self.status, self.ports
        )

    def refresh_status(self) -> None:
        """Rewrite status.json now, or schedule its rewrite (`status_file.refresh_status`)."""
        apply.refresh(self.status, self.state, self.run_dir, self.ports)

    def write_status(self, run_dir: Path | None = None) -> None:
        """Hand `status.json` to the process's status writer (`status_file.write_status`),
        into `run_dir` (the run's folder unless given)."""
        status_file.write_status(
            self.definition.pipeline,
            self.state,
            self.run_dir if run_dir is None else run_dir,
            self.lease.owner,
            spend_waits=self.spend_waits,
            batch_waits=self.batch_waits,
        )


@functools.lru_cache(maxsize=64)
def _folder_of(source: str, cwd: str) -> Path:
    """The absolute folder of a workflow file (the runs of one file share it: paths are
    built once)."""
    return Path(cwd, source).parent


# What `_recorded` notes of an event, by its type: the crash point a signal or wait event
# waits for once acted on, a review just recorded, a reused output to place.
_MARKED: dict[type, str] = {
    ev.SignalReceived: "after_record_signal",
    ev.WaitStarted: "after_record_wait",
    ev.WaitEnded: "after_end_wait",
    ev.OutputEdited: "reviewed",
    ev.Rejected: "reviewed",
    ev.TaskReused: "placing_reused",
}
