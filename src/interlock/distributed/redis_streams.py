"""Redis Streams transport: hand-outs announced on a stream, progress over pub/sub.

The stream only says "entry N is ready"; the PostgreSQL queue and the ledger stay the single
source of truth. A worker reading a message (`XREADGROUP` in one consumer group) claims that
entry in the queue; a duplicate or stale message (the entry is done, cancelled, or its
attempt superseded in the ledger) is acknowledged and dropped. Messages a consumer read but
never acknowledged, because it died, are taken over by a live consumer with `XAUTOCLAIM`
once idle for `min_idle` seconds, by which time the dead worker's hand-out has expired.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from interlock.distributed.queue import Claim, TaskQueue

if TYPE_CHECKING:
    from interlock.distributed.worker import RemoteWorker

log = logging.getLogger("interlock.distributed")
ProgressCallback = Callable[[str, str, str], None]  # run id, task id, text


class RedisStreams:
    """One stream and consumer group for hand-outs, one channel for progress."""

    def __init__(
        self,
        url: str,
        *,
        stream: str = "interlock:tasks",
        group: str = "interlock-workers",
        channel: str = "interlock:progress",
    ) -> None:
        self.redis: redis.Redis = redis.Redis.from_url(url, decode_responses=True)
        self.stream, self.group, self.channel = stream, group, channel
        self.redis.ping()  # fail at start, not at the first hand-out
        try:
            self.redis.xgroup_create(stream, group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def announce(self, entry_id: int) -> None:
        """See `Transport.announce`."""
        self.redis.xadd(self.stream, {"entry": str(entry_id)})

    def read(self, consumer: str, count: int, block: float) -> list[tuple[str, int]]:
        """New messages for `consumer`: (message id, entry id)."""
        reply: Any = self.redis.xreadgroup(
            self.group, consumer, {self.stream: ">"}, count=count, block=int(block * 1000)
        )
        return [(m, int(f["entry"])) for _, messages in reply or [] for m, f in messages]

    def reclaim(self, consumer: str, min_idle: float, count: int) -> list[tuple[str, int]]:
        """Messages other consumers left unacknowledged for `min_idle` seconds, now ours."""
        reply: Any = self.redis.xautoclaim(
            self.stream, self.group, consumer, int(min_idle * 1000), "0-0", count=count
        )
        return [(m, int(f["entry"])) for m, f in reply[1] if f]

    def ack(self, message_id: str) -> None:
        """Done with a message: it will not be delivered again."""
        self.redis.xack(self.stream, self.group, message_id)

    def publish_progress(self, run_id: str, task_id: str, text: str) -> None:
        """Send a streamed fragment to whoever drives the run (never recorded)."""
        message = json.dumps({"run_id": run_id, "task_id": task_id, "text": text})
        self.redis.publish(self.channel, message)

    def follow_progress(self, callback: ProgressCallback) -> threading.Thread:
        """Call `callback` for every progress fragment, from a background thread."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]

        def handle(message: dict[str, Any]) -> None:
            data = json.loads(message["data"])
            callback(data["run_id"], data["task_id"], data["text"])

        pubsub.subscribe(**{self.channel: handle})
        thread: threading.Thread = pubsub.run_in_thread(sleep_time=0.5, daemon=True)
        return thread


class StreamSource:
    """A worker's claims from the stream (see the module docstring)."""

    def __init__(self, streams: RedisStreams, queue: TaskQueue, *, min_idle: float) -> None:
        self.streams = streams
        self.queue = queue
        self.min_idle = min_idle
        self._backlog: list[tuple[str, int]] = []
        self._messages: dict[int, str] = {}

    async def next(self, worker: RemoteWorker, limit: int) -> list[Claim]:
        """See `ClaimSource.next` (one message, one claim at a time)."""
        claim = await asyncio.to_thread(self._next, worker)
        return [] if claim is None else [claim]

    def _next(self, worker: RemoteWorker) -> Claim | None:
        if not self._backlog:
            self._backlog = self.streams.reclaim(worker.name, self.min_idle, worker.concurrency)
        if not self._backlog:
            self._backlog = self.streams.read(worker.name, worker.concurrency, block=0.2)
        while self._backlog:
            message, entry_id = self._backlog.pop(0)
            claim = self.queue.claim(
                worker.name,
                kinds=worker.kinds,
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

    def _acknowledge(self, claim: Claim) -> None:
        """Acknowledge the claim's message unless the entry went back to the queue."""
        message = self._messages.pop(claim.id, None)
        if message is not None and self.queue.get(claim.id).state != "queued":
            self.streams.ack(message)

    def progress(self, run_id: str, task_id: str, text: str) -> None:
        """See `ClaimSource.progress`."""
        self.streams.publish_progress(run_id, task_id, text)
