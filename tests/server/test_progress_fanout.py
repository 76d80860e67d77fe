"""Streamed model text reaches watchers coalesced and bounded: however many fragments arrive
before the feed publishes them, a task's text leaves as one message of bounded size."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import warnings
from pathlib import Path

from tests.server.conftest import ServerFactory
from tests.server.test_fanout import stalled_client

from interlock.server.hub import PROGRESS_CHARS, QUEUE_BYTES, Hub
from interlock.storage import open_store


def test_fragments_of_one_round_leave_as_one_bounded_message(tmp_path: Path) -> None:
    """Ten thousand 1 KiB fragments of one task, streamed before the loop runs the feed, reach
    a watcher of the run as one `token` message of `PROGRESS_CHARS` characters that counts the
    rest as skipped, instead of ten thousand messages (which dropped the watcher and held 10 MB);
    another task's fragments leave as their own message."""
    store = open_store(None, tmp_path)

    async def main() -> list[dict[str, object]]:
        hub = Hub(store, lambda state: None, queue_size=100)
        hub.start()
        watcher = hub.subscribe("run-1")
        for _ in range(10_000):
            hub.on_progress("run-1", "writer@1", "x" * 1024)
        hub.on_progress("run-1", "critic@1", "short")
        await asyncio.sleep(0.05)  # the loop publishes what arrived
        assert not watcher.dropped.is_set()
        return [json.loads(m.text) for m in await hub.next_live(watcher)]

    messages = asyncio.run(main())
    assert [(m["task_id"], len(str(m["text"])), m.get("skipped")) for m in messages] == [
        ("writer@1", PROGRESS_CHARS, 10_000 * 1024 - PROGRESS_CHARS),
        ("critic@1", 5, None),
    ]


def test_a_watcher_that_does_not_read_is_dropped_by_size_too(tmp_path: Path) -> None:
    """A watcher of a run that stops reading is dropped once the messages waiting for it pass
    `QUEUE_BYTES`, long before `queue_size` messages of streamed text (which held up to 64 MB
    each watcher); a watcher of every run is dropped when the shared log is cut past it."""
    store = open_store(None, tmp_path)

    async def main() -> tuple[bool, bool, int]:
        hub = Hub(store, lambda state: None, queue_size=1000)
        hub.start()
        one, every = hub.subscribe("run-1"), hub.subscribe(None)
        for _ in range(300):
            hub.on_progress("run-1", "writer@1", "x" * PROGRESS_CHARS)
            await asyncio.sleep(0)  # each fragment its own round: its own message
        return one.dropped.is_set(), every.dropped.is_set(), hub._log_size

    one, every, log_size = asyncio.run(main())
    assert one and every
    assert log_size <= 2 * QUEUE_BYTES


def test_a_watcher_that_stopped_reading_does_not_hold_the_shutdown(
    make_server: ServerFactory,
) -> None:
    """A stream client that stopped reading while streamed text filled every buffer on the way
    does not keep the server from stopping (and handing its leases back): it had held the
    shutdown for ever."""
    server = make_server()
    port = int(server.url.rsplit(":", 1)[1])
    stalled = stalled_client(port)
    deadline = time.monotonic() + 10
    while not server.service.hub._everyone and time.monotonic() < deadline:
        time.sleep(0.01)
    (stuck,) = server.service.hub._everyone
    for number in range(2000):
        server.service.hub.on_progress("some-run", str(number), "x" * PROGRESS_CHARS)
        if stuck.dropped.is_set():
            break
        time.sleep(0.001)
    assert stuck.dropped.is_set()
    with warnings.catch_warnings():
        # Cancelled after the grace period, uvicorn leaves the stuck connection's transport to
        # the process's end: here, to the collector.
        warnings.simplefilter("ignore", ResourceWarning)
        server.stop()  # waits up to 20 s
        stalled.close()
        state = server.server.server_state
        state.connections.clear()
        state.tasks.clear()
        gc.collect()
    assert not server.thread.is_alive()
