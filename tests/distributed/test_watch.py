"""Waiting on queue entries: what notifications say is kept for the waiter, once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from interlock.distributed.queue import TaskQueue
from interlock.distributed.watch import Watcher
from interlock.storage.postgres import PostgresStore


@pytest.fixture
def queue(pg_url: str) -> Iterator[TaskQueue]:
    """A queue on a fresh database."""
    store = PostgresStore(pg_url)
    yield TaskQueue(store)
    store.close()


def put(queue: TaskQueue, task: str) -> int:
    return queue.enqueue(run_id="r", task_id=task, attempt=1, kind="call", payload={})[0]


async def news(watcher: Watcher, entry_id: int, timeout: float = 5.0) -> tuple[str, str]:
    """The next news of `entry_id`, waiting for it if need be."""
    wake = watcher.watch(entry_id)
    async with asyncio.timeout(timeout):
        while (heard := watcher.take(entry_id)) is None:
            wake.clear()
            await wake.wait()
    return heard


async def listening(watcher: Watcher, entry_id: int) -> None:
    """Watch `entry_id` and wait until the listener is in LISTEN and its first wake-up (the
    one every connection brings) has passed."""
    watcher.watch(entry_id)
    await asyncio.to_thread(watcher._listener.connected.wait, 10)  # type: ignore[union-attr]
    await asyncio.sleep(0.2)
    watcher.take(entry_id)


def test_notifications_say_the_state_and_the_worker(queue: TaskQueue) -> None:
    """A claim is heard with the claiming worker's name (colons and all), then its end;
    each piece of news is handed over once."""

    async def go() -> None:
        watcher = Watcher(queue, poll=60)
        try:
            entry = put(queue, "a")
            await listening(watcher, entry)
            claim = await asyncio.to_thread(
                queue.claim, "host:42:abc", kinds=("call",), tags=(), ttl=30
            )
            assert claim is not None
            assert await news(watcher, entry) == ("claimed", "host:42:abc")
            assert watcher.take(entry) is None
            await asyncio.to_thread(queue.finish, claim, {"ok": True}, output=b"done")
            assert await news(watcher, entry) == ("done", "")
            found = await asyncio.to_thread(queue.finished_many, [entry])
            finished, body = found[entry]
            assert finished.state == "done" and body == b"done"
        finally:
            watcher.close()

    asyncio.run(go())


def test_news_heard_before_watching_is_kept(queue: TaskQueue) -> None:
    """An entry claimed between its enqueueing and the waiter's first look is not missed."""

    async def go() -> None:
        watcher = Watcher(queue, poll=60)
        try:
            await listening(watcher, put(queue, "first"))
            late = put(queue, "late")
            claim = await asyncio.to_thread(queue.claim, "w", kinds=("call",), tags=(), ttl=30)
            assert claim is not None and claim.task_id == "first"
            claim = await asyncio.to_thread(queue.claim, "w2", kinds=("call",), tags=(), ttl=30)
            assert claim is not None and claim.id == late
            await asyncio.sleep(0.5)  # heard while nobody watched `late`
            assert await news(watcher, late, timeout=1.0) == ("claimed", "w2")
        finally:
            watcher.close()

    asyncio.run(go())


def test_a_reconnection_makes_waiters_ask(queue: TaskQueue) -> None:
    """After a gap in listening, what was heard before may be stale: it is dropped and every
    waiter is woken to ask the queue itself."""

    async def go() -> None:
        watcher = Watcher(queue, poll=60)
        try:
            entry = put(queue, "a")
            wake = watcher.watch(entry)
            watcher._heard(entry, "claimed", "w")
            wake.clear()
            watcher._set_all()
            assert wake.is_set() and watcher.take(entry) is None
        finally:
            watcher.close()

    asyncio.run(go())
