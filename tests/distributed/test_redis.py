"""The Redis Streams transport against the real Redis: reclaiming, deduplication."""

from __future__ import annotations

import collections
import signal
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
import redis
from tests.distributed.helpers import REDIS, Processes, check_histories, statuses, wait_until
from tests.distributed.test_fleet import submit_many

from interlock.distributed.queue import TaskQueue
from interlock.distributed.redis_streams import RedisStreams
from interlock.distributed.stream_source import StreamSource
from interlock.storage.postgres import PostgresStore

pytestmark = pytest.mark.slow


@pytest.fixture
def streams() -> Iterator[RedisStreams]:
    """The transport on an emptied Redis database."""
    redis.Redis.from_url(REDIS).flushdb()
    transport = RedisStreams(REDIS)
    yield transport
    transport.redis.flushdb()


def pending(streams: RedisStreams) -> int:
    """Messages read but not acknowledged."""
    info: Any = streams.redis.xpending(streams.stream, streams.group)
    return int(info["pending"])


def claimed_by(url: str) -> dict[str, int]:
    """How many entries each worker holds now."""
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT worker, count(*) FROM task_queue WHERE state = 'claimed' GROUP BY 1"
        ).fetchall()
    return {str(w): int(n) for w, n in rows}


def test_killed_consumer_entries_are_reclaimed(procs: Processes, streams: RedisStreams) -> None:
    """A worker killed mid-task leaves stream entries another consumer reclaims and finishes."""
    procs.orchestrator("orch", "--redis", REDIS)
    doomed = procs.worker("doomed", "--redis", REDIS, DIST_TASKS_DELAY="30")
    run_ids = submit_many(procs.url, procs.root / "submit", 2)
    wait_until(lambda: sum(claimed_by(procs.url).values()) >= 2, 30, "the doomed worker's claims")
    # Claimed is not yet begun: killed in between, an attempt would run once, not twice.
    wait_until(lambda: len(procs.executions()) >= 2, 30, "the doomed worker's calls to begin")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    assert pending(streams) >= 2
    procs.worker("rescuer", "--redis", REDIS)
    wait_until(lambda: statuses(procs.url).get("delivered", 0) == 2, 60, "runs delivered")
    check_histories(procs.url, run_ids)
    wait_until(lambda: pending(streams) == 0, 10, "every stream message acknowledged")
    runs = collections.Counter((run, task) for run, task, _ in procs.executions())
    assert len(runs) == 2 * 5 and max(runs.values()) == 2  # the killed ones ran again, once


def test_duplicate_and_stale_messages_are_dropped(pg_url: str, streams: RedisStreams) -> None:
    """A second message for an entry already done is acknowledged without running anything."""
    store = PostgresStore(pg_url)
    try:
        queue = TaskQueue(store)
        entry, _ = queue.enqueue(run_id="r", task_id="a", attempt=1, kind="call", payload={})
        streams.announce(entry)
        streams.announce(entry)
        source = StreamSource(streams, queue, min_idle=60)
        worker: Any = SimpleNamespace(
            name="w1", kinds=("call",), tags=(), lease_ttl=30.0, concurrency=4, running={}
        )
        wanted = {"call": 4}
        claim = source._next(worker, wanted)
        assert claim is not None and claim.id == entry
        assert source._next(worker, wanted) is None  # the duplicate: entry held, message kept
        assert queue.finish(claim, {"ok": True}, None)
        source._acknowledge(claim)
        later = StreamSource(streams, queue, min_idle=0)
        assert later._next(worker, wanted) is None  # reclaimed duplicate: entry done, so dropped
        assert pending(streams) == 0
    finally:
        store.close()
