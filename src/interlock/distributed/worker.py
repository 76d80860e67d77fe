"""`interlock worker`: a process that claims queued attempts and runs them.

For each hand-out the worker asks the ledger whether the attempt is still the task's current
one before running it (one that is not is finished as stale, unrun). While it runs, a
heartbeat renews the hand-out; if the hand-out was lost (it expired and went to another
worker, or the run cancelled it) the execution is stopped and nothing is recorded. A result
is recorded only for the current hand-out (`delivery` fences it), and an orchestrator takes
only the result of the attempt it waits for: one superseded while it ran is dropped there.
A hand-out that expired while the worker could not reach the database (an outage longer than
the lease) is still its own until another worker claims it: its next heartbeat or its result
takes it back, so the attempt does not run twice.

A model call waiting in a provider batch (`batch: true`) holds no slot: the worker records the
wait on the hand-out (`TaskQueue.park`, which the orchestrator driving the run reads to stop
the attempt's timeout) and claims another attempt in its place, whose call may gather into the
same batch. When the answer comes the call takes its slot back at once, even if that puts the
worker over its count for a moment (it claims nothing more until it is under again): an
answered call is never held back or dropped. Its lease is renewed meanwhile, with every other
hand-out the worker holds, by one statement every third of the lease.

On SIGTERM a worker stops claiming, lets running attempts finish for up to `grace` seconds,
hands the rest back to the queue, and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from interlock.core.state import RunState, apply, fold
from interlock.distributed.artifacts import PostgresArtifacts
from interlock.distributed.listen import Listener
from interlock.distributed.payload import RECORD_FOLDERS, RECORD_LIMIT, read_journals, to_spec
from interlock.distributed.queue import CHANNEL, Claim, Finished, TaskQueue
from interlock.distributed.sources import ClaimSource, QueueSource
from interlock.errors import StorageUnavailable
from interlock.providers import aclose_providers
from interlock.providers.batch_waits import batch_parking
from interlock.runtime import collector
from interlock.runtime.execution import Executor, LocalExecutor, going_on
from interlock.runtime.executors import Outcome, TaskSpec
from interlock.runtime.models import ModelRunner
from interlock.runtime.sealed_lines import journal_appends
from interlock.storage.outage import level_for
from interlock.storage.postgres import PostgresStore

log = logging.getLogger("interlock.distributed")
KINDS = ("command", "model", "call")
STATE_CACHE = 256  # runs whose folded state a worker keeps
_UNREAD = object()  # a claim `_begin` has not looked at yet
OUTAGE_PAUSE = 1.0  # seconds between turns that try to record outcomes while the database is down


@dataclasses.dataclass
class _Ended:
    """An attempt that ran, waiting for the turn that records its outcome."""

    claim: Claim
    spec: TaskSpec
    outcome: Outcome
    work: Path
    recorded: asyncio.Future[None] = dataclasses.field(init=False)


def _finished(ended: _Ended) -> Finished:
    """What the queue records of an ended attempt: its result, and its output's body."""
    outcome, spec = ended.outcome, ended.spec
    data = None
    if outcome.ok and outcome.body is not None:
        data = outcome.body
    elif outcome.ok and spec.output.is_file():
        data = spec.output.read_bytes()
    missing = outcome.ok and data is None
    result = {
        "ok": outcome.ok and not missing,
        "error": "wrote no output" if missing else outcome.error,
        "retryable": outcome.retryable,
        "retry_after": outcome.retry_after,
        "timed_out": outcome.timed_out,
        "usage": outcome.usage,
    }
    if outcome.extra.get("approval") is not None:  # a tool call waits for a person
        result["approval"] = outcome.extra["approval"]
    records = _records(ended.work)
    if records:
        result["records"] = records
    journals = read_journals(ended.work, ended.claim.task_id)
    if journals:  # the task's next attempt, on any worker, goes on from them
        result["journals"] = journals
    return Finished(claim=ended.claim, result=result, output=data)


