"""Streamed model text reaches watchers coalesced and bounded: however many fragments arrive
before the feed publishes them, a task's text leaves as one message of bounded size."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from interlock.server.hub import PROGRESS_CHARS, Hub
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
