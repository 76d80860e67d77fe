"""Dispatchers: how a recorded task attempt gets run.

The orchestrator only ever calls `Dispatcher.start` for an attempt it has already recorded as
dispatched, and learns the outcome from a `Report` handed back through
`Orchestrator.report`. `LocalDispatcher` runs tasks in this process; a queue-backed
dispatcher hands them to worker processes on other machines through the same two calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from interlock.core import events as ev
from interlock.core.decide import given_up
from interlock.core.extract import ExtractionError, extract_values
from interlock.core.state import TaskState
from interlock.providers.batch_waits import BatchWait, batch_parking, batch_waits
from interlock.providers.spend_guard import CapWait, cap_waits
from interlock.runtime import artifacts, records
from interlock.runtime.diskfull import is_enospc
from interlock.runtime.driver import Report, RunDriver, renders_templates
from interlock.runtime.execution import LocalExecutor, going_on
from interlock.runtime.executors import Outcome, TaskSpec
from interlock.runtime.fair import FairGate, Place
from interlock.runtime.faults import crash_point
from interlock.runtime.task_slots import store_key

if TYPE_CHECKING:
    from interlock.runtime.orchestrator import Orchestrator

log = logging.getLogger("interlock.runtime")


class Dispatcher(Protocol):
    """Runs recorded attempts and reports how they ended."""

    def start(
        self, orchestrator: Orchestrator, driver: RunDriver, task: TaskState
    ) -> asyncio.Task[None]:
        """Begin the attempt; cancelling the returned task must stop it."""
        ...

    def withdraw_unstarted(self, driver: RunDriver) -> None:
        """The run starts nothing more (it fails once its running attempts end): withdraw
        the attempts it handed out that no worker has begun."""
        ...


class LocalDispatcher:
    """Runs tasks as asyncio tasks of this process, at most `limit` at once; when more wait,
    round-robin between task concurrency keys (`interlock.runtime.fair`)."""

    def __init__(self, limit: int) -> None:
        self._slots = FairGate(limit)

    def start(
        self, orchestrator: Orchestrator, driver: RunDriver, task: TaskState
    ) -> asyncio.Task[None]:
        """See `Dispatcher.start`."""
        coroutine = self._run(orchestrator, driver, task.task_id, task.attempt)
        return asyncio.get_running_loop().create_task(coroutine, name=task.task_id)

    def withdraw_unstarted(self, driver: RunDriver) -> None:
        """See `Dispatcher.withdraw_unstarted`: nothing to do, an attempt here looks whether
        its run still starts anything when its slot comes, before it begins."""

    async def _run(
        self, orchestrator: Orchestrator, driver: RunDriver, task_id: str, attempt: int
    ) -> None:
        tmp = driver.run_dir.joinpath(".tmp", f"{task_id}.{attempt}.part")
        clock = orchestrator.clock
        state, held = driver.state, driver.state.task_slots.get(task_id)
        lane = (
            "" if held is None else store_key(state.pipeline, state.tasks[task_id].role, held.key)
        )
        try:
            async with self._slots.turn(lane) as place:
                if given_up(driver.definition.pipeline, driver.state) is not None:
                    return  # the run fails once its running attempts end: not started now
                task = driver.state.tasks[task_id]
                started = ev.TaskStarted(
                    at=clock(), task_id=task_id, attempt=attempt, worker=orchestrator.owner
                )
                orchestrator.report(driver, Report(event=started))
                crash_point("after_dispatch")
                # Templates render in a thread (within their limits: `render_limits`), from
                # a copy of what they read, while the loop serves every other run.
                render = driver.prepare_spec(task, tmp)
                if renders_templates(driver.definition.pipeline.worker(task.role)):
                    spec = await asyncio.to_thread(render)
                else:
                    spec = render()
                if isinstance(spec, Outcome):
                    outcome = spec
                else:
                    if spec.worker.kind == "command":  # a call makes its folder if it needs it
                        prepare_output(tmp)
                    outcome = await execute(orchestrator, driver.run_id, spec, place)
                if outcome.stopped:  # cancelled mid-answer: what the call cost is recorded
                    failed = ev.TaskFailed(
                        at=clock(),
                        task_id=task_id,
                        attempt=attempt,
                        error=outcome.error,
                        usage=outcome.usage,
                    )
                    orchestrator.report(driver, Report(event=failed))
                    going_on(outcome)
                if outcome.ok and outcome.body is None and not outcome.durable and large(tmp):
                    await asyncio.to_thread(artifacts.fsync_file, tmp)
                report = await off_loop_report(driver, task, attempt, outcome, tmp, clock())
                # Most attempts leave no record: two `stat`s on the loop say so, and only an
                # attempt that left some hands its masking to a thread.
                kept = None
                if records.any_left(driver.run_dir):
                    kept = await asyncio.to_thread(
                        records.seal,
                        driver.run_dir,
                        task_id,
                        attempt,
                        orchestrator.models.secrets(driver.workflow_dir),
                    )
                orchestrator.report(driver, with_records(report, kept))
        except asyncio.CancelledError:
            artifacts.discard(tmp)
            raise
        except Exception as exc:  # a bug in a worker adapter must not stop the loop
            if isinstance(exc, OSError) and is_enospc(exc):
                # Not a bug: the ledger's own writes meet the same full disk and stop the
                # run resumably, saying so.
                error = f"disk full: {exc.strerror} (ENOSPC)"
                log.error("task %s: %s", task_id, error, extra={"run_id": driver.run_id})
            else:
                error = f"internal error: {type(exc).__name__}: {exc}"
                log.exception("task %s crashed", task_id, extra={"run_id": driver.run_id})
            failed = ev.TaskFailed(at=clock(), task_id=task_id, attempt=attempt, error=error)
            orchestrator.report(driver, Report(event=failed))
        finally:
            if driver.handles.get(task_id) is asyncio.current_task():
                del driver.handles[task_id]


def with_records(report: Report, kept: dict[str, str] | None) -> Report:
    """The report with the hashes of the attempt's records in the event that ends it."""
    event = report.event
    if kept and isinstance(event, (ev.TaskCompleted, ev.TaskFailed, ev.TaskTimedOut)):
        return dataclasses.replace(report, event=dataclasses.replace(event, records=kept))
    return report