def _records(work: Path) -> dict[str, str]:
    """The records an attempt left in its work folder, by their path in the run's folder:
    the prompt of a model call (and its tools' transcript), a command's logs. They travel in
    the result, and the orchestrator keeps them in the run's folder as it does for an
    attempt it runs itself (a remote worker's went with its work folder). A record longer
    than `RECORD_LIMIT` keeps its end, where a failure shows."""
    found: dict[str, str] = {}
    for folder in RECORD_FOLDERS:
        try:
            entries = sorted(os.scandir(work / folder), key=lambda e: e.name)
        except OSError:  # most attempts leave neither folder
            continue
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                with open(entry.path, "rb") as file:
                    size = file.seek(0, os.SEEK_END)
                    file.seek(max(0, size - RECORD_LIMIT))
                    tail = file.read().decode("utf-8", errors="replace")
                cut = f"[the first {size - RECORD_LIMIT:,} bytes are left out]\n"
                found[f"{folder}/{entry.name}"] = (cut if size > RECORD_LIMIT else "") + tail
    return found


class RemoteWorker:
    """Claims and runs attempts, at most `concurrency` of each kind at once (`per_kind`
    gives a kind a number of its own)."""

    def __init__(
        self,
        store: PostgresStore,
        *,
        name: str,
        concurrency: int = 4,
        per_kind: Mapping[str, int] | None = None,
        kinds: tuple[str, ...] = KINDS,
        tags: tuple[str, ...] = (),
        lease_ttl: float = 15.0,
        poll: float = 2.0,
        grace: float = 30.0,
        workdir: Path | None = None,
        models: ModelRunner | None = None,
        source: ClaimSource | None = None,
        gc_young: int | None = collector.YOUNG,
    ) -> None:
        self.store = store
        self.queue = TaskQueue(store)
        self.artifacts = PostgresArtifacts(store)
        self.name = name
        self.kinds, self.tags = kinds, tags
        self.slots = {kind: (per_kind or {}).get(kind, concurrency) for kind in kinds}
        self.concurrency = sum(self.slots.values())
        self.lease_ttl, self.poll, self.grace = lease_ttl, poll, grace
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="interlock-worker-"))
        self.models = models or ModelRunner()
        self.executor: Executor = LocalExecutor(self.models)
        self.gc_young = gc_young  # see `runtime/collector.py`
        self.source = source or QueueSource(self.queue)
        self.running: dict[int, asyncio.Task[None]] = {}
        self._busy: Counter[str] = Counter()  # attempts in `running`, by kind, not parked
        # Attempts whose model call waits in a provider batch: their slots are free meanwhile.
        self._parked: set[int] = set()
        # Hand-outs renewed by the next heartbeat (held past a third of their lease), and the
        # task sending the heartbeats.
        self._beating: dict[int, tuple[Claim, asyncio.Task[Outcome], asyncio.Event]] = {}
        self._beater: asyncio.Task[None] | None = None
        # Slots promised to claim requests under way (not yet in `running`), by kind.
        self._reserved: Counter[str] = Counter()
        # Whether a finished attempt's statement also claims the next ones (the queue table
        # is the source; a stream hands out one message at a time instead).
        self.claim_on_finish = isinstance(self.source, QueueSource)
        self._stop: asyncio.Event | None = None
        self.finished = 0
        # Folded runs (last seq read, state), least recently used first.
        self._states: dict[str, tuple[int, RunState]] = {}
        self._states_lock = threading.Lock()
        # Attempts that ran, waiting for the next turn, and the task taking turns.
        self._ended: list[_Ended] = []
        self._turns: asyncio.Task[None] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run until `stop` is set, then shut down gracefully."""
        with collector.roomy_collector(self.gc_young):
            await self._serve(stop)

    async def _serve(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def notified(channel: str, payload: str) -> None:
            # A burst of queued entries wakes the loop once: it claims what it can take.
            if (not channel or payload.endswith(":queued")) and not wake.is_set():
                loop.call_soon_threadsafe(wake.set)

        listener = Listener(self.store.url, [CHANNEL], notified).start()
        self._stop = stop
        last_sweep = 0.0
        try:
            while not stop.is_set():
                # Cleared before claiming: news arriving meanwhile sets it for another round.
                wake.clear()
                if time.monotonic() - last_sweep > self.lease_ttl / 3:
                    last_sweep = time.monotonic()
                    await self._quietly(asyncio.to_thread(self.queue.sweep))
                while self.free() > 0 and not stop.is_set():
                    wanted = self.free_by_kind()
                    self._reserved.update(wanted)
                    try:
                        claims = await self._quietly(self.source.next(self, wanted))
                    finally:
                        self._reserved.subtract(wanted)
                    self._spawn(claims or (), wake)
                    if not claims:
                        break  # nothing more to take now
                waits = [loop.create_task(wake.wait()), loop.create_task(stop.wait())]
                await asyncio.wait(waits, timeout=self.poll, return_when=asyncio.FIRST_COMPLETED)
                for waiting in waits:
                    waiting.cancel()
        finally:
            await self._drain()
            if self._beater is not None:
                self._beater.cancel()
                await asyncio.gather(self._beater, return_exceptions=True)
            listener.stop()
            await aclose_providers()  # the model clients belong to this event loop

    def free(self) -> int:
        """Slots neither running an attempt nor promised to a claim under way."""
        return sum(self.free_by_kind().values())

    def free_by_kind(self) -> dict[str, int]:
        """`free`, kind by kind (those with none left out)."""
        free = {k: n - self._busy[k] - self._reserved[k] for k, n in self.slots.items()}
        return {kind: count for kind, count in free.items() if count > 0}

    def known(self) -> dict[str, int]:
        """The last seq read of each run whose folded state this worker keeps: a claim
        brings what the ledger recorded after it (`TaskQueue.finish_claim`)."""
        with self._states_lock:
            return {run_id: seq for run_id, (seq, _) in self._states.items()}

    def _spawn(
        self,
        claims: Any,
        wake: asyncio.Event,
        begun: dict[int, TaskSpec | Exception | None] | None = None,
    ) -> None:
        """Run `claims`; `begun` holds what `_begin` made of those it saw already."""
        loop = asyncio.get_running_loop()
        for claim in claims:
            ready = _UNREAD if begun is None else begun.get(claim.id, _UNREAD)
            task = loop.create_task(self._handle(claim, wake, ready), name=claim.task_id)
            self.running[claim.id] = task
            self._busy[claim.kind] += 1

    def _forget(self, claim: Claim) -> None:
        """`claim`'s slot is free again (a parked attempt's was already)."""
        if self.running.pop(claim.id, None) is not None:
            if claim.id in self._parked:
                self._parked.discard(claim.id)
            else:
                self._busy[claim.kind] -= 1

    async def _quietly(self, awaitable: Any) -> Any:
        """Storage trouble (a dropped connection) is logged and retried on the next round."""
        try:
            return await awaitable
        except Exception as exc:
            log.log(level_for(exc), "queue unavailable: %s", exc)  # an outage: said once
            await asyncio.sleep(min(self.poll, 1.0))
            return None

    async def _drain(self) -> None:
        if not self.running:
            return
        log.info("stopping: waiting up to %gs for %d task(s)", self.grace, len(self.running))
        _, pending = await asyncio.wait(list(self.running.values()), timeout=self.grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _current(self, claim: Claim) -> bool:
        """Whether the ledger still wants this attempt of the task.

        The worker keeps the folded state of the runs it recently served and reads only the
        events appended since, so asking costs the news, not the whole history.
        """
        with self._states_lock:
            seq, state = self._states.pop(claim.run_id, (0, None))
            news = claim.news
            if news is not None and (
                seq >= claim.news_since if state is not None else claim.news_since == 0
            ):
                # The claim brought what was recorded after `news_since`: what is newer
                # than what this worker folded is all there is to read.
                stored = [item for item in news if item.seq > seq]
            else:
                stored = self.store.events(claim.run_id, since=seq)
            if state is None:
                state = fold([s.event for s in stored])
            else:
                for item in stored:
                    apply(state, item.event)
            self._states[claim.run_id] = (stored[-1].seq if stored else seq, state)
            while len(self._states) > STATE_CACHE:  # the least recently used goes
                del self._states[next(iter(self._states))]
        task = state.tasks.get(claim.task_id)
        return (
            not state.status.ended
            and task is not None
            and task.attempt == claim.attempt
            and task.status.in_flight
        )

    async def _handle(self, claim: Claim, wake: asyncio.Event, ready: Any = None) -> None:
        work = self._work(claim)
        lost = asyncio.Event()
        try:
            if ready is _UNREAD:
                ready = await asyncio.to_thread(self._begin, claim, work)
            if isinstance(ready, Exception):
                raise ready
            spec: TaskSpec | None = ready
            if spec is None:
                return
            # The journals an attempt appends to are kept in its entry as they grow: if this
            # worker dies, the next hand-out replays the calls already answered. The
            # execution's context (copied as it is created) lets its model call park.
            journals = journal_appends.set(self._journal_keeper(claim, work))
            parking = batch_parking.set(lambda: self._parking(claim, wake))
            try:
                execution = asyncio.create_task(self._execute(spec))
            finally:
                batch_parking.reset(parking)
                journal_appends.reset(journals)
            # Heartbeats begin a third of the lease in: most attempts end before, and then
            # cost a timer, not a statement.

            def first_beat() -> None:
                if not execution.done():
                    self._beating[claim.id] = (claim, execution, lost)
                    if self._beater is None or self._beater.done():
                        self._beater = asyncio.create_task(self._heartbeats())

            timer = asyncio.get_running_loop().call_later(self.lease_ttl / 3, first_beat)
            try:
                outcome = await execution
            except asyncio.CancelledError:
                if not lost.is_set():
                    raise
                log.warning("task %s: hand-out lost; result dropped", claim.task_id)
                return
            finally:
                timer.cancel()
                self._beating.pop(claim.id, None)
            await self._recorded(_Ended(claim, spec, outcome, work), wake)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self.queue.hand_back(claim)
            raise
        except Exception as exc:
            log.exception("task %s: worker error", claim.task_id)
            result = {"ok": False, "error": f"worker error: {type(exc).__name__}: {exc}"}
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.queue.finish, claim, result, None)
        finally:
            if os.path.lexists(work):  # left by a failure (`_end` clears it otherwise)
                await asyncio.to_thread(shutil.rmtree, work, ignore_errors=True)
            self._forget(claim)
            with contextlib.suppress(Exception):
                await self.source.done(claim)
            wake.set()

    def _journal_keeper(self, claim: Claim, work: Path) -> Callable[[Path], None]:
        """What `journal_appends` tells for `claim`: the task's journals, as they are now,
        go into its queue entry. An append on the event loop (model calls are made there,
        for plain functions too) has it done by a task of its own, the appends made
        meanwhile in one statement; one in another thread waits there for it."""
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        again = False
        keeping: asyncio.Task[None] | None = None

        def keep() -> None:
            journals = read_journals(work, claim.task_id)
            try:
                if not self.queue.keep_journals(claim, journals, self.name):
                    log.debug("task %s: hand-out ended; journals not kept", claim.task_id)
            except Exception as exc:  # the result carries them too, when it comes
                log.log(level_for(exc), "task %s: journals not kept: %s", claim.task_id, exc)

        async def keep_all() -> None:
            nonlocal again, keeping
            while again:
                again = False
                await asyncio.to_thread(keep)
            keeping = None

        def appended(path: Path) -> None:
            nonlocal again, keeping
            if threading.get_ident() != loop_thread:
                keep()
                return
            again = True
            if keeping is None:
                keeping = loop.create_task(keep_all())

        return appended

    async def _recorded(self, ended: _Ended, wake: asyncio.Event) -> None:
        """Record an attempt's outcome in the worker's next turn, and return once it is.

        A turn is one statement: the outcomes of every attempt that ended since the last
        turn, and the claims of the next attempts for the slots they free. While a turn's
        statement is on its way, attempts ending meanwhile wait for the next one and go in
        it together: under load a turn records several outcomes for one round trip, one
        commit and one thread hop, and an idle worker's outcome waits for nothing."""
        ended.recorded = asyncio.get_running_loop().create_future()
        self._ended.append(ended)
        if self._turns is None or self._turns.done():
            self._turns = asyncio.create_task(self._take_turns(wake))
        await ended.recorded

    async def _take_turns(self, wake: asyncio.Event) -> None:
        while self._ended:
            batch, self._ended = self._ended, []
            stop = self._stop
            take: Counter[str] = Counter()
            extra: dict[str, int] = {}
            if self.claim_on_finish and not (stop is not None and stop.is_set()):
                extra = self.free_by_kind()
                take.update(extra)
                for kind, count in Counter(ended.claim.kind for ended in batch).items():
                    # Their own slots too, but for those the worker is over its count by
                    # (calls that took theirs back from provider batches).
                    busy = self._busy[kind] + self._reserved[kind]
                    take[kind] += max(0, count - max(0, busy - self.slots.get(kind, 0)))
            self._reserved.update(extra)
            try:
                claims, begun = await asyncio.to_thread(self._end, batch, take, list(self.running))
            except StorageUnavailable:
                # The database is down (the store says so once, and again when it is back).
                # The outcomes wait here for a turn that reaches it: a hand-out that expired
                # meanwhile is still this worker's unless another worker took it, so a paid
                # result is not thrown away for an outage.
                self._ended = [e for e in batch if not e.recorded.done()] + self._ended
                await asyncio.sleep(OUTAGE_PAUSE)
                continue
            except BaseException as exc:  # each attempt's handler reports it
                for ended in batch:
                    if not ended.recorded.done():
                        ended.recorded.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            finally:
                self._reserved.subtract(extra)
            for ended in batch:  # before the new ones: their slots include these
                self._forget(ended.claim)
            self._spawn(claims, wake, begun)
            for ended in batch:
                if not ended.recorded.done():
                    ended.recorded.set_result(None)

    # The ledger check and the queue writes around attempts, each side in one thread hop.

    def _begin(self, claim: Claim, work: Path) -> TaskSpec | None:
        """The attempt's spec with its inputs in place, or None (finished as stale) when the
        ledger no longer wants it."""
        if not self._current(claim):
            self._finish_stale(claim)
            return None
        return to_spec(claim.payload, work, self.artifacts)

    def _end(
        self, batch: list[_Ended], take: Mapping[str, int], holding: list[int]
    ) -> tuple[list[Claim], dict[int, TaskSpec | Exception | None]]:
        """Record the outcomes of `batch`, clear their work folders, and claim up to
        `take[kind]` next attempts of each kind in the same statement (none when empty),
        begun in this thread hop as well: (claims, what `_begin` made of each, or the error
        it raised)."""
        claims = self._finish(batch, take, holding)
        for ended in batch:
            if os.path.lexists(ended.work):  # most attempts read no files and leave no folder
                shutil.rmtree(ended.work, ignore_errors=True)
        begun: dict[int, TaskSpec | Exception | None] = {}
        for new in claims:
            try:
                begun[new.id] = self._begin(new, self._work(new))
            except Exception as exc:  # the claim's own handler reports it
                begun[new.id] = exc
        return claims, begun

    def _work(self, claim: Claim) -> Path:
        """The private folder of one hand-out."""
        return self.workdir / f"{claim.id}.{claim.delivery}"

    async def _execute(self, spec: TaskSpec) -> Outcome:
        def progress(text: str) -> None:
            self.source.progress(spec.run_id, spec.task_id, text)

        # Stopped mid-answer, the hand-out is lost or handed back: its cost goes unrecorded
        # here, like any work of a cancelled hand-out.
        return going_on(await self.executor.run(spec, progress))

    async def _heartbeats(self) -> None:
        """Every third of the lease, renew the hand-outs held past a third of theirs, all in
        one statement (a worker whose calls wait in provider batches may hold thousands);
        stop the execution of each one found lost."""
        while self._beating:
            beating = list(self._beating.values())
            try:
                held = await asyncio.to_thread(
                    self.queue.heartbeat_many, [c for c, _, _ in beating], self.lease_ttl, self.name
                )
            except Exception as exc:  # keep running; the next beat may get through
                log.log(level_for(exc), "heartbeat failed: %s", exc)
                held = None
            for claim, execution, lost in beating:
                if held is None or claim.id in held or execution.done():
                    continue  # an attempt that ended meanwhile is no longer renewed
                if self._beating.pop(claim.id, None) is not None:
                    lost.set()
                    execution.cancel()
            await asyncio.sleep(self.lease_ttl / 3)

    @contextlib.asynccontextmanager
    async def _parking(self, claim: Claim, wake: asyncio.Event) -> AsyncIterator[None]:
        """While the attempt's model call waits in a provider batch: its slot is free for
        another claim, and its hand-out says so (the orchestrator stops its timeout)."""
        self._parked.add(claim.id)
        self._busy[claim.kind] -= 1
        wake.set()  # the claiming loop takes another attempt in its place
        stopped = False
        try:
            await self._park(claim, parked=True)
            with contextlib.suppress(Exception):  # a stream's message: delivered, for all
                await self.source.parked(claim)  # that a long wait could ask of it
            yield
        except asyncio.CancelledError:
            # Stopped (the worker shutting down, the hand-out lost): the call stays in its
            # batch, and the wait stays on the hand-out for whoever takes it next.
            stopped = True
            raise
        finally:
            if claim.id in self._parked:  # its slot back, over the count if need be
                self._parked.discard(claim.id)
                self._busy[claim.kind] += 1
            if not stopped:
                await self._park(claim, parked=False)

    async def _park(self, claim: Claim, *, parked: bool) -> None:
        """Write the wait (or its end) on the hand-out. Not written (the database away, the
        hand-out lost) it is only not seen: the call waits, and its result counts, as ever."""
        try:
            await asyncio.to_thread(self.queue.park, claim, self.name, parked=parked)
        except Exception as exc:
            log.log(level_for(exc), "task %s: batch wait not recorded: %s", claim.task_id, exc)

    def _finish(
        self, batch: list[_Ended], take: Mapping[str, int], holding: list[int]
    ) -> list[Claim]:
        # The outputs become artifacts of the queue's database in the same statement, which
        # also claims what this worker takes next: one round trip for all.
        finished = [_finished(ended) for ended in batch]
        turn = self.queue.finish_claim(
            self.name,
            finished,
            kinds=self.kinds,
            tags=self.tags,
            ttl=self.lease_ttl,
            per_kind=take,
            known=self.known() if any(take.values()) else None,
            holding=holding,
        )
        for item in finished:  # a later task of the run may read it here: no round trip
            if item.output is not None:
                self.artifacts.recent.keep(item.output)
        for ended in batch:
            if ended.claim.id in turn.recorded:
                self.finished += 1
            else:
                log.warning(
                    "task %s: result dropped, the hand-out was superseded", ended.claim.task_id
                )
        return turn.claims

    def _finish_stale(self, claim: Claim) -> None:
        error = "stale: the ledger no longer wants this attempt"
        self.queue.finish(
            claim, {"ok": False, "error": error, "stale": True}, None, worker=self.name
        )
