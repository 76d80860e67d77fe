"""The request a dispatcher is handed for one recorded attempt (`dispatch.Attempt`), made
from the orchestrator and the run's driver: the one place that decides what of them a
dispatcher may read and call, so that neither is handed over whole."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.core.decide import given_up
from interlock.core.state import TaskState
from interlock.runtime.dispatch import Attempt, Wait
from interlock.runtime.executors import Outcome, TaskSpec
from interlock.runtime.reports import Report
from interlock.runtime.task_slots import store_key
from interlock.runtime.task_specs import prepare_spec

if TYPE_CHECKING:
    from interlock.runtime.driver import RunDriver
    from interlock.runtime.orchestrator import Orchestrator


def attempt_of(orchestrator: Orchestrator, driver: RunDriver, task: TaskState) -> Attempt:
    """The request for the recorded attempt of `task`, which `driver` drives."""
    run_id, task_id, number = driver.run_id, task.task_id, task.attempt
    pipeline = driver.definition.pipeline
    held = driver.state.task_slots.get(task_id)
    lane = "" if held is None else store_key(driver.state.pipeline, task.role, held.key)

    def prepare(tmp: Path) -> Callable[[], TaskSpec | Outcome]:
        state = driver.state
        return prepare_spec(
            pipeline,
            state,
            state.tasks[task_id],
            tmp,
            run_dir=driver.run_dir,
            workflow_dir=driver.workflow_dir,
        )

    def tell(report: Report) -> None:
        now = orchestrator.drivers.get(run_id)  # a run taken again has a driver anew
        if now is not None:
            orchestrator.report(now, report)

    def show_wait(kind: str, wait: Wait | None) -> None:
        now = orchestrator.drivers.get(run_id)
        if now is None:
            return
        waits = now.spend_waits if kind == "spend" else now.batch_waits
        if wait is None:
            waits.pop(task_id, None)
        else:
            waits[task_id] = wait.to_json()
        if orchestrator.settings.write_status and now.run_dir.is_dir():
            now.write_status()

    def progress(text: str) -> None:
        orchestrator.progress(run_id, task_id, text)

    def current() -> TaskState | None:
        state = driver.state
        found = state.tasks.get(task_id)
        if state.status.ended or found is None or found.attempt != number:
            return None
        return found if found.status.in_flight else None

    def outputs() -> list[tuple[str, str]]:
        tasks = driver.state.tasks.values()
        return [(t.artifact, t.sha256) for t in tasks if t.artifact and t.sha256]

    def begun() -> bool:
        found = driver.state.tasks.get(task_id)
        return found is None or found.started_at is not None

    def ended(handle: object) -> None:
        if driver.workers.handles.get(task_id) is handle:
            del driver.workers.handles[task_id]

    return Attempt(
        run_id=run_id,
        task_id=task_id,
        attempt=number,
        worker=pipeline.worker(task.role),
        pipeline=driver.definition.name,
        lane=lane,
        run_dir=driver.run_dir,
        workflow_dir=driver.workflow_dir,
        runner=orchestrator.owner,
        begun=begun,
        prepare=prepare,
        report=lambda report: orchestrator.report(driver, report),
        tell=tell,
        show_wait=show_wait,
        progress=progress if orchestrator.progress_listeners else None,
        clock=orchestrator.clock,
        starts=lambda: given_up(pipeline, driver.state) is None,
        current=current,
        outputs=outputs,
        take=driver.lease.token,
        ended=ended,
    )
