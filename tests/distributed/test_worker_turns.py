"""A worker records the outcomes of attempts that end while a turn is on its way in its next
turn, together: one statement for several outcomes under load, no wait when idle."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from interlock.distributed import worker as worker_module
from interlock.distributed.queue import Claim
from interlock.distributed.worker import RemoteWorker, _Ended
from interlock.errors import StorageUnavailable
from interlock.runtime.executors import Outcome
from interlock.storage.postgres import PostgresStore


def ended(n: int, tmp_path: Path) -> _Ended:
    claim = Claim(id=n, run_id="r", task_id=f"t{n}", attempt=1, delivery=1, payload={}, kind="call")
    spec: Any = None  # `_end` is replaced below: the spec is never read
    return _Ended(claim, spec, Outcome(ok=True, body=b"x"), tmp_path / str(n))


def test_outcomes_ending_during_a_turn_go_in_the_next_one_together(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url)
    worker = RemoteWorker(store, name="w", concurrency=4, kinds=("call",), workdir=tmp_path)
    turns: list[tuple[list[int], dict[str, int]]] = []

    def end(
        batch: list[_Ended], take: Mapping[str, int], holding: list[int]
    ) -> tuple[list[Claim], dict[int, Any]]:
        turns.append(([e.claim.id for e in batch], dict(take)))
        time.sleep(0.3 if len(turns) == 1 else 0)  # the first turn's statement is slow
        return [], {}

    worker._end = end  # type: ignore[method-assign]

    async def main() -> None:
        wake = asyncio.Event()
        running = asyncio.create_task(asyncio.sleep(0))  # what `_handle` keeps per attempt
        for n in (1, 2, 3, 4):  # every slot busy
            worker.running[n] = running
            worker._busy["call"] += 1
        first = asyncio.create_task(worker._recorded(ended(1, tmp_path), wake))
        await asyncio.sleep(0.1)  # the first turn is on its way
        later = [worker._recorded(ended(n, tmp_path), wake) for n in (2, 3, 4)]
        await asyncio.wait_for(asyncio.gather(first, *later), 5)
        # An idle worker's outcome goes at once, in a turn of its own.
        worker.running[5] = running
        worker._busy["call"] += 1
        await asyncio.wait_for(worker._recorded(ended(5, tmp_path), wake), 5)

    try:
        asyncio.run(main())
    finally:
        store.close()
    # Each turn claims for the slots free once its outcomes are recorded: the first only
    # its own, the second its three and the one the first freed, the last all four.
    assert turns == [([1], {"call": 1}), ([2, 3, 4], {"call": 4}), ([5], {"call": 4})]
    assert worker.running == {} and not +worker._reserved and not +worker._busy


def test_a_failed_turn_reaches_every_outcome_it_carried(pg_url: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_url)
    worker = RemoteWorker(store, name="w", concurrency=4, workdir=tmp_path)
    calls = 0

    def end(
        batch: list[_Ended], take: Mapping[str, int], holding: list[int]
    ) -> tuple[list[Claim], dict[int, Any]]:
        nonlocal calls
        calls += 1
        time.sleep(0.2)
        if calls == 2:
            raise OSError("connection lost")
        return [], {}

    worker._end = end  # type: ignore[method-assign]

    async def main() -> Any:
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


def test_outcomes_wait_out_an_outage_and_are_recorded_when_it_ends(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the database does not answer, a turn's outcomes stay with the worker and go in
    the next turn that reaches it (with those ended meanwhile), each once, and every turn
    tells the queue which entries the worker holds so that none is handed to it again."""
    monkeypatch.setattr(worker_module, "OUTAGE_PAUSE", 0.05)
    store = PostgresStore(pg_url)
    worker = RemoteWorker(store, name="w", concurrency=4, workdir=tmp_path)
    turns: list[tuple[list[int], list[int]]] = []

    def end(
        batch: list[_Ended], take: Mapping[str, int], holding: list[int]
    ) -> tuple[list[Claim], dict[int, Any]]:
        turns.append(([e.claim.id for e in batch], sorted(holding)))
        if len(turns) <= 2:
            raise StorageUnavailable("ledger unreachable: connection refused")
        return [], {}

    worker._end = end  # type: ignore[method-assign]

    async def main() -> Any:
        wake = asyncio.Event()
        running = asyncio.create_task(asyncio.sleep(0))
        for n in (1, 2):
            worker.running[n] = running
        first = asyncio.create_task(worker._recorded(ended(1, tmp_path), wake))
        await asyncio.sleep(0.02)
        second = worker._recorded(ended(2, tmp_path), wake)
        return await asyncio.wait_for(asyncio.gather(first, second), 5)

    try:
        results = asyncio.run(main())
    finally:
        store.close()
    assert results == [None, None]
    assert turns == [([1], [1, 2]), ([1, 2], [1, 2]), ([1, 2], [1, 2])]
    assert not worker._ended