def prepare_output(tmp: Path) -> None:
    """Make the temporary output's folder and remove a leftover of an interrupted try."""
    try:
        tmp.unlink()
    except FileNotFoundError:
        tmp.parent.mkdir(parents=True, exist_ok=True)


def large(path: Path) -> bool:
    """A file too big to be stored in the ledger: it must be made durable itself."""
    try:
        return path.stat().st_size > artifacts.INLINE_LIMIT
    except FileNotFoundError:
        return False


async def execute(
    orchestrator: Orchestrator, run_id: str, spec: TaskSpec, place: Place | None = None
) -> Outcome:
    """Run one attempt with the executor its worker kind calls for; `place`, the attempt's
    place among the process's running tasks, is lent out while its call waits in a
    provider batch (`batch_parking`)."""
    executor = LocalExecutor(orchestrator.models)
    if spec.worker.kind in ("command", "call"):
        return await executor.run(spec)

    def progress(text: str) -> None:
        orchestrator.progress(run_id, spec.task_id, text)

    def shown(waits: Callable[[RunDriver], dict[str, dict[str, Any]]]) -> Callable[..., None]:
        def tell(wait: CapWait | BatchWait | None) -> None:
            # A wait is no event (it ends by itself, and is polled): it shows in status.json,
            # which every reader of a live run (`runs`, `status`, the API) looks at.
            driver = orchestrator.drivers.get(run_id)
            if driver is None:
                return
            if wait is None:
                waits(driver).pop(spec.task_id, None)
            else:
                waits(driver)[spec.task_id] = wait.to_json()
            if orchestrator.settings.write_status and driver.run_dir.is_dir():
                driver.write_status()

        return tell

    @contextlib.asynccontextmanager
    async def parked() -> AsyncIterator[None]:
        # Recorded, so that the timeout stops for the wait whoever drives the run next; the
        # place goes to other tasks meanwhile, which may gather into the same batch.
        tell_batch(orchestrator, run_id, spec, waiting=True)
        if place is None:
            yield
        else:
            async with place.lent():
                yield
        tell_batch(orchestrator, run_id, spec, waiting=False)  # its own work goes on

    # This task's context only: each call tells of its own.
    told = cap_waits.set(shown(lambda d: d.spend_waits))
    batched = batch_waits.set(shown(lambda d: d.batch_waits))
    parking = batch_parking.set(parked)
    try:
        return await executor.run(spec, progress if orchestrator.progress_listeners else None)
    finally:
        batch_parking.reset(parking)
        batch_waits.reset(batched)
        cap_waits.reset(told)


