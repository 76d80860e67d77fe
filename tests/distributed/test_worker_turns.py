"""A worker records the outcomes of attempts that end while a turn is on its way in its next
turn, together: one statement for several outcomes under load, no wait when idle."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from interlock.distributed.queue import Claim
from interlock.distributed.worker import RemoteWorker, _Ended
from interlock.runtime.executors import Outcome
from interlock.storage.postgres import PostgresStore


def ended(n: int, tmp_path: Path) -> _Ended:
    claim = Claim(id=n, run_id="r", task_id=f"t{n}", attempt=1, delivery=1, payload={})
    spec: Any = None  # `_end` is replaced below: the spec is never read
    return _Ended(claim, spec, Outcome(ok=True, body=b"x"), tmp_path / str(n))


def test_outcomes_ending_during_a_turn_go_in_the_next_one_together(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url)
    worker = RemoteWorker(store, name="w", concurrency=4, workdir=tmp_path)
    turns: list[tuple[list[int], int]] = []

    def end(batch: list[_Ended], take: int) -> tuple[list[Claim], dict[int, Any]]:
        turns.append(([e.claim.id for e in batch], take))
        time.sleep(0.3 if len(turns) == 1 else 0)  # the first turn's statement is slow
        return [], {}

    worker._end = end  # type: ignore[method-assign]

    async def main() -> None:
        wake = asyncio.Event()
        running = asyncio.create_task(asyncio.sleep(0))  # what `_handle` keeps per attempt
        worker.running.update({n: running for n in (1, 2, 3, 4)})  # every slot busy
        first = asyncio.create_task(worker._recorded(ended(1, tmp_path), wake))
        await asyncio.sleep(0.1)  # the first turn is on its way
        later = [worker._recorded(ended(n, tmp_path), wake) for n in (2, 3, 4)]
        await asyncio.wait_for(asyncio.gather(first, *later), 5)
        # An idle worker's outcome goes at once, in a turn of its own.
        worker.running[5] = running
        await asyncio.wait_for(worker._recorded(ended(5, tmp_path), wake), 5)

    try:
        asyncio.run(main())
    finally:
        store.close()
    # Each turn claims for the slots free once its outcomes are recorded: the first only
    # its own, the second its three and the one the first freed, the last all four.
    assert turns == [([1], 1), ([2, 3, 4], 4), ([5], 4)]
    assert worker.running == {} and worker.reserved == 0


def test_a_failed_turn_reaches_every_outcome_it_carried(pg_url: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_url)
    worker = RemoteWorker(store, name="w", concurrency=4, workdir=tmp_path)
    calls = 0

    def end(batch: list[_Ended], take: int) -> tuple[list[Claim], dict[int, Any]]:
        nonlocal calls
        calls += 1
        time.sleep(0.2)
        if calls == 2:
            raise OSError("connection lost")
        return [], {}

    worker._end = end  # type: ignore[method-assign]

    async def main() -> list[Any]:
        wake = asyncio.Event()
        first = asyncio.create_task(worker._recorded(ended(1, tmp_path), wake))
        await asyncio.sleep(0.05)
        later = [worker._recorded(ended(n, tmp_path), wake) for n in (2, 3)]
        return await asyncio.gather(first, *later, return_exceptions=True)

    try:
        results = asyncio.run(main())
    finally:
        store.close()
    assert results[0] is None
    assert all(isinstance(r, OSError) for r in results[1:])
    assert not worker._ended  # nothing left waiting for a turn
