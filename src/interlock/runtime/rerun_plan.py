"""`rerun --dry-run`: what a rerun would reuse and what it would run, without calling anything.

The engine is driven in memory on the rerun's definition. A task that matches is folded as
reused, with the source's output; a task that would run is folded as completed with an output
that matches nothing (so what reads it runs too) and the source's values (the best guess for
the decisions that follow). Branches taken after such a task may go another way when the run
is real: the plan says where.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import RuleName, settle, waits_for_slot
from interlock.core.reuse import ReuseReason, ReuseVerdict
from interlock.core.state import RunState, RunStatus, TaskState, apply, fold
from interlock.core.workflow import Pipeline
from interlock.runtime.orchestrator import Orchestrator
from interlock.runtime.rerun import PreparedRerun, RerunRequest, prepare
from interlock.runtime.reuse import Reuser, SourceRun

MAX_STEPS = 10_000  # the engine settles long before this on any sound pipeline


@dataclass(frozen=True, kw_only=True)
class PlannedTask:
    """One task of the rerun: reused or run, and why."""

    task_id: str
    phase: str
    reuse: bool
    why: str
    changed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """For `--json`."""
        return {
            "task_id": self.task_id,
            "phase": self.phase,
            "action": "reuse" if self.reuse else "run",
            "why": self.why,
            "changed": self.changed,
        }


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A rerun's tasks in the order they would be dispatched, and where the path may differ."""

    source: str
    tasks: list[PlannedTask]
    notes: list[str]
    config_line: str | None = None  # `config: FILE`, what its models resolve with

    @property
    def reused(self) -> int:
        """How many tasks would be carried over."""
        return sum(t.reuse for t in self.tasks)

    def as_dict(self) -> dict[str, Any]:
        """For `--json`."""
        return {
            "source": self.source,
            "reuse": self.reused,
            "run": len(self.tasks) - self.reused,
            "tasks": [t.as_dict() for t in self.tasks],
            "notes": self.notes,
            "config": self.config_line,
        }


def plan(prepared: PreparedRerun, reuser: Reuser, source: SourceRun, now: float) -> Plan:
    """Walk the rerun in memory; nothing is recorded or called (`now`: for cache ages)."""
    pipeline = prepared.definition.pipeline
    state = fold(
        [
            ev.RunCreated(
                at=0.0,
                run_id="dry-run",
                pipeline=prepared.definition.name,
                definition_hash=prepared.definition.hash,
                topic=prepared.topic,
                inputs=prepared.inputs,
                rerun_of=source.run_id,
                rerun_from=prepared.from_phase,
                no_cache=prepared.no_cache,
            )
        ]
    )
    tasks: list[PlannedTask] = []
    notes: list[str] = []
    guessed: set[str] = set()  # roles whose values are the source's, though they run again
    source_branches = source.branches
    for _ in range(MAX_STEPS):
        if waits_for_slot(pipeline, state):
            # The plan asks what the rerun would do once it runs; waiting for a slot of its
            # concurrency key only delays that, so it is taken at once.
            apply(state, ev.SlotTaken(at=0.0, key=source.state.slot or ""))
        for decision in settle(pipeline, state, 0.0):
            event = decision.event
            if isinstance(event, ev.BranchTaken):
                notes += _branch_notes(event, guessed, source_branches, source.run_id)
            elif decision.rule is RuleName.BRANCH_ERROR:
                notes.append(f"cannot foresee beyond this point: {decision.why}")
        if state.task_slot_waits:
            # Waiting for a slot of a worker's concurrency key only delays a task: the plan
            # gives every waiting attempt its slot and settles again.
            for wait in list(state.task_slot_waits.values()):
                taken = ev.TaskSlotTaken(
                    at=0.0, task_id=wait.task_id, attempt=wait.attempt, key=wait.key
                )
                apply(state, taken)
            continue
        pending = state.in_flight()
        if not pending:
            if state.status is RunStatus.PAUSED:
                where = state.current.phase if state.current else "?"
                notes.append(f"pauses for approval after phase {where!r}")
                apply(state, ev.Approved(at=0.0))
                continue
            if state.status is RunStatus.RUNNING and state.waiting is not None:
                note = _end_wait(pipeline, state, source)
                notes.append(note)
                if note.startswith("cannot foresee"):
                    break
                continue
            break
        for task in pending:
            claim = reuser.claim(state, task, now)
            verdict = reuser.verdicts.get(task.task_id) or ReuseVerdict(
                reuse=False, reason=ReuseReason.NOT_IN_SOURCE, why="runs"
            )
            tasks.append(
                PlannedTask(
                    task_id=task.task_id,
                    phase=task.phase,
                    reuse=claim is not None,
                    why=verdict.why,
                    changed=list(verdict.changed),
                )
            )
            if claim is not None:
                apply(state, claim.event)
                continue
            apply(state, _recomputed(task, source.state.tasks.get(task.task_id)))
            if pipeline.worker(task.role).extract:
                guessed.add(task.role)
        reuser.notes.clear()
    foreseen = not any(note.startswith("cannot foresee") for note in notes)
    if state.status is RunStatus.FAILED and state.failure and foreseen:
        # A branch that needed a value no run has produced yet is not a failure of the
        # rerun, only the end of what a plan can tell: its note says so already.
        notes.append(f"the plan ends failed: {state.failure}")
    return Plan(
        source=source.run_id,
        tasks=tasks,
        notes=[*prepared.notes, *notes],
        config_line=prepared.config_line,
    )