def tell_batch(orchestrator: Orchestrator, run_id: str, spec: TaskSpec, *, waiting: bool) -> None:
    """Report that the attempt's model call went into a provider batch, or came back."""
    driver = orchestrator.drivers.get(run_id)
    if driver is None:
        return
    event = ev.TaskBatchWaited(
        at=orchestrator.clock(), task_id=spec.task_id, attempt=spec.attempt, waiting=waiting
    )
    orchestrator.report(driver, Report(event=event))


async def off_loop_report(
    driver: RunDriver, task: TaskState, attempt: int, outcome: Outcome, tmp: Path, now: float
) -> Report:
    """`outcome_report`, in a thread when the worker's `extract` rules read the output: an
    output of any size is read, parsed and matched away from the event loop, which keeps
    serving every other run (and the API) meanwhile."""
    if outcome.ok and driver.definition.pipeline.worker(task.role).extract:
        return await asyncio.to_thread(outcome_report, driver, task, attempt, outcome, tmp, now)
    return outcome_report(driver, task, attempt, outcome, tmp, now)


def outcome_report(
    driver: RunDriver, task: TaskState, attempt: int, outcome: Outcome, tmp: Path, now: float
) -> Report:
    """Turn an executor's outcome into the report the next tick records.

    A successful output is checked by its worker's `extract` rules before it may be committed:
    an output whose values cannot be extracted fails the attempt and is never adopted.
    """
    if outcome.ok:
        worker = driver.definition.pipeline.worker(task.role)
        body = outcome.body
        try:
            if body is None and not tmp.exists():
                raise FileNotFoundError(f"no output at {tmp.name}")
            values: dict[str, Any] = {}
            if worker.extract:
                text = body.decode("utf-8") if body is not None else tmp.read_text("utf-8")
                values = extract_values(worker.extract, text)
        except (ExtractionError, UnicodeDecodeError, FileNotFoundError) as exc:
            artifacts.discard(tmp)
            failed = ev.TaskFailed(
                at=now,
                task_id=task.task_id,
                attempt=attempt,
                error=f"output rejected: {exc}",
                usage=outcome.usage,
            )
            return Report(event=failed)
        done = ev.TaskCompleted(
            at=now,
            task_id=task.task_id,
            attempt=attempt,
            artifact="",
            sha256="",
            size=0,
            values=values,
            usage=outcome.usage,
        )
        return Report(event=done, tmp=None if body is not None else tmp, body=body)
    artifacts.discard(tmp)
    if outcome.timed_out:
        timed_out = ev.TaskTimedOut(
            at=now, task_id=task.task_id, attempt=attempt, detail=outcome.error
        )
        return Report(event=timed_out)
    failed = ev.TaskFailed(
        at=now,
        task_id=task.task_id,
        attempt=attempt,
        error=outcome.error[-4000:],
        retryable=outcome.retryable,
        usage=outcome.usage,
        retry_after=outcome.retry_after,
        approval=outcome.extra.get("approval"),
    )
    return Report(event=failed)
