"""`Executor`: the one port a recorded attempt is run through.

`Executor.run(spec, progress)` runs one attempt with what its worker kind calls for (a
command, a `call:` function, a model call) and returns how it ended. A model call cancelled
while the server was answering (its run ended) ends in an outcome too, a `stopped` one that
carries what the call cost in its `usage`: nothing above this port reads spend from an
exception. The caller records that outcome and goes on cancelled (`going_on`).

The local dispatcher and fleet workers run attempts through the same executor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from interlock.providers.redaction import Secret
from interlock.runtime.executors import Outcome, TaskSpec, run_call, run_command
from interlock.runtime.models import ModelRunner

Progress = Callable[[str], None]
"""Told each masked fragment of text as a model streams."""


class Executor(Protocol):
    """Runs one attempt and says how it ended."""

    async def run(self, spec: TaskSpec, progress: Progress | None = None) -> Outcome:
        """The attempt's outcome; cancelled, it raises unless its model had cost anything,
        and then returns a `stopped` outcome with that cost."""
        ...

    def secrets(self, workflow_dir: Path | None) -> list[Secret]:
        """Every key the configuration of `workflow_dir` reaches: what the records of its
        attempts are masked of."""
        ...


class LocalExecutor:
    """Runs attempts in this process, model calls through `models`."""

    def __init__(self, models: ModelRunner) -> None:
        self.models = models

    async def run(self, spec: TaskSpec, progress: Progress | None = None) -> Outcome:
        """See `Executor.run`."""
        kind = spec.worker.kind
        if kind == "command":
            return await asyncio.to_thread(self.models.masked, spec, await run_command(spec))
        if kind == "call":
            return self.models.masked(spec, await run_call(spec, self.models))
        return await self.models.run(spec, progress)

    def secrets(self, workflow_dir: Path | None) -> list[Secret]:
        """See `Executor.secrets`."""
        return self.models.secrets(workflow_dir)


def going_on(outcome: Outcome) -> Outcome:
    """`outcome`, unless it is a `stopped` one: the attempt was cancelled, and its caller,
    having recorded what it cost (or not: a fleet worker's lost hand-out), goes on
    cancelled."""
    if outcome.stopped:
        raise asyncio.CancelledError
    return outcome
