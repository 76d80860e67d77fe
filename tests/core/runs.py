"""Engine-speed runs for behaviour tests: each step is one `RunMachine.step`.

A `Run` holds a folded state and its history and feeds the machine one observation at a
time (start, complete, fail, approve, advance time), so a test reads like a story and proves
what the orchestrator does, since the orchestrator takes the same step. Workflow helpers
(`fixture`, `pipeline_of`, `worker`) build the pipelines they run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import Evaluator, RuleName, next_wake
from interlock.core.expressions import evaluate
from interlock.core.loader import Definition, build_workflow, load_workflow
from interlock.core.observe import CommandKind
from interlock.core.state import RunState, apply, artifact_name
from interlock.core.workflow import Pipeline
from interlock.engine import Recorded, RunMachine, Step
from interlock.engine import effects as fx
from interlock.engine import inputs as obs

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
class Run:
    """One run driven by `RunMachine`: every event goes to `history`, folded into `state`."""

    pipeline: Pipeline
    run_id: str = "run-1"
    now: float = 0.0
    evaluator: Evaluator = evaluate
    # role -> the worst case of one call, as the runtime builds it (`budget_reserve`).
    reserve: dict[str, float] | None = None
    state: RunState = field(default_factory=RunState)
    history: list[ev.Event] = field(default_factory=list)
    decisions: list[Recorded] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    # The workers the story runs, as the runtime's handles: started when a step says so,
    # gone when their attempt's result is reported or the step cancels them.
    running: dict[str, int] = field(default_factory=dict)
    acted: int = 0  # the number of events the state held when the last step's effects ran

    @property
    def machine(self) -> RunMachine:
        """The step function of this run's pipeline."""
        return RunMachine(self.pipeline, evaluator=self.evaluator, reserve=self.reserve)

    def step(self, *inputs: obs.Input) -> Step:
        """One step of the machine at `now`; its events join the history."""
        for item in inputs:
            result = item.event if isinstance(item, obs.Reported) else None
            ended = result is not None and not isinstance(result, ev.TaskStarted)
            if ended and result and self.running.get(result.task_id) == result.attempt:
                del self.running[result.task_id]
        handles = obs.Handles(running=self.running, since=self.acted)
        made = self.machine.step(self.state, inputs, self.now, handles=handles)
        for effect in made.effects:
            if isinstance(effect, fx.StartAttempt):
                self.running[effect.task_id] = effect.attempt
            elif isinstance(effect, fx.CancelAttempt):
                del self.running[effect.task_id]
            elif isinstance(effect, fx.StopWorkers):
                for task_id in effect.task_ids:
                    del self.running[task_id]
        self.acted = self.state.events
        self.history += [r.event for r in made.events]
        self.decisions += [r for r in made.events if r.rule is not None]
        self.steps.append(made)
        return made

    def _decided(self, *inputs: obs.Input) -> list[Recorded]:
        return [r for r in self.step(*inputs).events if r.rule is not None]

    def start(self, topic: str = "a topic", inputs: dict[str, Any] | None = None) -> list[Recorded]:
        """Record RunCreated and step: the first phase is dispatched."""
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
        """Append an event to the history and fold it into the state (a story's setting)."""
        self.history.append(event)
        apply(self.state, event)

    def settle(self) -> list[Recorded]:
        """A step with nothing observed; the decisions it made."""
        return self._decided(obs.Tick())

    def observe(self, result: obs.TaskResult) -> list[Recorded] | None:
        """Step on a worker's report; the decisions that followed (None: it was dropped)."""
        made = self.step(obs.Reported(event=result))
        if all(r.event is not result for r in made.events):
            return None
        return [r for r in made.events if r.rule is not None]

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
    ) -> list[Recorded]:
        """Report the task's current attempt as completed with these extracted values."""
        made = self.observe(self.completion(task_id, values, usage or None))
        assert made is not None, f"completion of {task_id} was dropped"
        return made

    def fail(self, task_id: str, error: str = "boom", retryable: bool = True) -> list[Recorded]:
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

    def approve(self) -> list[Recorded]:
        """A person approves the paused run."""
        return self._decided(obs.PersonCommand(kind=CommandKind.APPROVE, by="tester"))

    def begin(self, *task_ids: str) -> list[Recorded]:
        """Report the current attempt of each task as started by a worker now."""
        made: list[Recorded] = []
        for task_id in task_ids:
            started = ev.TaskStarted(
                at=self.now, task_id=task_id, attempt=self.attempt(task_id), worker="pid 1"
            )
            result = self.observe(started)
            assert result is not None, f"start of {task_id} was dropped"
            made += result
        return made

    def advance(self, seconds: float) -> list[Recorded]:
        """Let time pass and step (timeouts and due retries fire)."""
        self.now += seconds
        return self.settle()

    def advance_to_wake(self) -> list[Recorded]:
        """Jump to the next time the table would act by itself, and step."""
        wake = next_wake(self.pipeline, self.state)
        assert wake is not None, "nothing is scheduled"
        self.now = max(self.now, wake)
        return self.settle()

    def in_flight(self) -> list[str]:
        """Ids of the tasks dispatched and not finished, in dispatch order."""
        return [t.task_id for t in self.state.in_flight()]

    def rules(self) -> list[RuleName]:
        """The rule of every decision so far, in order."""
        return [RuleName(d.rule) for d in self.decisions if d.rule is not None]

    def events_of(self, kind: type[ev.Event]) -> list[Any]:
        """The recorded events of one type, in order."""
        return [e for e in self.history if isinstance(e, kind)]
