"""Scaling out: a shared PostgreSQL ledger, a task queue, remote workers, many orchestrators.

- `QueueDispatcher` sends recorded attempts to the queue instead of running them here.
- `RemoteWorker` (`interlock worker`) claims and runs them on any machine.
- `Fleet` (`interlock orchestrate`) drives whichever runs have no live orchestrator.
- `submit` records a run for the fleet to pick up.
"""

from __future__ import annotations

from interlock.distributed.artifacts import ArtifactStore, PostgresArtifacts
from interlock.distributed.dispatcher import QueueDispatcher
from interlock.distributed.orchestrate import Fleet, submit
from interlock.distributed.queue import Claim, TaskQueue
from interlock.distributed.worker import RemoteWorker

__all__ = [
    "ArtifactStore",
    "Claim",
    "Fleet",
    "PostgresArtifacts",
    "QueueDispatcher",
    "RemoteWorker",
    "TaskQueue",
    "submit",
]
