"""The invariants every simulated step must keep, checked against the stored history.

`HistoryChecker` reads the history as it grows and refuses any transition the engine must
never record; `end_problems` checks how a run finished.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from interlock.core import events as ev
from interlock.core.decide import given_up, still_running
from interlock.core.state import RunState, RunStatus, TaskStatus, apply
from interlock.core.workflow import Pipeline
from interlock.sim.policy import PolicyChecker
from interlock.sim.review import review_transition
from interlock.sim.signals import WaitChecker


@dataclass
class _Task:
    attempt: int
    phase: str
    visit: int
    status: str  # dispatched, started, completed, failed, retry_wait
    completions: int = 0
    worker: str = ""  # who reported the attempt's latest start


@dataclass
class HistoryChecker:
    """Folds stored events one by one, keeping its own shadow state, and lists violations."""

    pipeline: Pipeline
    shadow: RunState = field(default_factory=RunState)
    tasks: dict[str, _Task] = field(default_factory=dict)
    ended: str | None = None
    paused: bool = False
    pauses: int = 0
    approvals: int = 0
    edited: bool = False  # an edit was recorded since the last rejection (`sim.review`)
    seen: int = 0
    problems: list[str] = field(default_factory=list)
    policy: PolicyChecker = field(init=False)
    waits: WaitChecker = field(default_factory=WaitChecker)

    def __post_init__(self) -> None:
        self.policy = PolicyChecker(self.pipeline)

    def feed(self, seq: int, event: ev.Event) -> None:
        """Check one more stored event (they must come in order, without gaps)."""
        if seq != self.seen + 1:
            self.problems.append(f"seq {seq} follows {self.seen}: a gap or a duplicate")
        self.seen = seq
        where = f"seq {seq} {event.kind}"
        problem = self._transition(event) or self._after_give_up(event)
        policy_problem = self.policy.problem(event)  # always: it keeps its own counts
        wait_problem = self.waits.problem(event)  # so does this one
        problem = problem or policy_problem or wait_problem
        if problem:
            self.problems.append(f"{where}: {problem}")
        apply(self.shadow, event)

    def _transition(self, event: ev.Event) -> str | None:
        if self.seen == 1:
            return None if isinstance(event, ev.RunCreated) else "a history must start RunCreated"
        if isinstance(event, ev.RunCreated):
            return "a second RunCreated"
        if self.ended is not None:
            if isinstance(event, ev.Archived) and self.ended == "delivered":
                return None
            if isinstance(event, ev.MessageNoted | ev.UsageRecorded):
                return None
            return f"recorded after the run ended ({self.ended})"
        if isinstance(event, (ev.Delivered, ev.RunFailed, ev.RunCancelled)):
            self.ended = event.kind
            if isinstance(event, ev.Delivered):
                open_tasks = [t for t, s in self.tasks.items() if s.status != "completed"]
                if open_tasks:
                    return f"delivered while tasks {open_tasks} had not completed"
            return None
        if isinstance(event, ev.Paused):
            if self.paused:
                return "paused twice without an approval"
            self.paused, self.pauses = True, self.pauses + 1
            return None
        if isinstance(event, ev.Approved):
            if not self.paused:
                return "approved a run that was not paused (a second approval?)"
            self.paused, self.approvals = False, self.approvals + 1
            return None
        if isinstance(event, ev.Resumed):
            if not self.paused:
                return "resumed a run that was not paused"
            self.paused = False  # its child went on: no person approved the parent
            return None
        if isinstance(event, (ev.OutputEdited, ev.Rejected)):
            return review_transition(self, event)
        return self._task_transition(event)

    def _after_give_up(self, event: ev.Event) -> str | None:
        """Once a task failed for good, nothing starts or is retried, and the run fails only
        after every attempt that had started by then has ended."""
        if self.shadow.status is not RunStatus.RUNNING or self.shadow.current is None:
            return None
        lost = given_up(self.pipeline, self.shadow)
        if lost is None:
            return None
        if isinstance(event, (ev.TaskDispatched, ev.RetryScheduled)):
            return f"{event.task_id}: {event.kind} after {lost.task_id} failed for good"
        if isinstance(event, ev.RunFailed):
            running = [t.task_id for t in still_running(self.pipeline, self.shadow, lost)]
            if running:
                return f"failed while {running}, started before {lost.task_id} failed, ran"
        return None

    def _task_transition(self, event: ev.Event) -> str | None:
        if isinstance(event, ev.TaskDispatched):
            task = self.tasks.get(event.task_id)
            limit = self.pipeline.worker(event.role).max_attempts
            if event.attempt > limit and not self.edited:
                return f"{event.task_id} attempt {event.attempt} exceeds max_attempts {limit}"
            if task is None:
                if event.attempt != 1:
                    return f"{event.task_id} first dispatched as attempt {event.attempt}"
                self.tasks[event.task_id] = _Task(1, event.phase, event.visit, "dispatched")
                return None
            if task.status == "completed" and self.edited and event.attempt == task.attempt + 1:
                task.attempt, task.status, task.completions = event.attempt, "dispatched", 0
                return None  # a task that read an edited output runs again
            if task.status != "retry_wait" or task.attempt != event.attempt:
                return f"{event.task_id} attempt {event.attempt} dispatched from {task.status}"
            task.status = "dispatched"
            return None
        if isinstance(event, ev.TaskReused):
            return self._reuse(event)
        if not isinstance(
            event,
            (ev.TaskStarted, ev.TaskCompleted, ev.TaskFailed, ev.TaskTimedOut, ev.RetryScheduled),
        ):
            return None
        task = self.tasks.get(event.task_id)
        if task is None:
            return f"{event.task_id}: a result for a task never dispatched"
        if isinstance(event, ev.RetryScheduled):
            if task.status != "failed" or event.attempt <= task.attempt:
                return f"{event.task_id}: retry {event.attempt} scheduled from {task.status}"
            task.attempt, task.status = event.attempt, "retry_wait"
            return None
        if event.attempt != task.attempt:
            return f"{event.task_id}: result of attempt {event.attempt}, current {task.attempt}"
        if isinstance(event, ev.TaskStarted):
            # Started again: only by another process (the one running it stopped).
            restart = task.status == "started" and event.worker != task.worker
            if task.status != "dispatched" and not restart:
                return f"{event.task_id}: started from {task.status}"
            task.status, task.worker = "started", event.worker
            return None
        if task.status not in ("dispatched", "started"):
            return f"{event.task_id}: {event.kind} while {task.status}"
        if isinstance(event, ev.TaskTimedOut):
            early = self._early_timeout(event)
            if early is not None:
                return early
        if isinstance(event, ev.TaskCompleted):
            if task.status != "started" and not event.adopted:  # adopted: found on disk
                return f"{event.task_id}: completed but never recorded as started"
            task.completions += 1
            task.status = "completed"
            return None if task.completions == 1 else f"{event.task_id} completed twice"
        task.status = "failed"
        return None

    def _early_timeout(self, event: ev.TaskTimedOut) -> str | None:
        """The engine times an attempt out only past the deadline that applies to it:
        `timeout + grace` from its recorded start, or `start_timeout` from its dispatch while
        it has not started (an attempt waiting for a slot has not used any of its timeout)."""
        task = self.shadow.tasks[event.task_id]
        worker = self.pipeline.worker(task.role)
        if event.detail.startswith("not started within"):
            if task.started_at is not None:
                return f"{event.task_id}: timed out as not started after its start"
            due = task.dispatched_at + worker.start_deadline
        elif event.detail.startswith("no result within timeout + grace"):
            if task.started_at is None:
                return f"{event.task_id}: timed out for its result before it started"
            due = task.started_at + worker.timeout + worker.grace
        else:
            return None  # the worker's own report of its timeout
        if event.at < due:
            return f"{event.task_id}: timed out at {event.at:.3f}, before its deadline {due:.3f}"
        return None

    def _reuse(self, event: ev.TaskReused) -> str | None:
        """A reuse takes the place of the first attempt, before anything started it."""
        task = self.tasks.get(event.task_id)
        if task is None:
            return f"{event.task_id}: reused but never dispatched"
        if event.attempt != 1 or task.attempt != 1 or task.status != "dispatched":
            return f"{event.task_id}: reused as attempt {event.attempt} while {task.status}"
        task.completions += 1
        task.status = "completed"
        return None


def end_problems(state: RunState, pipeline: Pipeline, run_dir: Path | None) -> list[str]:
    """How a run may end: delivered (with its result on disk), failed, cancelled or paused."""
    problems = []
    if state.status is RunStatus.RUNNING:
        problems.append("the run is stuck: running with nothing in flight or scheduled")
    for task in state.tasks.values():
        unfinished = task.status.in_flight or task.status is TaskStatus.RETRY_WAIT
        if state.status.ended and unfinished:
            problems.append(f"{task.task_id} left {task.status.value} in an ended run")
        if state.status is RunStatus.DELIVERED and task.status is not TaskStatus.COMPLETED:
            problems.append(f"{task.task_id} is {task.status.value} in a delivered run")
        if task.status.in_flight and state.status is RunStatus.PAUSED:
            problems.append(f"{task.task_id} still in flight in a paused run at the end")
    if state.status is RunStatus.DELIVERED:
        if not state.archived:
            problems.append("delivered but never archived")
        if run_dir is not None and state.delivered is not None:
            final, result = run_dir / "final.md", run_dir / state.delivered
            if not final.is_file() or not result.is_file():
                problems.append(f"final.md or {state.delivered} missing from {run_dir}")
            elif final.read_bytes() != result.read_bytes():
                problems.append("final.md differs from the delivered output")
    if run_dir is not None:  # every recorded output is on disk as recorded
        for task in state.tasks.values():
            if task.artifact is None or task.sha256 is None:
                continue
            path = run_dir / task.artifact
            if not path.is_file():
                problems.append(f"{task.artifact} of {task.task_id} missing from {run_dir}")
            elif hashlib.sha256(path.read_bytes()).hexdigest() != task.sha256:
                problems.append(f"{task.artifact} of {task.task_id} is not what was recorded")
    _ = pipeline
    return problems
