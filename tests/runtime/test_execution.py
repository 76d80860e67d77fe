"""The executor port: a cancelled attempt whose model calls had cost something ends in a
`stopped` outcome carrying that cost; one that had cost nothing is cancelled as before."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from interlock.core.workflow import Worker
from interlock.runtime.execution import LocalExecutor, going_on
from interlock.runtime.executors import STOPPED, Outcome, TaskContext, TaskSpec, register
from interlock.runtime.models import ModelRunner


def spec_of(tmp_path: Path, worker: dict[str, Any]) -> TaskSpec:
    """A one-attempt spec of `worker` running in `tmp_path`."""
    return TaskSpec(
        run_id="r1",
        task_id="w",
        attempt=1,
        worker=Worker.model_validate({"role": "w", **worker}),
        task="",
        topic="t",
        inputs={},
        item=None,
        reads=[],
        output=tmp_path / "w.part",
        run_dir=tmp_path,
        model=None,
        idempotency_key="w",
    )


BEGAN: list[asyncio.Event] = []  # set by a function once it waits to be cancelled


async def _paid_then_waits(ctx: TaskContext) -> str:
    ctx.record_usage(model="gpt", input_tokens=1000, output_tokens=500, cost_usd=0.25)
    BEGAN[-1].set()
    await asyncio.Event().wait()  # until cancelled
    return "never"


async def _waits(ctx: TaskContext) -> str:
    BEGAN[-1].set()
    await asyncio.Event().wait()
    return "never"


register("test_execution.paid_then_waits", _paid_then_waits)
register("test_execution.waits", _waits)


async def _cancelled(spec: TaskSpec) -> asyncio.Task[Outcome]:
    """The executor's task for `spec`, cancelled once its function waits (a command: at
    once)."""
    BEGAN.append(asyncio.Event())
    executor = LocalExecutor(ModelRunner())
    running = asyncio.create_task(executor.run(spec))
    if spec.worker.kind == "call":
        await BEGAN[-1].wait()
    running.cancel()
    with_result = await asyncio.wait([running])
    return with_result[0].pop()


def test_a_cancelled_call_that_paid_returns_its_cost_as_a_stopped_outcome(
    tmp_path: Path,
) -> None:
    """A `call:` worker cancelled after its calls cost something returns a `stopped` outcome
    with that usage: its cost travels as data, not inside the cancellation."""
    ended = asyncio.run(_cancelled(spec_of(tmp_path, {"call": "test_execution.paid_then_waits"})))
    outcome = ended.result()
    assert outcome.stopped and not outcome.ok and outcome.error == STOPPED
    assert outcome.usage is not None and outcome.usage["cost_usd"] == pytest.approx(0.25)
    assert outcome.usage["input_tokens"] == 1000 and outcome.usage["output_tokens"] == 500
    with pytest.raises(asyncio.CancelledError):
        going_on(outcome)  # its caller goes on cancelled once it recorded that


def test_a_cancelled_attempt_that_cost_nothing_stays_cancelled(tmp_path: Path) -> None:
    """A `call:` worker or a command cancelled before anything was spent is cancelled: there
    is no outcome to record."""
    waits = asyncio.run(_cancelled(spec_of(tmp_path, {"call": "test_execution.waits"})))
    assert waits.cancelled()
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    command = asyncio.run(_cancelled(spec_of(tmp_path, {"command": sleeper})))
    assert command.cancelled()


def test_an_outcome_that_was_not_stopped_goes_on(tmp_path: Path) -> None:
    """`going_on` hands back every outcome but a stopped one."""
    done = asyncio.run(
        LocalExecutor(ModelRunner()).run(spec_of(tmp_path, {"command": ["echo", "ok"]}))
    )
    assert going_on(done) is done and done.ok
