"""What a worker, a reuse or a child run reports to the run's next tick (`Report`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from interlock.core import events as ev


@dataclass
class Report:
    """A worker's report waiting for the next tick, with its output: a temporary file, or
    a small body held in memory."""

    event: (
        ev.TaskStarted
        | ev.TaskCompleted
        | ev.TaskFailed
        | ev.TaskTimedOut
        | ev.TaskReused
        | ev.ChildUpdated
        | ev.ChildSpent
        | ev.TaskBatchWaited
    )
    tmp: Path | None = None
    body: bytes | None = None
