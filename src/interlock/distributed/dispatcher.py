"""`QueueDispatcher`: recorded attempts go to the shared queue; remote workers run them.

`submit` enqueues the attempt (idempotently: a resumed or taken-over run enqueues the same
entry again and simply waits on it) and returns an asyncio task that waits for the result,
puts the output where `LocalDispatcher` would (the run's `.tmp/<task>.<attempt>.part`), and
reports it through the attempt's own `report` like any local attempt.

Cancelling that task withdraws the queue entry when the run no longer wants the attempt (the
run ended, the attempt was superseded). When the orchestrator merely lets go of the run (shut
down, lease lost) the entry stays: whoever drives the run next waits on the same entry, so a
remote worker's work is never thrown away by an orchestrator restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from interlock.core import events as ev
from interlock.distributed.artifacts import ArtifactStore, PostgresArtifacts
from interlock.distributed.payload import keep_journals, keep_records, scopes, to_payload
from interlock.distributed.queue import Entry, TaskQueue
from interlock.distributed.watch import Watcher
from interlock.errors import StorageUnavailable
from interlock.runtime import artifacts as files
from interlock.runtime.dispatch import Attempt, attempt_report, off_loop_report
from interlock.runtime.executors import Outcome, TaskSpec
from interlock.runtime.reports import Report

log = logging.getLogger("interlock.distributed")
T = TypeVar("T")
OUTAGE_PAUSE = 1.0  # seconds between tries of the queue while the database is down
TAKES_KEPT = 4096  # runs whose take this dispatcher remembers having fetched the outputs of
# What a worker says of a hand-out whose model call went into a provider batch, or came back.
PARKING = ("parked", "unparked")


class Transport(Protocol):
    """Something that announces queued entries to workers besides the database."""

    def announce(self, entry_id: int) -> None:
        """Tell workers that entry `entry_id` is ready."""
        ...


class QueueDispatcher:
    """A `Dispatcher` handing attempts to `interlock worker` processes through the queue."""

    def __init__(
        self,
        queue: TaskQueue,
        artifacts: ArtifactStore,
        *,
        poll: float = 5.0,
        priorities: dict[str, int] | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.queue = queue
        self.artifacts = artifacts
        self.poll = poll
        self.priorities = priorities or {}
        self.transport = transport
        self.watcher = Watcher(queue, poll=poll)
        self._unannounced: set[int] = set()  # queued entries the transport did not take
        self._transport_away_since: float | None = None
        self._retry_at = 0.0
        # Attempts waiting to be queued with the next batch, and the task sending them.
        self._batch: list[tuple[TaskSpec, str, dict[str, Any], asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        # Done entries whose results are fetched with the next batch, and the task fetching.
        self._done: list[tuple[int, Path, asyncio.Future[tuple[Entry, Outcome]]]] = []
        self._fetcher: asyncio.Task[None] | None = None
        # The take (lease token) of each run whose outputs were fetched here, the latest last.
        self._materialised: dict[str, int] = {}
        # The attempts submitted and not ended, by run: what `withdraw` looks through.
        self._running: dict[str, dict[tuple[str, int], tuple[Attempt, asyncio.Task[None]]]] = {}
        # Attempts a worker has begun (run, task, attempt), and those withdrawn before any did.
        self._begun: set[tuple[str, str, int]] = set()
        self._withdrawn: set[tuple[str, str, int]] = set()

    def submit(self, attempt: Attempt) -> asyncio.Task[None]:
        """See `Dispatcher.submit`."""
        loop = asyncio.get_running_loop()
        handle = loop.create_task(self._run(attempt), name=attempt.task_id)
        key = (attempt.task_id, attempt.attempt)
        running = self._running.setdefault(attempt.run_id, {})
        running[key] = (attempt, handle)

        def forget(_: asyncio.Task[None]) -> None:  # even cancelled before it began
            if running.get(key, (None, None))[1] is handle:
                del running[key]
                if not running and self._running.get(attempt.run_id) is running:
                    del self._running[attempt.run_id]

        handle.add_done_callback(forget)
        return handle

    def withdraw(self, run_id: str) -> None:
        """See `Dispatcher.withdraw`: the attempts still queued are taken out of the queue,
        so that no worker begins them while the run waits for those it runs. (A child run
        is driven from the orchestrator, never submitted: it is cancelled with the run.)"""
        for attempt, handle in list(self._running.get(run_id, {}).values()):
            if attempt.begun():
                continue
            key = (run_id, attempt.task_id, attempt.attempt)
            if key in self._begun or key in self._withdrawn:
                continue
            self._withdrawn.add(key)
            handle.cancel()  # `_run` withdraws its queue entry as it stops

    def close(self) -> None:
        """Stop listening for queue notifications."""
        self.watcher.close()

    async def _run(self, attempt: Attempt) -> None:
        run_id, task_id, number, tmp = attempt.run_id, attempt.task_id, attempt.attempt, attempt.tmp
        clock, key = attempt.clock, (attempt.run_id, attempt.task_id, attempt.attempt)
        entry_id: int | None = None
        try:
            files.discard(tmp)  # a leftover of an interrupted try (a large output lands here)
            if self._materialised.get(run_id) != attempt.take:
                # Once per taken run: what it commits from then on is written here.
                await asyncio.to_thread(self._materialise, attempt)
                self._materialised.pop(run_id, None)
                self._materialised[run_id] = attempt.take
                while len(self._materialised) > TAKES_KEPT:  # the longest ago goes
                    del self._materialised[next(iter(self._materialised))]
            spec = attempt.prepare(tmp)()
            if isinstance(spec, Outcome):  # it cannot run anywhere: report it here
                report = attempt_report(attempt.worker, task_id, number, spec, tmp, clock())
                attempt.report(report)
                return
            pipeline = attempt.pipeline
            fields: dict[str, Any] = {
                "run_id": run_id,
                "task_id": task_id,
                "attempt": number,
                "kind": spec.worker.kind,
                "tags": spec.worker.tags,
                "scopes": scopes(pipeline, spec.worker, spec.model),
                "priority": self.priorities.get(pipeline, 0),
            }
            queued, state = await self._submit(spec, pipeline, fields)
            entry_id = queued
            outcome = await self._wait(attempt, queued, state, fields, tmp)
            attempt.report(await off_loop_report(attempt, outcome, clock()))
        except asyncio.CancelledError:
            files.discard(tmp)
            if key in self._withdrawn or attempt.current() is None:
                with contextlib.suppress(Exception):
                    self.queue.cancel(run_id, task_id, number)
            raise
        except Exception as exc:  # a queue or storage failure fails the attempt, not the loop
            log.exception("task %s could not be dispatched", task_id, extra={"run_id": run_id})
            if entry_id is not None:  # the failed attempt's entry must not wait for ever
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.queue.cancel, run_id, task_id, number)
            failed = ev.TaskFailed(
                at=clock(),
                task_id=task_id,
                attempt=number,
                error=f"dispatch error: {type(exc).__name__}: {exc}",
            )
            attempt.report(Report(event=failed))
        finally:
            self._begun.discard(key)
            self._withdrawn.discard(key)
            if entry_id is not None:
                self.watcher.unwatch(entry_id)
                self._unannounced.discard(entry_id)
            attempt.ended(asyncio.current_task())

    async def _submit(
        self, spec: TaskSpec, pipeline: str, fields: dict[str, Any]
    ) -> tuple[int, str]:
        """Upload what the attempt reads and queue it: (entry id, state). The attempts that
        one tick dispatches go together: one thread hop and one round trip for all."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, str]] = loop.create_future()
        self._batch.append((spec, pipeline, fields, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush(), name="interlock-enqueue")
        return await future

    async def _flush(self) -> None:
        while self._batch:
            await asyncio.sleep(0)  # let the rest of this tick's dispatches join
            batch, self._batch = self._batch, []
            # An attempt stopped while it waited here (withdrawn, its run ended) is not queued.
            batch = [item for item in batch if not item[-1].cancelled()]
            if not batch:
                continue
            try:
                items = [(spec, pipeline, fields) for spec, pipeline, fields, _ in batch]
                results = await asyncio.to_thread(self._submit_many, items)
            except StorageUnavailable:  # queued when the database answers again (idempotent)
                self._batch = batch + self._batch
                await asyncio.sleep(OUTAGE_PAUSE)
                continue
            except Exception as exc:
                results = [exc] * len(batch)
            _answer([item[-1] for item in batch], results)

    def _submit_many(
        self, items: list[tuple[TaskSpec, str, dict[str, Any]]]
    ) -> list[tuple[int, str] | Exception]:
        """Payloads (inputs uploaded on the way), then every entry queued in one round trip;
        an attempt whose inputs cannot be read fails alone."""
        results: list[tuple[int, str] | Exception] = []
        ready: list[dict[str, Any]] = []
        for spec, pipeline, fields in items:
            try:
                fields["payload"] = to_payload(spec, pipeline, self.artifacts)
            except StorageUnavailable:  # the whole batch waits for the database
                raise
            except Exception as exc:
                results.append(exc)
                continue
            results.append((0, ""))
            ready.append(fields)
        queued = iter(self.queue.enqueue_many(ready))
        for index, result in enumerate(results):
            if isinstance(result, Exception):
                continue
            entry_id, state = next(queued)
            results[index] = (entry_id, state)
            if state == "queued":
                self._announce(entry_id)
        return results

    def _enqueue(self, fields: dict[str, Any]) -> tuple[int, str]:
        entry_id, state = self.queue.enqueue(**fields)
        if state == "queued":
            self._announce(entry_id)
        return entry_id, state

    def _announce(self, entry_id: int) -> bool:
        """Announce a queued entry on the transport; False when it cannot be now.

        The entry is in the queue table either way: workers take it from there while the
        transport is away, and it is announced again once it is back. A transport outage
        is never a task failure."""
        if self.transport is None:
            return True
        if self._transport_away_since is not None and time.monotonic() < self._retry_at:
            self._unannounced.add(entry_id)  # away: one try a second, not one per entry
            return False
        try:
            self.transport.announce(entry_id)
        except Exception as exc:
            self._unannounced.add(entry_id)
            self._retry_at = time.monotonic() + 1.0
            if self._transport_away_since is None:
                self._transport_away_since = time.monotonic()
                log.warning(
                    "cannot announce tasks (%s); workers take them from the queue table",
                    exc,
                    extra={"action": "transport_down"},
                )
            return False
        self._unannounced.discard(entry_id)
        if self._transport_away_since is not None:
            away = time.monotonic() - self._transport_away_since
            self._transport_away_since = None
            log.warning(
                "announcing tasks again after %.1fs", away, extra={"action": "transport_up"}
            )
        return True

    async def _wait(
        self,
        attempt: Attempt,
        entry_id: int,
        state: str,
        fields: dict[str, Any],
        tmp: Path,
    ) -> Outcome:
        """Until the entry is done: its outcome. Reports TaskStarted once a worker holds it.

        What notifications say (state and worker) is usually all there is to know; the queue
        is asked only when woken without news (a poll, a reconnection, a timeout) and for
        the result itself.
        """
        wake = self.watcher.watch(entry_id)
        heard: tuple[str, str] | None = (state, "")  # what enqueueing found
        started = False
        told: list[tuple[float | None, float | None]] = []  # the provider-batch wait reported
        while True:
            entry: Entry | None = None
            if (
                heard is None
                or heard[0] in PARKING
                or (heard[0] == "claimed" and not heard[1] and not started)
            ):
                entry = await _patiently(self.queue.get, entry_id)
                heard = (entry.state, entry.worker or "")
            state, worker = heard
            if state == "done":
                entry, outcome = await self._result(entry_id, tmp)
                if not started:
                    self._started(attempt, entry.worker or "")
                self._parked(attempt, entry, told)  # its end, if unheard
                return outcome
            if state == "claimed" and not started:
                started = True
                self._started(attempt, worker)
            elif state == "queued" and entry_id in self._unannounced:
                await asyncio.to_thread(self._announce, entry_id)
            elif state == "cancelled":
                # Withdrawn by an orchestrator that let go of the run: we want it again.
                _, again = await _patiently(self._enqueue, fields)
                heard = (again, "")
                continue
            if entry is not None and started:
                self._parked(attempt, entry, told)
            wake.clear()
            heard = self.watcher.take(entry_id)
            if heard is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.poll)
                heard = self.watcher.take(entry_id)

    def _started(self, attempt: Attempt, by: str) -> None:
        task_id, number = attempt.task_id, attempt.attempt
        self._begun.add((attempt.run_id, task_id, number))
        event = ev.TaskStarted(at=attempt.clock(), task_id=task_id, attempt=number, worker=by)
        attempt.report(Report(event=event))

    def _parked(
        self, attempt: Attempt, entry: Entry, told: list[tuple[float | None, float | None]]
    ) -> None:
        """Record in the run's history that the entry's model call went into a provider
        batch, or came back, as its worker wrote on the entry (`TaskQueue.park`): the
        attempt's timeout stops meanwhile, for whichever orchestrator drives the run.

        The entry holds the last wait only, by the database's clock; `told` what this
        waiter reported of it. A wait that began and ended before this orchestrator drove
        the run and that the history counts already (`batch_waited`) is not counted again;
        the engine drops a report that changes nothing (`accept_batch_wait`)."""
        seen = (entry.parked_at, entry.unparked_at)
        if entry.parked_at is None or (told and told[-1] == seen):
            return
        first = not told
        told[:] = [seen]
        task_id, number = attempt.task_id, attempt.attempt
        task = attempt.current()
        if task is None:
            return
        back = entry.unparked_at
        waits = []
        if not (first and back is not None and task.batch_since is None and task.batch_waited):
            waits.append((entry.parked_at, True))
        if back is not None:
            waits.append((max(back, entry.parked_at), False))
        for at, waiting in waits:
            event = ev.TaskBatchWaited(at=at, task_id=task_id, attempt=number, waiting=waiting)
            attempt.report(Report(event=event))

    async def _result(self, entry_id: int, tmp: Path) -> tuple[Entry, Outcome]:
        """The done entry and its outcome. The results of the entries found done together
        (one burst of notifications) are fetched together: one thread hop, one query."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Entry, Outcome]] = loop.create_future()
        self._done.append((entry_id, tmp, future))
        if self._fetcher is None or self._fetcher.done():
            self._fetcher = loop.create_task(self._fetch(), name="interlock-results")
        return await future

    async def _fetch(self) -> None:
        while self._done:
            await asyncio.sleep(0)  # let the other waiters woken by this burst join
            batch, self._done = self._done, []
            try:
                items = [(entry_id, tmp) for entry_id, tmp, _ in batch]
                results = await asyncio.to_thread(self._outcomes, items)
            except StorageUnavailable:  # the results are in the queue: fetched once it answers
                self._done = batch + self._done
                await asyncio.sleep(OUTAGE_PAUSE)
                continue
            except Exception as exc:
                results = [exc] * len(batch)
            _answer([item[-1] for item in batch], results)

    def _outcomes(self, items: list[tuple[int, Path]]) -> list[tuple[Entry, Outcome] | Exception]:
        """The outcomes of done entries; one whose output cannot be had fails alone."""
        artifacts = self.artifacts
        if isinstance(artifacts, PostgresArtifacts) and artifacts.store is self.queue.store:
            found = self.queue.finished_many([entry_id for entry_id, _ in items])
        else:
            found = {}
        results: list[tuple[Entry, Outcome] | Exception] = []
        for entry_id, tmp in items:
            try:
                if entry_id in found:
                    results.append(self._outcome(entry_id, tmp, *found[entry_id]))
                else:
                    results.append(self._outcome(entry_id, tmp, self.queue.get(entry_id), None))
            except StorageUnavailable:  # the whole batch waits for the database
                raise
            except Exception as exc:
                results.append(exc)
        return results

    def _outcome(
        self, entry_id: int, tmp: Path, entry: Entry, data: bytes | None
    ) -> tuple[Entry, Outcome]:
        """The done entry and its outcome (a small output in memory, a large one at `tmp`);
        `data` is its output's body when it came with the entry."""
        result = entry.result or {"ok": False, "error": "the worker recorded no result"}
        run_dir = tmp.parent.parent
        if "records" in result:  # its prompt, a command's logs: beside the run's others
            for problem in keep_records(run_dir, result["records"]):
                log.warning("attempt %s: a record was not kept: %s", tmp.stem, problem)
        if "journals" in result:  # the task's next attempt goes on from them
            task_id = tmp.name.rsplit(".", 2)[0]
            for problem in keep_journals(run_dir, task_id, result["journals"]):
                log.warning("attempt %s: a journal was not kept: %s", tmp.stem, problem)
        body = None
        if result.get("ok") and entry.output_sha:
            if data is None:
                data = self.artifacts.get(entry.output_sha)
            if len(data) <= files.INLINE_LIMIT:
                body = data  # recorded with the completion, written after it
            else:
                files.write_atomic(tmp, data)  # fsynced, as workers do
        outcome = Outcome(
            body=body,
            ok=bool(result.get("ok")),
            error=str(result.get("error", "")),
            retryable=bool(result.get("retryable", True)),
            retry_after=_seconds(result.get("retry_after")),
            timed_out=bool(result.get("timed_out", False)),
            usage=result.get("usage"),
            extra={"approval": result["approval"]} if result.get("approval") else {},
        )
        return entry, outcome

    def _materialise(self, attempt: Attempt) -> None:
        """Outputs committed by an orchestrator on another machine: fetch the ones missing
        here, so this run directory has every file the next attempts read."""
        for artifact, sha256 in attempt.outputs():
            if not (attempt.run_dir / artifact).exists():
                with contextlib.suppress(KeyError):
                    files.write_atomic(attempt.run_dir / artifact, self.artifacts.get(sha256))


def _seconds(value: Any) -> float | None:
    """A wait from a worker's result (None when absent or not a number)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


async def _patiently(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` in a thread, tried again while the database does not answer (the store
    reports the outage): an attempt waits for the queue, it does not fail with it."""
    while True:
        try:
            return await asyncio.to_thread(call, *args)
        except StorageUnavailable:
            await asyncio.sleep(OUTAGE_PAUSE)


def _answer(futures: list[asyncio.Future[Any]], results: list[Any]) -> None:
    """Give each waiter of a batch its result, or its error (an `Exception` in `results`);
    a waiter cancelled meanwhile gets nothing."""
    for future, result in zip(futures, results, strict=True):
        if future.done():
            continue
        if isinstance(result, Exception):
            future.set_exception(result)
        else:
            future.set_result(result)
