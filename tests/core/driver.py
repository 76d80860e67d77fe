"""A small driver that plays a run the way the orchestrator does, without any I/O.

It records events in a history, applies them to a folded state, and settles the decision table
after each observation, so tests read like a story: start, complete, fail, approve, advance time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import Decision, Evaluator, RuleName, next_wake, settle
from interlock.core.expressions import evaluate
from interlock.core.loader import Definition, build_workflow, load_workflow
from interlock.core.observe import accept_result, implied_start
from interlock.core.state import RunState, apply, artifact_name
from interlock.core.workflow import Pipeline

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workflows"


def fixture(file: str, name: str) -> Definition:
    """A pipeline from a workflow file under tests/fixtures/workflows."""
    return load_workflow(FIXTURES / file).get(name)


def pipeline_of(data: dict[str, Any], name: str = "p") -> Pipeline:
    """Validate one pipeline given as plain data (raises WorkflowError when unsound)."""
    return build_workflow({name: data}).get(name).pipeline


def worker(role: str, **extra: Any) -> dict[str, Any]:
    """A model worker's data with sensible defaults."""
    return {"role": role, "model": "m", **extra}


@dataclass
class Driver:
    """Plays one run: every event goes to `history` and is folded into `state`."""

    pipeline: Pipeline
    run_id: str = "run-1"
    now: float = 0.0
    evaluator: Evaluator = evaluate
    state: RunState = field(default_factory=RunState)
    history: list[ev.Event] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    def start(self, topic: str = "a topic", inputs: dict[str, Any] | None = None) -> list[Decision]:
        """Record RunCreated and settle: the first phase is dispatched."""
        self.record(
            ev.RunCreated(
                at=self.now,
                run_id=self.run_id,
                pipeline="p",
                definition_hash="0" * 64,
                topic=topic,
                inputs=inputs or {},
            )
        )
        return self.settle()

    def record(self, event: ev.Event) -> None:
        """Append an event to the history and fold it into the state."""
        self.history.append(event)
        apply(self.state, event)

    def settle(self) -> list[Decision]:
        """Apply decisions until the table says wait; returns the new ones."""
        made = settle(self.pipeline, self.state, self.now, evaluator=self.evaluator)
        self.history += [d.event for d in made]
        self.decisions += made
        return made

    def observe(
        self, result: ev.TaskStarted | ev.TaskCompleted | ev.TaskFailed | ev.TaskTimedOut
    ) -> list[Decision] | None:
        """Record a worker's report if it is current, then settle (None: it was dropped)."""
        if not accept_result(self.state, result):
            return None
        start = implied_start(self.state, result)
        if start is not None:
            self.record(start)
        self.record(result)
        return self.settle()

    def attempt(self, task_id: str) -> int:
        """The current attempt of a task."""
        return self.state.tasks[task_id].attempt

    def completion(
        self,
        task_id: str,
        values: dict[str, Any] | None = None,
        usage: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> ev.TaskCompleted:
        """The report a worker sends when it committed its output."""
        task = self.state.tasks[task_id]
        output = self.pipeline.worker(task.role).output_name
        return ev.TaskCompleted(
            at=self.now,
            task_id=task_id,
            attempt=task.attempt if attempt is None else attempt,
            artifact=artifact_name(output, task.visit, task.item),
            sha256="0" * 64,
            size=1,
            values=values or {},
            usage=usage,
        )

    def complete(
        self, task_id: str, values: dict[str, Any] | None = None, **usage: Any
    ) -> list[Decision]:
        """Report the task's current attempt as completed with these extracted values."""
        made = self.observe(self.completion(task_id, values, usage or None))
        assert made is not None, f"completion of {task_id} was dropped"
        return made

    def fail(self, task_id: str, error: str = "boom", retryable: bool = True) -> list[Decision]:
        """Report the task's current attempt as failed."""
        made = self.observe(
            ev.TaskFailed(
                at=self.now,
                task_id=task_id,
                attempt=self.attempt(task_id),
                error=error,
                retryable=retryable,
            )
        )
        assert made is not None, f"failure of {task_id} was dropped"
        return made

    def approve(self) -> list[Decision]:
        """A person approves the paused run."""
        self.record(ev.Approved(at=self.now, by="tester"))
        return self.settle()

    def begin(self, *task_ids: str) -> list[Decision]:
        """Report the current attempt of each task as started by a worker now, and settle."""
        made: list[Decision] = []
        for task_id in task_ids:
            started = ev.TaskStarted(
                at=self.now, task_id=task_id, attempt=self.attempt(task_id), worker="pid 1"
            )
            result = self.observe(started)
            assert result is not None, f"start of {task_id} was dropped"
            made += result
        return made

    def advance(self, seconds: float) -> list[Decision]:
        """Let time pass and settle (timeouts and due retries fire)."""
        self.now += seconds
        return self.settle()

    def advance_to_wake(self) -> list[Decision]:
        """Jump to the next time the table would act by itself, and settle."""
        wake = next_wake(self.pipeline, self.state)
        assert wake is not None, "nothing is scheduled"
        self.now = max(self.now, wake)
        return self.settle()

    def in_flight(self) -> list[str]:
        """Ids of the tasks dispatched and not finished, in dispatch order."""
        return [t.task_id for t in self.state.in_flight()]

    def rules(self) -> list[RuleName]:
        """The rule of every decision so far, in order."""
        return [d.rule for d in self.decisions]

    def events_of(self, kind: type[ev.Event]) -> list[Any]:
        """The recorded events of one type, in order."""
        return [e for e in self.history if isinstance(e, kind)]
