"""Redis Streams transport: hand-outs announced on a stream, progress over pub/sub.

The stream only says "entry N is ready"; the PostgreSQL queue and the ledger stay the single
source of truth. A worker reading a message (`XREADGROUP` in one consumer group) claims that
entry in the queue; a duplicate or stale message (the entry is done, cancelled, or its
attempt superseded in the ledger) is acknowledged and dropped. Messages a consumer read but
never acknowledged, because it died, are taken over by a live consumer with `XAUTOCLAIM`
once idle for `min_idle` seconds, by which time the dead worker's hand-out has expired.

Redis may lose everything (`FLUSHALL`, a restart without persistence) or be away for a
while; nothing recorded depends on it, so neither costs a task anything:

- while Redis is away, workers claim straight from the queue table, and announcements that
  cannot be sent are left to the table (see `StreamSource`);
- a consumer group found missing (`NOGROUP`) is created again, and whoever recreates it, or
  first sees Redis come back, announces again every entry the queue table still holds;
- now and then a worker also claims entries that have waited in the table longer than
  `min_idle`, whatever became of their announcement.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from interlock.errors import StorageError

log = logging.getLogger("interlock.distributed")
ProgressCallback = Callable[[str, str, str], None]  # run id, task id, text
# What "Redis is away" looks like to the client (refused, reset, timed out, loading).
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.BusyLoadingError,
)
REANNOUNCE_WINDOW = 5  # seconds: one worker re-announces per recovery, not all of them


def missing_group(exc: Exception) -> bool:
    """Whether a Redis error says the stream or its consumer group is gone (`NOGROUP`, or
    `UNBLOCKED` for a read that was waiting when the stream was deleted)."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(("NOGROUP", "UNBLOCKED"))


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
        # Fail fast when Redis is away: the caller falls back to the queue table rather than
        # waiting through the client's default retries.
        self.redis: redis.Redis = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=2.0,
            socket_timeout=5.0,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        )
        self.url = url
        self.stream, self.group, self.channel = stream, group, channel
        try:
            self.redis.ping()  # a wrong address fails at start, not at the first hand-out
            self.ensure_group()
        except redis.RedisError as exc:
            raise RedisUnavailable(
                f"cannot use Redis at {_public(url)}: {str(exc).rstrip('.')}. Start it (or fix "
                "--redis), or run without --redis: workers then take tasks from the queue table"
            ) from exc

    def ensure_group(self) -> bool:
        """Create the stream's consumer group if missing; True when this call created it.

        It starts at the beginning of the stream (`0`), so announcements added since the
        stream was lost, before the group existed again, are delivered too."""
        try:
            self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
            return False
        return True

    def announce(self, entry_id: int) -> None:
        """See `Transport.announce`."""
        self.redis.xadd(self.stream, {"entry": str(entry_id)})

    def announce_many(self, entry_ids: Iterable[int]) -> int:
        """Announce several entries in one round trip; returns how many."""
        pipe = self.redis.pipeline(transaction=False)
        count = 0
        for entry_id in entry_ids:
            pipe.xadd(self.stream, {"entry": str(entry_id)})
            count += 1
        if count:
            pipe.execute()
        return count

    def lead_recovery(self, who: str) -> bool:
        """Whether `who` is the one to re-announce the queue after a loss (one per window)."""
        key = f"{self.stream}:reannounce"
        return bool(self.redis.set(key, who, nx=True, ex=REANNOUNCE_WINDOW))

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

    def available(self) -> bool:
        """Whether Redis answers now."""
        try:
            return bool(self.redis.ping())
        except redis.RedisError:
            return False

    def publish_progress(self, run_id: str, task_id: str, text: str) -> None:
        """Send a streamed fragment to whoever drives the run (never recorded; a fragment
        that cannot be sent while Redis is away is dropped, never the task)."""
        message = json.dumps({"run_id": run_id, "task_id": task_id, "text": text})
        try:
            self.redis.publish(self.channel, message)
        except redis.RedisError as exc:
            log.debug("progress fragment dropped: %s", exc)

    def follow_progress(self, callback: ProgressCallback) -> threading.Thread:
        """Call `callback` for every progress fragment, from a background thread that
        outlives Redis outages (it subscribes again when Redis is back)."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
        away = threading.Event()
        resumed = threading.Event()

        def handle(message: dict[str, Any]) -> None:
            if away.is_set():
                away.clear()
                log.info("progress channel: Redis is back")
            data = json.loads(message["data"])
            callback(data["run_id"], data["task_id"], data["text"])

        def trouble(exc: BaseException, _pubsub: Any, _thread: Any) -> None:
            if not away.is_set():
                away.set()
                log.warning("progress channel: Redis unavailable (%s); retrying", exc)
            resumed.wait(1.0)  # not a busy loop while it is away

        pubsub.subscribe(**{self.channel: handle})
        thread: threading.Thread = pubsub.run_in_thread(
            sleep_time=0.5, daemon=True, exception_handler=trouble
        )
        return thread


class RedisUnavailable(StorageError):
    """Redis cannot be reached (at start; later outages are survived)."""


def _public(url: str) -> str:
    """`url` without a password."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return f"{scheme}{sep}{rest}"