def _end_wait(pipeline: Pipeline, state: RunState, source: SourceRun) -> str:
    """Carry a wait to its end as the source run's went: a delay passes, a signal the source
    received arrives with the same data, one it did not get times out. Returns the note."""
    waiting = state.waiting
    assert waiting is not None
    if waiting.signal is None:
        settle(pipeline, state, waiting.until or 0.0)
        return f"waits before phase {waiting.phase!r} (delay)"
    name = waiting.signal
    data = source.state.signals.get(name)
    if data is not None:
        apply(state, ev.SignalReceived(at=0.0, name=name, data=data, by="dry-run"))
        settle(pipeline, state, 0.0)
        return f"waits for signal {name!r} (planned with the data run {source.run_id} received)"
    if waiting.until is None:
        return (
            f"cannot foresee beyond this point: phase {waiting.phase!r} waits for signal "
            f"{name!r}, which run {source.run_id} never received"
        )
    settle(pipeline, state, waiting.until)
    return f"waits for signal {name!r} (planned as timing out, as in run {source.run_id})"


def _recomputed(task: TaskState, candidate: TaskState | None) -> ev.TaskCompleted:
    """A stand-in for a task that would run: an output no real one has (so whatever reads it
    runs as well), with the source's values as the best guess for the decisions after it."""
    unknown = hashlib.sha256(f"dry-run/{task.task_id}".encode()).hexdigest()
    return ev.TaskCompleted(
        at=0.0,
        task_id=task.task_id,
        attempt=task.attempt,
        artifact=candidate.artifact if candidate is not None and candidate.artifact else "",
        sha256=unknown,
        size=0,
        values=dict(candidate.values) if candidate is not None else {},
    )


def _branch_notes(
    event: ev.BranchTaken,
    guessed: set[str],
    source_branches: dict[tuple[str, int], str],
    source_run: str,
) -> list[str]:
    notes = []
    before = source_branches.get((event.phase, event.visit))
    if before is not None and before != event.goto:
        notes.append(
            f"after phase {event.phase!r} (visit {event.visit}) the rerun goes to "
            f"{event.goto!r}, where run {source_run} went to {before!r}"
        )
    if event.condition and guessed:
        roles = ", ".join(sorted(guessed))
        notes.append(
            f"after phase {event.phase!r} (visit {event.visit}): rule {event.rule} "
            f"({event.condition}) may decide otherwise when it runs, since values of "
            f"{roles} are computed again (planned with run {source_run}'s)"
        )
    return notes


def dry_run(orchestrator: Orchestrator, request: RerunRequest) -> Plan:
    """Check a rerun request and plan it (raises UsageError like a real rerun would)."""
    prepared = prepare(orchestrator.store, orchestrator, request)
    definition = prepared.definition
    reuser = Reuser(
        store=orchestrator.store,
        home=orchestrator.home,
        models=orchestrator.models,
        definition=definition,
        workflow_dir=Path(definition.source).parent.absolute() if definition.source else None,
    )
    source = SourceRun.load(orchestrator.store, orchestrator.home, prepared.source)
    reuser.source = source
    return plan(prepared, reuser, source, orchestrator.clock())
