"""Dispatchers: how a recorded task attempt gets run.

The orchestrator only ever submits an attempt it has already recorded as dispatched, as an
`Attempt`: a frozen request holding what the attempt is and the callables through which the
dispatcher reads what it needs of the run and reports back (never the orchestrator or the
run's driver themselves). `LocalDispatcher` runs attempts in this process through an
`Executor`; a queue-backed dispatcher hands them to worker processes on other machines
through the same two calls, `submit` and `withdraw`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from interlock.core import events as ev
from interlock.core.extract import ExtractionError, extract_values
from interlock.core.state import TaskState
from interlock.core.workflow import Worker
from interlock.providers.batch_waits import BatchWait, batch_parking, batch_waits
from interlock.providers.spend_guard import CapWait, cap_waits
from interlock.runtime import artifacts, records
from interlock.runtime.diskfull import is_enospc
from interlock.runtime.execution import Executor, going_on
from interlock.runtime.executors import Outcome, TaskSpec
from interlock.runtime.fair import FairGate, Place
from interlock.runtime.faults import crash_point
from interlock.runtime.reports import Report
from interlock.runtime.task_specs import renders_templates

log = logging.getLogger("interlock.runtime")

Wait = CapWait | BatchWait


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One recorded attempt, as a dispatcher is given it."""

    run_id: str
    task_id: str
    attempt: int
    worker: Worker  # its kind, tags, `extract` rules and templates
    pipeline: str  # the run's pipeline (its definition's name)
    lane: str  # the concurrency lane it waits for a place in ("": no concurrency key)
    run_dir: Path
    workflow_dir: Path | None  # the workflow file's folder, whose configuration masks records
    runner: str  # who runs it here, named by its start (the orchestrator's owner)
    begun: Callable[[], bool]  # whether its run has its start recorded (or lost the task)
    # Reads what the attempt's spec needs of its run now, and gives back what renders it
    # from that copy, in a thread if need be (`task_specs.prepare_spec`): its output at the
    # path given.
    prepare: Callable[[Path], Callable[[], TaskSpec | Outcome]]
    report: Callable[[Report], None]  # hands a report to the run's next tick
    tell: Callable[[Report], None]  # the same, to whoever drives the run now (or no one)
    show_wait: Callable[[str, Wait | None], None]  # a "spend" or "batch" wait, or its end
    progress: Callable[[str], None] | None  # told what a model streams (None: no one asks)
    clock: Callable[[], float]
    starts: Callable[[], bool]  # whether the run still starts attempts
    current: Callable[[], TaskState | None]  # its task, while the run wants this attempt
    outputs: Callable[[], list[tuple[str, str]]]  # (file, SHA-256) of the committed outputs
    take: int  # the same for every attempt of one take of the run (its lease's token)
    # Told as the attempt ends, with the handle `submit` gave back for it: the run forgets
    # that handle (and not a later attempt's of the same task).
    ended: Callable[[object], None]

    @property
    def tmp(self) -> Path:
        """Where its output is written before it is committed."""
        return self.run_dir.joinpath(".tmp", f"{self.task_id}.{self.attempt}.part")


class Dispatcher(Protocol):
    """Runs recorded attempts and reports how they ended."""

    def submit(self, attempt: Attempt) -> asyncio.Task[None]:
        """Begin the attempt; cancelling the returned task must stop it."""
        ...

    def withdraw(self, run_id: str) -> None:
        """The run starts nothing more (it fails once its running attempts end): withdraw
        the attempts it handed out that no worker has begun."""
        ...