def _beating_worker(
    store: PostgresStore, tmp_path: Path, runs_for: float, held: list[bool]
) -> tuple[RemoteWorker, list[float], list[Any], list[str]]:
    """A worker with a 0.6 s hand-out lease whose attempts take `runs_for` seconds; its
    heartbeats answer from `held` (True once it is empty): (worker, when each heartbeat
    came, outcomes recorded, how executions ended)."""
    worker = RemoteWorker(store, name="w", concurrency=4, workdir=tmp_path, lease_ttl=0.6)
    beats: list[float] = []
    recorded: list[Any] = []
    endings: list[str] = []

    def heartbeat_many(claims: Sequence[Claim], ttl: float, worker: str) -> set[int]:
        beats.append(time.monotonic())
        return {claim.id for claim in claims} if not held or held.pop(0) else set()

    async def execute(spec: Any) -> Outcome:
        try:
            await asyncio.sleep(runs_for)
        except asyncio.CancelledError:
            endings.append("cancelled")
            raise
        endings.append("finished")
        return Outcome(ok=True, body=b"x")

    async def record(ended: _Ended, wake: asyncio.Event) -> None:
        recorded.append(ended.outcome)

    worker.queue.heartbeat_many = heartbeat_many  # type: ignore[method-assign]
    worker._execute = execute  # type: ignore[method-assign]
    worker._recorded = record  # type: ignore[method-assign]
    return worker, beats, recorded, endings


def _handle(worker: RemoteWorker) -> float:
    """Run one attempt through `_handle`; when it started (monotonic)."""
    claim = Claim(id=1, run_id="r", task_id="t", attempt=1, delivery=1, payload={})
    spec: Any = object()  # handed to `_execute` and `_Ended` only, both replaced above
    started = time.monotonic()

    async def main() -> None:
        await asyncio.wait_for(worker._handle(claim, asyncio.Event(), spec), 10)
        await asyncio.sleep(0.5)  # no heartbeat comes after the attempt ended
        assert len(asyncio.all_tasks()) == 1  # and none is left running

    asyncio.run(main())
    return started


def test_a_long_attempt_renews_its_hand_out_every_third_of_the_lease(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url)
    try:
        worker, beats, recorded, endings = _beating_worker(store, tmp_path, 1.5, [])
        started = _handle(worker)
    finally:
        store.close()
    assert endings == ["finished"] and len(recorded) == 1
    offsets = [beat - started for beat in beats]
    assert 5 <= len(beats) <= 8, offsets  # at 0.2, 0.4, ... 1.4 s
    assert offsets[0] >= 0.18, offsets  # the first a third of the lease in, not at once
    assert all(b - a >= 0.15 for a, b in itertools.pairwise(beats)), offsets


def test_a_short_attempt_sends_no_heartbeat(pg_url: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_url)
    try:
        worker, beats, recorded, endings = _beating_worker(store, tmp_path, 0.05, [])
        _handle(worker)
    finally:
        store.close()
    assert endings == ["finished"] and len(recorded) == 1
    assert beats == []


def test_a_lost_hand_out_stops_the_attempt_and_drops_its_result(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url)
    try:
        worker, beats, recorded, endings = _beating_worker(store, tmp_path, 5.0, [True, False])
        started = _handle(worker)
    finally:
        store.close()
    assert len(beats) == 2 and endings == ["cancelled"] and recorded == []
    assert time.monotonic() - started < 2.5


def test_the_hand_outs_a_worker_holds_are_renewed_by_one_statement(
    pg_url: str, tmp_path: Path
) -> None:
    """Two long attempts at once: each heartbeat renews both in one statement, not one each
    (a worker whose calls wait in provider batches may hold thousands)."""
    store = PostgresStore(pg_url)
    try:
        worker, _, recorded, endings = _beating_worker(store, tmp_path, 1.5, [])
        carried: list[int] = []
        beat = worker.queue.heartbeat_many

        def counted(claims: Sequence[Claim], ttl: float, worker: str) -> set[int]:
            carried.append(len(claims))
            return beat(claims, ttl, worker)

        worker.queue.heartbeat_many = counted  # type: ignore[method-assign]
        claims = [
            Claim(id=n, run_id="r", task_id=f"t{n}", attempt=1, delivery=1, payload={})
            for n in (1, 2)
        ]
        spec: Any = object()

        async def main() -> None:
            handled = [worker._handle(claim, asyncio.Event(), spec) for claim in claims]
            await asyncio.wait_for(asyncio.gather(*handled), 10)

        asyncio.run(main())
    finally:
        store.close()
    assert endings == ["finished", "finished"] and len(recorded) == 2
    assert 5 <= len(carried) <= 8 and set(carried) == {2}, carried
