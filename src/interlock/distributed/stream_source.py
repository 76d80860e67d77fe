"""A worker's claims from the Redis stream, with the queue table behind it.

The stream is how a worker hears of new entries quickly; the table is what it claims from.
So when Redis is away the worker claims straight from the table (as without `--redis`),
checks about once a second whether Redis is back, and then leads the recovery if nobody
else does (see `redis_streams`). A `NOGROUP` reply means Redis lost the group (a `FLUSHALL`,
a restart without persistence): the group is created again and the queue re-announced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from interlock.distributed.queue import Claim, TaskQueue
from interlock.distributed.redis_streams import UNAVAILABLE, RedisStreams, missing_group

if TYPE_CHECKING:
    from interlock.distributed.worker import RemoteWorker

log = logging.getLogger("interlock.distributed")
RECHECK = 1.0  # seconds between looks at whether Redis is back


class StreamSource:
    """See the module docstring; `ClaimSource` for the contract."""

    def __init__(self, streams: RedisStreams, queue: TaskQueue, *, min_idle: float) -> None:
        self.streams = streams
        self.queue = queue
        self.min_idle = min_idle
        self.away_since: float | None = None  # monotonic time Redis was found away
        self.outages: list[float] = []  # seconds each outage lasted, as this worker saw it
        self._checked = 0.0
        self._stragglers_at = time.monotonic() + min_idle
        self._backlog: list[tuple[str, int]] = []
        self._messages: dict[int, str] = {}

    async def next(self, worker: RemoteWorker, wanted: Mapping[str, int]) -> list[Claim]:
        """See `ClaimSource.next` (one message, one claim at a time, while Redis is up)."""
        return await asyncio.to_thread(self._claims, worker, wanted)

    def _claims(self, worker: RemoteWorker, wanted: Mapping[str, int]) -> list[Claim]:
        if self.away_since is not None and not self._back(worker):
            return self._from_table(worker, wanted)
        try:
            claim = self._next(worker, wanted)
        except UNAVAILABLE as exc:
            self._away(exc)
            return self._from_table(worker, wanted)
        except Exception as exc:
            if not missing_group(exc):
                raise
            self._recover(worker, "Redis lost the consumer group (flushed or restarted)")
            return []
        if claim is not None:
            return [claim]
        now = time.monotonic()
        if now >= self._stragglers_at:
            # Whatever became of their announcement, entries waiting longer than a message
            # would stay unclaimed are taken from the table.
            self._stragglers_at = now + self.min_idle
            return self._from_table(worker, wanted, older=self.min_idle)
        return []

    def _from_table(
        self, worker: RemoteWorker, wanted: Mapping[str, int], older: float | None = None
    ) -> list[Claim]:
        return self.queue.claim_many(
            worker.name,
            kinds=worker.kinds,
            tags=worker.tags,
            ttl=worker.lease_ttl,
            older=older,
            per_kind=wanted,
        )

    def _away(self, exc: Exception) -> None:
        self.away_since = self._checked = time.monotonic()
        self._backlog.clear()
        log.warning(
            "Redis unavailable (%s): taking tasks from the queue table until it is back",
            exc,
            extra={"action": "transport_down"},
        )

    def _back(self, worker: RemoteWorker) -> bool:
        """Whether Redis answers again (asked at most every `RECHECK` seconds); leads the
        recovery when it does."""
        now = time.monotonic()
        if now - self._checked < RECHECK:
            return False
        self._checked = now
        if not self.streams.available():
            return False
        took = now - (self.away_since or now)
        self.outages.append(took)
        self.away_since = None
        try:
            self._recover(worker, f"Redis was unavailable for {took:.1f}s")
        except UNAVAILABLE as exc:
            self._away(exc)
            return False
        return True

    def _recover(self, worker: RemoteWorker, why: str) -> None:
        """Create the group if it is gone; re-announce the queue if nobody else is."""
        created = self.streams.ensure_group()
        self._backlog.clear()
        self._messages.clear()  # messages read before are gone, or will be read again
        # Said by whichever worker made the group again, whoever leads the re-announcing.
        group = "consumer group recreated" if created else "consumer group there"
        if not self.streams.lead_recovery(worker.name):
            log.warning("%s; %s, recovered (another worker re-announces the queue)", why, group)
            return
        count = self.streams.announce_many(self.queue.queued_ids())
        log.warning(
            "%s; %s, re-announced %d queued task(s)",
            why,
            group,
            count,
            extra={"action": "transport_recovered"},
        )

    def _next(self, worker: RemoteWorker, wanted: Mapping[str, int]) -> Claim | None:
        if not self._backlog:
            self._backlog = self.streams.reclaim(worker.name, self.min_idle, worker.concurrency)
        if not self._backlog:
            self._backlog = self.streams.read(worker.name, worker.concurrency, block=0.2)
        while self._backlog:
            message, entry_id = self._backlog.pop(0)
            if entry_id in worker.running:
                # Its own, queued again by a sweep after an outage: it takes it back by its
                # result or heartbeat. The message stays pending and is reclaimed later.
                continue
            claim = self.queue.claim(
                worker.name,
                kinds=[kind for kind, count in wanted.items() if count > 0],
                tags=worker.tags,
                ttl=worker.lease_ttl,
                only=entry_id,
            )
            if claim is not None:
                self._messages[claim.id] = message
                return claim
            state = self.queue.get(entry_id).state
            if state in ("done", "cancelled"):
                log.info("dropped a stale stream message for entry %d (%s)", entry_id, state)
                self.streams.ack(message)
            # Otherwise the entry is held by a worker whose hand-out has not expired yet, or
            # waits for a limit or another kind of worker: the message stays pending and is
            # reclaimed later, when the answer may differ.
        return None

    async def done(self, claim: Claim) -> None:
        """See `ClaimSource.done`."""
        await asyncio.to_thread(self._acknowledge, claim)

    async def parked(self, claim: Claim) -> None:
        """See `ClaimSource.parked`: the claim's message is acknowledged now. Left pending
        for the hours a provider batch takes, it would be reclaimed by every worker again
        and again (each asking the queue in vain); should this worker die meanwhile, its
        entry is queued again by a sweep and taken from the table as a straggler."""
        message = self._messages.pop(claim.id, None)
        if message is not None:
            await asyncio.to_thread(self._ack, message)

    def _ack(self, message: str) -> None:
        try:
            self.streams.ack(message)
        except UNAVAILABLE:
            pass
        except Exception as exc:
            if not missing_group(exc):
                raise

    def _acknowledge(self, claim: Claim) -> None:
        """Acknowledge the claim's message unless the entry went back to the queue. A message
        that cannot be acknowledged now (Redis away, or it lost the message) is dropped
        later: its entry is done by then."""
        message = self._messages.pop(claim.id, None)
        if message is not None and self.queue.get(claim.id).state != "queued":
            self._ack(message)

    def progress(self, run_id: str, task_id: str, text: str) -> None:
        """See `ClaimSource.progress`."""
        self.streams.publish_progress(run_id, task_id, text)
