"""The invariants every simulated step must keep, checked against the stored history.

`HistoryChecker` reads the history as it grows and refuses any transition the engine must
never record; `end_problems` checks how a run finished. Both judge from the events and the
workflow definition alone, with the rules restated in `sim.oracle`, and import nothing of the
engine's fold or decisions (`tests/reliability/test_oracle.py` pins that): the engine's own
state is compared with them, never used by them (`sim.shadow`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from interlock.core import events as ev
from interlock.core.workflow import Pipeline
from interlock.sim.oracle import Oracle
from interlock.sim.outcomes import Executions, Starts
from interlock.sim.outcomes import end_problems as outcome_problems
from interlock.sim.policy import PolicyChecker
from interlock.sim.waits_check import WaitChecker


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
    """Folds stored events one by one into models of its own, and lists violations."""

    pipeline: Pipeline
    tasks: dict[str, _Task] = field(default_factory=dict)
    ended: str | None = None
    paused: bool = False
    pauses: int = 0
    approvals: int = 0
    edited: bool = False  # an edit was recorded since the last rejection
    seen: int = 0
    problems: list[str] = field(default_factory=list)
    policy: PolicyChecker = field(init=False)
    waits: WaitChecker = field(default_factory=WaitChecker)
    oracle: Oracle = field(init=False)

    def __post_init__(self) -> None:
        self.policy = PolicyChecker(self.pipeline)
        self.oracle = Oracle(self.pipeline)

    def feed(self, seq: int, event: ev.Event) -> None:
        """Check one more stored event (they must come in order, without gaps)."""
        if seq != self.seen + 1:
            self.problems.append(f"seq {seq} follows {self.seen}: a gap or a duplicate")
        self.seen = seq
        where = f"seq {seq} {event.kind}"
        problem = self._transition(event)
        rule_problem = self.oracle.feed(seq, event)  # always: each keeps its own model
        policy_problem = self.policy.problem(event)
        wait_problem = self.waits.problem(event)
        problem = problem or rule_problem or policy_problem or wait_problem
        if problem:
            self.problems.append(f"{where}: {problem}")

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
                # A failed item its fan-out tolerates is no open task (the oracle checks
                # that the tolerance held).
                open_tasks = [
                    t for t, s in self.tasks.items() if s.status not in ("completed", "item_failed")
                ]
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
            return self._review(event)
        return self._task_transition(event)

    def _task_transition(self, event: ev.Event) -> str | None:
        if isinstance(event, ev.TaskDispatched):
            task = self.tasks.get(event.task_id)
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
        if isinstance(event, ev.ItemFailed):
            task = self.tasks.get(event.task_id)
            if task is None or task.status != "failed":
                state = task.status if task else "never dispatched"
                return f"{event.task_id}: recorded as a failed item while {state}"
            task.status = "item_failed"
            return None
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
        task = self.oracle.tasks[event.task_id]
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

    def _review(self, event: ev.OutputEdited | ev.Rejected) -> str | None:
        """An edit or a rejection only at a pause; a rejection ends it; only a completed
        output is edited."""
        if not self.paused:
            return f"{event.kind} recorded while the run was not paused"
        if isinstance(event, ev.Rejected):
            self.paused = False
            self.edited = False
            return None
        task = self.tasks.get(event.task_id)
        if task is None or task.status != "completed":
            return f"{event.task_id}: edited while {task.status if task else 'never dispatched'}"
        self.edited = True
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


def end_problems(
    checker: HistoryChecker,
    run_id: str,
    run_dir: Path | None,
    executions: Executions | None = None,
    starts: Starts | None = None,
) -> list[str]:
    """How a run may end (delivered with its result on disk, failed, cancelled or paused),
    judged from its history, its files and what the simulated workers ran (`sim.outcomes`)."""
    return outcome_problems(
        checker.oracle, run_id, run_dir, executions or Executions(), starts or Starts()
    )