class LocalDispatcher:
    """Runs tasks as asyncio tasks of this process through `executor`, at most `limit` at
    once; when more wait, round-robin between task concurrency keys
    (`interlock.runtime.fair`)."""

    def __init__(self, limit: int, executor: Executor) -> None:
        self._slots = FairGate(limit)
        self.executor = executor

    def submit(self, attempt: Attempt) -> asyncio.Task[None]:
        """See `Dispatcher.submit`."""
        coroutine = self._run(attempt)
        return asyncio.get_running_loop().create_task(coroutine, name=attempt.task_id)

    def withdraw(self, run_id: str) -> None:
        """See `Dispatcher.withdraw`: nothing to do, an attempt here looks whether its run
        still starts anything when its slot comes, before it begins."""

    async def _run(self, attempt: Attempt) -> None:
        task_id, number, tmp, clock = attempt.task_id, attempt.attempt, attempt.tmp, attempt.clock
        try:
            async with self._slots.turn(attempt.lane) as place:
                if not attempt.starts():
                    return  # the run fails once its running attempts end: not started now
                started = ev.TaskStarted(
                    at=clock(), task_id=task_id, attempt=number, worker=attempt.runner
                )
                attempt.report(Report(event=started))
                crash_point("after_dispatch")
                # Templates render in a thread (within their limits: `render_limits`), from
                # a copy of what they read, while the loop serves every other run.
                render = attempt.prepare(tmp)
                if renders_templates(attempt.worker):
                    spec = await asyncio.to_thread(render)
                else:
                    spec = render()
                if isinstance(spec, Outcome):
                    outcome = spec
                else:
                    if spec.worker.kind == "command":  # a call makes its folder if it needs it
                        prepare_output(tmp)
                    outcome = await execute(self.executor, attempt, spec, place)
                if outcome.stopped:  # cancelled mid-answer: what the call cost is recorded
                    failed = ev.TaskFailed(
                        at=clock(),
                        task_id=task_id,
                        attempt=number,
                        error=outcome.error,
                        usage=outcome.usage,
                    )
                    attempt.report(Report(event=failed))
                    going_on(outcome)
                if outcome.ok and outcome.body is None and not outcome.durable and large(tmp):
                    await asyncio.to_thread(artifacts.fsync_file, tmp)
                report = await off_loop_report(attempt, outcome, clock())
                # Most attempts leave no record: two `stat`s on the loop say so, and only an
                # attempt that left some hands its masking to a thread.
                kept = None
                if records.any_left(attempt.run_dir):
                    kept = await asyncio.to_thread(
                        records.seal,
                        attempt.run_dir,
                        task_id,
                        number,
                        self.executor.secrets(attempt.workflow_dir),
                    )
                attempt.report(with_records(report, kept))
        except asyncio.CancelledError:
            artifacts.discard(tmp)
            raise
        except Exception as exc:  # a bug in a worker adapter must not stop the loop
            if isinstance(exc, OSError) and is_enospc(exc):
                # Not a bug: the ledger's own writes meet the same full disk and stop the
                # run resumably, saying so.
                error = f"disk full: {exc.strerror} (ENOSPC)"
                log.error("task %s: %s", task_id, error, extra={"run_id": attempt.run_id})
            else:
                error = f"internal error: {type(exc).__name__}: {exc}"
                log.exception("task %s crashed", task_id, extra={"run_id": attempt.run_id})
            failed = ev.TaskFailed(at=clock(), task_id=task_id, attempt=number, error=error)
            attempt.report(Report(event=failed))
        finally:
            attempt.ended(asyncio.current_task())


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
    executor: Executor, attempt: Attempt, spec: TaskSpec, place: Place | None = None
) -> Outcome:
    """Run one attempt through `executor`; `place`, the attempt's place among the process's
    running tasks, is lent out while its call waits in a provider batch (`batch_parking`)."""
    if spec.worker.kind in ("command", "call"):
        return await executor.run(spec)

    def shown(kind: str) -> Callable[[Wait | None], None]:
        # A wait is no event (it ends by itself, and is polled): it shows in status.json,
        # which every reader of a live run (`runs`, `status`, the API) looks at.
        return lambda wait: attempt.show_wait(kind, wait)

    @contextlib.asynccontextmanager
    async def parked() -> AsyncIterator[None]:
        # Recorded, so that the timeout stops for the wait whoever drives the run next; the
        # place goes to other tasks meanwhile, which may gather into the same batch.
        tell_batch(attempt, waiting=True)
        if place is None:
            yield
        else:
            async with place.lent():
                yield
        tell_batch(attempt, waiting=False)  # its own work goes on

    # This task's context only: each call tells of its own.
    told = cap_waits.set(shown("spend"))
    batched = batch_waits.set(shown("batch"))
    parking = batch_parking.set(parked)
    try:
        return await executor.run(spec, attempt.progress)
    finally:
        batch_parking.reset(parking)
        batch_waits.reset(batched)
        cap_waits.reset(told)


def tell_batch(attempt: Attempt, *, waiting: bool) -> None:
    """Report that the attempt's model call went into a provider batch, or came back."""
    event = ev.TaskBatchWaited(
        at=attempt.clock(), task_id=attempt.task_id, attempt=attempt.attempt, waiting=waiting
    )
    attempt.tell(Report(event=event))


async def off_loop_report(attempt: Attempt, outcome: Outcome, now: float) -> Report:
    """`attempt_report`, in a thread when the worker's `extract` rules read the output: an
    output of any size is read, parsed and matched away from the event loop, which keeps
    serving every other run (and the API) meanwhile."""
    worker, task_id, number, tmp = attempt.worker, attempt.task_id, attempt.attempt, attempt.tmp
    if outcome.ok and worker.extract:
        return await asyncio.to_thread(attempt_report, worker, task_id, number, outcome, tmp, now)
    return attempt_report(worker, task_id, number, outcome, tmp, now)


def attempt_report(
    worker: Worker, task_id: str, attempt: int, outcome: Outcome, tmp: Path, now: float
) -> Report:
    """Turn an executor's outcome into the report the next tick records.

    A successful output is checked by its worker's `extract` rules before it may be committed:
    an output whose values cannot be extracted fails the attempt and is never adopted.
    """
    if outcome.ok:
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
                task_id=task_id,
                attempt=attempt,
                error=f"output rejected: {exc}",
                usage=outcome.usage,
            )
            return Report(event=failed)
        done = ev.TaskCompleted(
            at=now,
            task_id=task_id,
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
        timed_out = ev.TaskTimedOut(at=now, task_id=task_id, attempt=attempt, detail=outcome.error)
        return Report(event=timed_out)
    failed = ev.TaskFailed(
        at=now,
        task_id=task_id,
        attempt=attempt,
        error=outcome.error[-4000:],
        retryable=outcome.retryable,
        usage=outcome.usage,
        retry_after=outcome.retry_after,
        approval=outcome.extra.get("approval"),
    )
    return Report(event=failed)
