"""Where a worker's next hand-out comes from: the queue table itself, or a stream."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from interlock.distributed.queue import Claim, TaskQueue

if TYPE_CHECKING:
    from interlock.distributed.worker import RemoteWorker


class ClaimSource(Protocol):
    """Hands a worker its next claim and hears when it is through with it."""

    async def next(self, worker: RemoteWorker, wanted: Mapping[str, int]) -> list[Claim]:
        """Up to `wanted[kind]` claims of each kind for `worker` (none when nothing is ready
        now)."""
        ...

    async def done(self, claim: Claim) -> None:
        """The worker is through with `claim` (finished, stale or handed back)."""
        ...

    async def parked(self, claim: Claim) -> None:
        """`claim`'s model call waits in a provider batch, perhaps for hours: the hand-out
        stays the worker's (its lease is renewed), and what announced it is done with."""
        ...

    def progress(self, run_id: str, task_id: str, text: str) -> None:
        """A streamed fragment of a running model attempt."""
        ...


class QueueSource:
    """Claims straight from the queue table (`FOR UPDATE SKIP LOCKED`)."""

    def __init__(self, queue: TaskQueue) -> None:
        self.queue = queue

    async def next(self, worker: RemoteWorker, wanted: Mapping[str, int]) -> list[Claim]:
        """See `ClaimSource.next`: one statement for all of them, as a rule, which brings
        the ledger's news of their runs as well (see `TaskQueue.finish_claim`)."""

        holding = list(worker.running)  # read here, on the loop that changes it

        def claim() -> list[Claim]:
            turn = self.queue.finish_claim(
                worker.name,
                (),
                kinds=worker.kinds,
                tags=worker.tags,
                ttl=worker.lease_ttl,
                per_kind=wanted,
                known=worker.known(),
                holding=holding,
            )
            return turn.claims

        return await asyncio.to_thread(claim)

    async def done(self, claim: Claim) -> None:
        """See `ClaimSource.done`: nothing to tell the queue table."""

    async def parked(self, claim: Claim) -> None:
        """See `ClaimSource.parked`: nothing to tell the queue table."""

    def progress(self, run_id: str, task_id: str, text: str) -> None:
        """See `ClaimSource.progress` (not carried without a stream)."""
