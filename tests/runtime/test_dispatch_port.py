"""The dispatcher port: `LocalDispatcher` runs an `Attempt` request (values and callables,
no orchestrator, no driver), reports through it, and records a call stopped mid-answer from
the executor's stopped outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.workflow import Worker
from interlock.runtime.dispatch import Attempt, LocalDispatcher
from interlock.runtime.execution import LocalExecutor
from interlock.runtime.executors import STOPPED, Outcome, TaskContext, TaskSpec, register
from interlock.runtime.models import ModelRunner
from interlock.runtime.reports import Report

BEGAN: list[asyncio.Event] = []  # set by a function once it waits to be cancelled


async def _paid_then_waits(ctx: TaskContext) -> str:
    ctx.record_usage(model="gpt", input_tokens=1000, output_tokens=500, cost_usd=0.25)
    BEGAN[-1].set()
    await asyncio.Event().wait()  # until cancelled
    return "never"


register("test_dispatch_port.paid_then_waits", _paid_then_waits)


def attempt_of(
    tmp_path: Path,
    worker: dict[str, Any],
    reports: list[Report],
    ended: list[str],
    *,
    starts: bool = True,
) -> Attempt:
    """A request for attempt 1 of task `w`, reporting into `reports`."""
    defined = Worker.model_validate({"role": "w", **worker})

    def prepare(tmp: Path) -> Callable[[], TaskSpec | Outcome]:
        spec = TaskSpec(
            run_id="r1",
            task_id="w",
            attempt=1,
            worker=defined,
            task="",
            topic="t",
            inputs={},
            item=None,
            reads=[],
            output=tmp,
            run_dir=tmp_path,
            model=None,
            idempotency_key="w",
        )
        return lambda: spec

    return Attempt(
        run_id="r1",
        task_id="w",
        attempt=1,
        worker=defined,
        pipeline="p",
        lane="",
        run_dir=tmp_path,
        workflow_dir=None,
        runner="here",
        begun=lambda: False,
        prepare=prepare,
        report=reports.append,
        tell=reports.append,
        show_wait=lambda kind, wait: None,
        progress=None,
        clock=lambda: 5.0,
        starts=lambda: starts,
        current=lambda: None,
        outputs=list,
        take=1,
        ended=lambda handle: ended.append("w"),
    )


def dispatcher() -> LocalDispatcher:
    return LocalDispatcher(2, LocalExecutor(ModelRunner()))


def test_a_submitted_attempt_reports_its_start_and_output_through_the_request(
    tmp_path: Path,
) -> None:
    """A command's attempt reports its start (named by the request's runner) and its
    completion, with the output at the request's temporary path, and says it ended."""
    reports: list[Report] = []
    ended: list[str] = []
    attempt = attempt_of(tmp_path, {"command": ["sh", "-c", "echo hi > {output}"]}, reports, ended)

    async def run() -> None:
        await dispatcher().submit(attempt)

    asyncio.run(run())
    started, done = (r.event for r in reports)
    assert isinstance(started, ev.TaskStarted) and started.worker == "here"
    assert isinstance(done, ev.TaskCompleted) and done.at == 5.0
    assert reports[1].tmp == attempt.tmp and attempt.tmp.read_text() == "hi\n"
    assert ended == ["w"]


def test_a_run_that_starts_nothing_more_gets_no_start(tmp_path: Path) -> None:
    """An attempt whose run starts nothing when its place comes reports nothing."""
    reports: list[Report] = []
    ended: list[str] = []
    worker = {"command": ["sh", "-c", "echo hi > {output}"]}
    attempt = attempt_of(tmp_path, worker, reports, ended, starts=False)

    async def run() -> None:
        await dispatcher().submit(attempt)

    asyncio.run(run())
    assert reports == [] and ended == ["w"]


def test_a_cancelled_attempt_that_paid_records_its_cost_and_stays_cancelled(
    tmp_path: Path,
) -> None:
    """Cancelled after its model calls cost something, the attempt reports a failure with
    that usage (from the executor's stopped outcome) and its task ends cancelled."""
    reports: list[Report] = []
    ended: list[str] = []
    worker = {"call": "test_dispatch_port.paid_then_waits"}
    attempt = attempt_of(tmp_path, worker, reports, ended)

    async def run() -> asyncio.Task[None]:
        BEGAN.append(asyncio.Event())
        handle = dispatcher().submit(attempt)
        await BEGAN[-1].wait()
        handle.cancel()
        await asyncio.wait([handle])
        return handle

    handle = asyncio.run(run())
    assert handle.cancelled()
    started, failed = (r.event for r in reports)
    assert isinstance(started, ev.TaskStarted)
    assert isinstance(failed, ev.TaskFailed) and failed.error == STOPPED
    assert failed.usage is not None and failed.usage["cost_usd"] == pytest.approx(0.25)
    assert ended == ["w"]
