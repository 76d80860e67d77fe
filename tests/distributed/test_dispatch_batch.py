"""The dispatcher queues the attempts of one tick together: one round trip for all."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from interlock.core.workflow import Worker
from interlock.distributed.artifacts import PostgresArtifacts
from interlock.distributed.dispatcher import QueueDispatcher
from interlock.distributed.queue import TaskQueue
from interlock.runtime.executors import TaskSpec
from interlock.storage.postgres import PostgresStore


class CountingQueue(TaskQueue):
    """A real queue that remembers the size of every pipelined batch it sent."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store)
        self.batches: list[int] = []

    def enqueue_many(self, entries: Any) -> list[tuple[int, str]]:
        self.batches.append(len(entries))
        return super().enqueue_many(entries)


def spec(task_id: str, tmp: Path, reads: list[tuple[str, Path]] | None = None) -> TaskSpec:
    """An attempt of a `call:` worker in run r1."""
    return TaskSpec(
        run_id="r1",
        task_id=task_id,
        attempt=1,
        worker=Worker.model_validate({"role": task_id, "call": "tasks:noop"}),
        task="",
        topic="t",
        inputs={},
        item=None,
        reads=reads or [],
        output=tmp / f"{task_id}.part",
        run_dir=tmp,
        model=None,
        idempotency_key=task_id,
    )


def test_attempts_of_one_tick_are_queued_in_one_batch(pg_url: str, tmp_path: Path) -> None:
    """Three attempts dispatched in the same loop turn are queued by one pipelined call and
    each gets its own entry; one whose input file is gone fails alone."""
    store = PostgresStore(pg_url)
    queue = CountingQueue(store)
    dispatcher = QueueDispatcher(queue, PostgresArtifacts(store))

    async def dispatch() -> list[Any]:
        specs = [spec(name, tmp_path) for name in ("a", "b", "c")]
        specs.append(spec("d", tmp_path, reads=[("gone.md", tmp_path / "gone.md")]))
        fields = [
            {"run_id": "r1", "task_id": s.task_id, "attempt": 1, "kind": "call"} for s in specs
        ]
        submits = [dispatcher._submit(s, "p", f) for s, f in zip(specs, fields, strict=True)]
        return await asyncio.gather(*submits, return_exceptions=True)

    try:
        results = asyncio.run(dispatch())
        assert queue.batches == [3]
        assert [state for _, state in results[:3]] == ["queued"] * 3
        assert len({entry_id for entry_id, _ in results[:3]}) == 3
        assert isinstance(results[3], FileNotFoundError)
        assert [queue.get(entry_id).state for entry_id, _ in results[:3]] == ["queued"] * 3
    finally:
        store.close()
