"""The reconcile loop: the single writer of every run it holds the lease of.

Each tick, for every run that has something new (a worker report, a command, a timer):
observe, fold, decide, then append all runs' events in one transaction (group commit), and
only then act (dispatch, deliver, archive). Nothing is started before it is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import next_wake, waits_for_slot
from interlock.core.inputs import check_topic
from interlock.core.loader import Definition
from interlock.core.observe import CommandKind
from interlock.core.state import RunState, RunStatus, TaskState, fold
from interlock.engine.effects import Effect
from interlock.errors import (
    DamagedHistory,
    DiskFull,
    InterlockError,
    LeaseHeld,
    LeaseLost,
    RunInert,
    StorageError,
)
from interlock.runtime import apply, artifacts, collector
from interlock.runtime.attempts import attempt_of
from interlock.runtime.budget_reserve import call_reserve
from interlock.runtime.child_runs import ChildRuns
from interlock.runtime.diskfull import DiskFullBackoff, is_enospc, stop_message
from interlock.runtime.dispatch import Dispatcher, LocalDispatcher
from interlock.runtime.driver import RunDriver
from interlock.runtime.ended_syncs import EndedSyncs
from interlock.runtime.execution import LocalExecutor
from interlock.runtime.faults import crash_point
from interlock.runtime.home import Home
from interlock.runtime.leases import LeaseKeeper
from interlock.runtime.models import ModelRunner
from interlock.runtime.new_runs import (
    drop_empty,
    make_dir,
    model_warnings,
    new_run_id,
    recorded_source,
    refuse_broken_config,
    refuse_existing,
    refuse_start_times,
    resolve_inputs,
)
from interlock.runtime.processes import begun_attempts, reap
from interlock.runtime.processes import holder_is_dead as holder_is_dead
from interlock.runtime.reports import Report
from interlock.runtime.reuse import Reuser, SourceRun, WorkerMemo
from interlock.runtime.runfiles import status_writer
from interlock.runtime.slots import awaiting, slot_key, slot_poll, take_slot
from interlock.runtime.superseded import mark_superseded
from interlock.runtime.task_slots import TaskSlots
from interlock.runtime.wakeup import Wakeup
from interlock.storage.base import (
    AppendBatch,
    Lease,
    NewEvent,
    RunRecord,
    RunRegistration,
    RunSummary,
    Store,
    StoredEvent,
    fold_history,
)
from interlock.storage.outage import level_for

log = logging.getLogger("interlock.runtime")

EventListener = Callable[[str, int, NewEvent, RunState], None]
ProgressListener = Callable[[str, str, str], None]  # run id, task id, text fragment


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How the loop behaves; the defaults suit one machine."""

    lease_ttl: float = 15.0  # seconds another orchestrator waits after this one dies
    heartbeat: float = 0.5  # how often commands and the clock are looked at
    max_concurrency: int = 16  # tasks running at once in this process
    write_status: bool = True  # keep status.json current
    status_interval: float = 1.0  # seconds between status.json refreshes of a running run
    disk_full_wait: float = 10.0  # seconds to wait for space before stopping (exit 5)
    # A loop that has not turned for this long is hung, not busy: its leases are let go.
    stall_limit: float = 300.0
    # Hand back a run that waits for a slot of its concurrency key (a fleet's runs): it then
    # holds none of this process's capacity, and is taken again once its key has room.
    let_slot_waiters_go: bool = False
    # The garbage collector's young-generation threshold while the loop runs (None: leave
    # the collector as the process has it); see `runtime/collector.py`.
    gc_young: int | None = collector.YOUNG


ENDED_STATUSES = ("delivered", "failed", "cancelled")
STATUS_REFRESHES = 100  # status.json refreshes per second across all running runs, at most


def new_owner() -> str:
    """This process's identity in leases: host, pid and a nonce."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Orchestrator:
    """Drives runs: records decisions, then acts on them."""

    def __init__(
        self,
        store: Store,
        home: Home,
        *,
        models: ModelRunner | None = None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        dispatcher: Dispatcher | None = None,
        cost_timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.store = store
        self.home = home
        self.models = models or ModelRunner(home.root)
        self.settings = settings or Settings()
        self.clock = clock
        # Measures what a status.json rewrite costs, which spaces the rewrites of a wide run
        # (and so when the loop wakes): a simulation passes its own clock, so that the
        # machine's speed or load never reaches a simulated history.
        self.cost_timer = cost_timer
        # The applier keeps the clocks the orchestrator was built with (`_ports`): `clock`
        # and `cost_timer` may be swapped afterwards for the loop alone (benchmarks do).
        self._applier_clocks = (clock, cost_timer)
        self.owner = owner or new_owner()
        self.drivers: dict[str, RunDriver] = {}
        # Imported runs found inert (`RunImported`), with the last seq seen: not taken up
        # again until their history changes (a person trusted one, or cancelled it).
        self.inert: dict[str, int] = {}
        self.listeners: list[EventListener] = []
        self.progress_listeners: list[ProgressListener] = []
        # Told the seconds each tick took, when set (a server's tick histogram).
        self.on_tick: Callable[[float], None] | None = None
        self._definitions: dict[str, Definition] = {}
        self.dispatcher: Dispatcher = dispatcher or LocalDispatcher(
            self.settings.max_concurrency, LocalExecutor(self.models)
        )
        self._wake: Wakeup | None = None  # the loop's sleep, while a loop runs
        self._dirty: set[str] = set()  # runs with something new since their last tick
        self._lazy: set[str] = set()  # runs with only task starts to record
        self._timers: list[tuple[float, str]] = []  # (when, run id): engine deadlines
        self._wake_at: dict[str, float] = {}
        self._next_housekeeping = 0.0  # commands and leases are looked at every heartbeat
        self._warnings: dict[str, list[str]] = {}
        # Fingerprint parts of workers, shared by the runs of one definition and folder.
        self._worker_memos: dict[tuple[str, Path | None], WorkerMemo] = {}
        self._slot_waiters: set[str] = set()  # runs asking for a slot of their key
        self.task_slots = TaskSlots(store)  # slots of workers' concurrency keys
        self._releases: list[Lease] = []  # ended runs' leases, released in batches
        self._releases_since = 0.0  # when the oldest of them was set aside
        self._full = DiskFullBackoff(self.settings.disk_full_wait)
        ttl = self.settings.lease_ttl
        self.leases: LeaseKeeper[RunDriver] = LeaseKeeper(
            store,
            self.drivers,
            ttl=ttl,
            interval=min(self.settings.heartbeat, ttl / 6),
            clock=clock,
            on_lost=self._lease_gone,
            stall_limit=self.settings.stall_limit,
        )
        self._gone: list[tuple[RunDriver, Exception]] = []  # from the keeper's thread
        self.children = ChildRuns(
            store=store,
            home=home,
            clock=clock,
            lease_ttl=ttl,
            heartbeat=self.settings.heartbeat,
            owner=self.owner,
            models=self.models,
            drivers=self.drivers,
            take=self.take,
            create_runs=self.create_runs,
            report=self.report,
            touch=self.touch,
            mark=self._mark,
            look_now=self.look_now,
            host=self.dispatcher,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self.syncs = EndedSyncs(
            clock=clock,
            heartbeat=self.settings.heartbeat,
            loop=lambda: self._loop if self._wake is not None else None,
            current=lambda driver: self.drivers.get(driver.run_id) is driver,
            mark=self._mark,
            wake_at=self.wake_at,
            wake=self.wake,
        )

    # -- taking runs ----------------------------------------------------------------------

    def create_run(
        self,
        definition: Definition,
        *,
        topic: str,
        inputs: dict[str, Any] | None = None,
        run_id: str | None = None,
        rerun_of: str | None = None,
        rerun_from: str | None = None,
        no_cache: bool = False,
        files: bool = True,
    ) -> str:
        """Record a new run (pinned to `definition`), holding its lease; returns its id.

        The run, its first decisions (its first phase's dispatches) and its lease are written
        in one transaction: a run exists only with a history. A rerun names its source run
        (whose outputs it may carry over) and the phase from which everything runs again;
        `no_cache` keeps the run from reusing outputs of other runs through the cache.
        Without `files`, the run gets no directory or status.json here: it is recorded for
        whoever takes it (see `Interlock.submit`), who makes its own.
        """
        origin = {"rerun_of": rerun_of, "rerun_from": rerun_from, "no_cache": no_cache}
        specs = [(definition, topic, inputs, run_id)]
        return self.create_runs(specs, origin=origin, files=files)[0]

    def create_runs(
        self,
        specs: list[tuple[Definition, str, dict[str, Any] | None, str | None]],
        *,
        origin: dict[str, Any] | None = None,
        files: bool = True,
    ) -> list[str]:
        """Create many runs in one transaction: (definition, topic, inputs, run id or None);
        `origin` holds further fields of their `run_created` (a rerun's source, --no-cache);
        `files` as in `create_run`."""
        with collector.roomy_collector(self.settings.gc_young):  # a burst of objects
            return self._create_runs(specs, origin, files)

    def _create_runs(
        self,
        specs: list[tuple[Definition, str, dict[str, Any] | None, str | None]],
        origin: dict[str, Any] | None,
        files: bool,
    ) -> list[str]:
        now = self.clock()
        prepared = []
        for definition, topic, inputs, run_id in specs:
            if run_id is not None:
                refuse_existing(self.store, run_id)
                if files:
                    self.home.refuse_taken(run_id)
            check_topic(definition.name, topic)
            given = resolve_inputs(definition, inputs or {})
            slot_key(definition, topic, given)  # a key that cannot be computed refuses the run
            refuse_start_times(definition, topic, given)
            run_id = run_id or new_run_id(definition.name, now)
            prepared.append(self._prepare(definition, topic, given, run_id, now, origin, files))
        try:
            results = self.store.append_many([batch for _, _, batch in prepared], now)
        except DiskFull as exc:
            drop_empty([driver.run_dir for driver, _, _ in prepared])
            raise DiskFull(f"{exc.message}: the run was not recorded; start it again") from None
        except BaseException:  # a locked or damaged ledger: no run, so no folder either
            drop_empty([driver.run_dir for driver, _, _ in prepared])
            raise
        for (driver, new, _), result in zip(prepared, results, strict=True):
            if isinstance(result, Exception):
                drop_empty([driver.run_dir])
                raise result
            self.drivers[driver.run_id] = driver
            if self.settings.write_status and files:
                # status.json exists once the run is recorded
                driver.refresh_status()
            self._emit(driver, 1, new)
            self._mark(driver)  # acted on (tasks started) by the loop
        if self.settings.write_status and files:
            status_writer().flush()
        return [driver.run_id for driver, _, _ in prepared]

    def _prepare(
        self,
        definition: Definition,
        topic: str,
        inputs: dict[str, Any],
        run_id: str,
        now: float,
        origin: dict[str, Any] | None = None,
        files: bool = True,
    ) -> tuple[RunDriver, list[NewEvent], AppendBatch]:
        created = ev.RunCreated(
            at=now,
            run_id=run_id,
            pipeline=definition.name,
            definition_hash=definition.hash,
            topic=topic,
            inputs=inputs,
            **(origin or {}),
        )
        first = [NewEvent(event=created)]
        # A rerun or a child run may call none of its models (all carried over), or fail
        # one task on its own, and a run recorded for others (`files` off: a fleet's
        # workers have their own keys) is not run here: only a new run this process drives
        # is refused for a key that is not set.
        fresh = not origin or not (origin.get("rerun_of") or origin.get("parent_run"))
        for message in self._model_warnings(definition, refuse_missing_keys=fresh and files):
            first.append(NewEvent(event=ev.Warned(at=now, message=message)))
        lease = Lease(
            run_id=run_id, owner=self.owner, token=1, expires_at=now + self.settings.lease_ttl
        )
        driver = RunDriver(
            definition=definition,
            state=fold([n.event for n in first]),
            lease=lease,
            run_dir=self.home.live_dir(run_id),
            source=recorded_source(definition.source),
        )
        driver.checked_adoption = True  # nothing can be on disk for a run not yet created
        self._attach_reuser(driver)
        driver.machine.reserve = self._reserve(driver)
        driver.ports = self._ports(driver)
        try:
            if files:
                make_dir(driver.run_dir)
        except OSError as exc:
            if not is_enospc(exc):
                raise
            raise DiskFull(
                f"disk full: cannot make {driver.run_dir} ({exc.strerror}, ENOSPC): the run was "
                "not recorded; free space and start it again"
            ) from None
        new = first + driver.decide(now)
        registration = RunRegistration(
            run_id=run_id,
            pipeline=definition.name,
            topic=topic,
            definition_hash=definition.hash,
            definition=definition.canonical,
            source=recorded_source(definition.source),
            created_at=now,
        )
        batch = AppendBatch(
            lease=lease, events=new, summary=driver.summary(), register=registration
        )
        return driver, new, batch

    def refuse_broken_config(self, definition: Definition) -> None:
        """Raise UsageError when the interlock.toml a pipeline's model workers read does not
        load (it does not parse, or a table is invalid): every call to a model would fail,
        so a run, or a rerun that calls even one model, is refused before it is recorded."""
        refuse_broken_config(self.models, definition)

    def _model_warnings(
        self, definition: Definition, *, refuse_missing_keys: bool = True
    ) -> list[str]:
        """`new_runs.model_warnings`, once per definition hash."""
        local = isinstance(self.dispatcher, LocalDispatcher)
        return model_warnings(
            self.models,
            definition,
            local=local,
            refuse_missing_keys=refuse_missing_keys,
            known=self._warnings,
        )

    def take(self, run_id: str, *, wait: bool = False) -> RunDriver:
        """Take over an existing run: acquire its lease and fold its history."""
        now = self.clock()
        try:
            lease = self.store.acquire_lease(run_id, self.owner, self.settings.lease_ttl, now)
        except LeaseHeld:
            holder = self.store.get_run(run_id).lease_owner or ""
            if not holder_is_dead(holder):
                raise
            lease = self.store.acquire_lease(
                run_id, self.owner, self.settings.lease_ttl, now, take_over_from=holder
            )
        return self.taken(lease, self.store.get_run(run_id), self.store.events(run_id))

    def taken(self, lease: Lease, record: RunRecord, stored: list[StoredEvent]) -> RunDriver:
        """Drive a run whose lease was just acquired, given its record and its history as
        read under that lease (`take` reads them; a fleet takes several runs at once)."""
        run_id = record.run_id
        definition = self.definition(record.pipeline, record.definition_hash)
        if not stored:
            self._abandon_unstarted(record, lease, self.clock())
            stored = self.store.events(run_id)
        try:
            state = fold_history(stored)
        except DamagedHistory:
            # Nothing can be decided from a history that cannot be read: the run is left
            # to a person (the error says what to do), and its lease to the next reader.
            with contextlib.suppress(InterlockError):
                self.store.release_lease(lease)
            raise
        if state.inert and not self._cancelling(run_id):
            # Imported from a bundle: its commands are nobody's until a person says so.
            self.store.release_lease(lease)
            self.inert[run_id] = record.last_seq
            raise RunInert(inert_message(run_id, state.status.value))
        live = self.home.live_dir(run_id)
        # An archived run whose move was cut short still sits in runs/: driving it from there
        # lets `act` finish the move, instead of creating an empty archive beside it.
        archived = state.archived and not live.is_dir()
        run_dir = self.home.archive_dir(run_id) if archived else live
        driver = RunDriver(
            definition=definition, state=state, lease=lease, run_dir=run_dir, source=record.source
        )
        driver.run_dir.mkdir(parents=True, exist_ok=True)
        driver.begun = begun_attempts(driver.run_dir)  # before `reap` removes its records
        reap(driver.run_dir, run_id)  # workers a dead orchestrator left: before any restart
        self._attach_reuser(driver)
        driver.machine.reserve = self._reserve(driver)
        driver.ports = self._ports(driver)
        driver.restore_outputs(self.store)
        self.drivers[run_id] = driver
        self._mark(driver)
        if state.parent_run is not None and not state.status.ended:
            self.children.take_parent(state.parent_run, run_id)
        return driver

    def _cancelling(self, run_id: str) -> bool:
        """True when a cancellation of the run waits to be recorded (an inert run may be
        driven for that: its engine starts nothing, and the cancellation ends it)."""
        waiting = self.store.pending_commands(run_id)
        return any(c.kind == CommandKind.CANCEL.value for c in waiting)

    def _reserve(self, driver: RunDriver) -> dict[str, float] | None:
        """What the run's cost budget holds back before each model call (`budget_reserve`)."""
        return call_reserve(self.models, driver.definition, driver.workflow_dir, driver.state)

    def _attach_reuser(self, driver: RunDriver) -> None:
        """Give the run its fingerprints and, for a rerun, the source it may reuse from."""
        reuser = Reuser(
            store=self.store,
            home=self.home,
            models=self.models,
            definition=driver.definition,
            workflow_dir=driver.workflow_dir,
            memo=self._worker_memos.setdefault(
                (driver.definition.hash, driver.workflow_dir), WorkerMemo()
            ),
        )
        source = driver.state.rerun_of
        if source is not None and not driver.state.status.ended:
            reuser.source = SourceRun.load(self.store, self.home, source)
        driver.reuser = reuser

    def _ports(self, driver: RunDriver) -> apply.RunPorts:
        """What the applier calls of this orchestrator for `driver`'s run."""
        reuser = driver.reuser
        clock, cost_timer = self._applier_clocks
        return apply.RunPorts(
            run_id=driver.run_id,
            archive_dir=self.home.archive_dir(driver.run_id),
            keep_status=self.settings.write_status,
            clock=clock,
            cost_timer=cost_timer,
            status_interval=self.status_interval,
            start=functools.partial(self.start_task, driver),
            reuse=None if reuser is None else reuser.claim,
            report=functools.partial(self.report, driver),
            stop_children=functools.partial(self.children.cancel_children, driver),
            withdraw=lambda: self.dispatcher.withdraw(driver.run_id),
            touch=functools.partial(self.touch, driver),
            wake_at=lambda when: self.wake_at(when, driver),
            write_status=driver.write_status,
        )

    def _abandon_unstarted(self, record: RunRecord, lease: Lease, now: float) -> None:
        """A run registered by an older release without its first event never started:
        record that, rather than guess its inputs."""
        created = ev.RunCreated(
            at=now,
            run_id=record.run_id,
            pipeline=record.pipeline,
            definition_hash=record.definition_hash,
            topic=record.topic,
        )
        reason = "the run's creation was interrupted before it started; start it again"
        events = [NewEvent(event=created), NewEvent(event=ev.RunFailed(at=now, reason=reason))]
        summary = RunSummary(status="failed", phase=None, updated_at=now)
        self.store.append(AppendBatch(lease=lease, events=events, summary=summary), now)

    def definition(self, name: str, definition_hash: str) -> Definition:
        """A pinned definition, parsed once per process."""
        if definition_hash not in self._definitions:
            canonical = self.store.definition(definition_hash)
            self._definitions[definition_hash] = Definition.from_canonical(name, canonical)
        return self._definitions[definition_hash]

    # -- the loop ---------------------------------------------------------------------------
    #
    # Work per iteration is proportional to the runs that have something new (a report, a
    # command, a due timer), not to the runs held: with thousands of runs waiting on slow
    # workers, a report for one of them costs one run's tick.

    async def run_until_settled(self, *, stop_when_paused: bool = True) -> None:
        """Drive every taken run until each has ended (or is paused, if asked)."""
        self._loop = asyncio.get_running_loop()
        self._wake = Wakeup(self._loop)
        self._next_housekeeping = 0.0  # look at commands right away
        self.leases.start()
        try:
            with collector.roomy_collector(self.settings.gc_young):
                while self.drivers:
                    now = self.clock()
                    self.step(now, stop_when_paused=stop_when_paused)
                    if not self.drivers:
                        break
                    await self._sleep(now)
        finally:
            self.leases.stop()
            self._wake = None
            status_writer().flush()  # what the loop handed over is on disk when it returns

    async def serve_forever(self, stop: asyncio.Event) -> None:
        """Drive taken runs, including paused ones, until `stop` is set."""
        self._loop = asyncio.get_running_loop()
        self._wake = Wakeup(self._loop)
        self._next_housekeeping = 0.0
        self.leases.start()
        try:
            with collector.roomy_collector(self.settings.gc_young):
                while not stop.is_set():
                    now = self.clock()
                    self.step(now)
                    await self._sleep(now)
        finally:
            self.leases.stop()
            self._wake = None
            status_writer().flush()  # what the loop handed over is on disk when it returns

    def step(self, now: float, *, stop_when_paused: bool = False) -> None:
        """One turn of the loop at `now`, without its sleep: housekeeping that is due, the
        timers that came, one tick of the runs with something new, and the runs that are
        done let go (`stop_when_paused`: paused ones too). `run_until_settled` and
        `serve_forever` take these turns; a simulation takes them on its own clock."""
        self.leases.turned()
        if now >= self._next_housekeeping:
            self._next_housekeeping = now + self.settings.heartbeat
            self._dirty |= self._lazy
            self._lazy.clear()
            if self._releases and now - self._releases_since >= self.settings.heartbeat:
                self.flush_releases()  # no commit came along to carry them
            self._poll_commands()
            if not self.leases.running:  # driven a step at a time: no keeper thread
                self.leases.renew_due()
        while self._gone:  # leases the keeper could neither renew nor take back
            holder, error = self._gone.pop(0)
            if isinstance(error, DiskFull):
                self._full.failed(error, now, self.drivers)  # gives up well before they expire
            elif self.drivers.get(holder.run_id) is holder:
                self._drop(holder, error)
        if self._full.waiting(now):
            return  # the disk was full: nothing is tried before the pause is over
        while self._timers and self._timers[0][0] <= now:
            _, run_id = heapq.heappop(self._timers)
            driver = self.drivers.get(run_id)
            if driver is not None:
                self._mark(driver)
        ticked = self._tick(now)
        self.syncs.ended(ticked)
        self._retire(ticked, stop_when_paused)

    @property
    def busy(self) -> bool:
        """Whether a run has something new, for the next `step` to look at at once."""
        return bool(self._dirty)

    def next_wake(self, *, commands_waiting: bool = False) -> float | None:
        """When the loop next has something to do by itself, if nothing new arrives: its
        earliest timer, or its next housekeeping when starts wait to ride along with a commit
        or `commands_waiting` (None: nothing is scheduled)."""
        wakes = []
        if self._timers:
            wakes.append(self._timers[0][0])
        if self._lazy or commands_waiting:
            wakes.append(self._next_housekeeping)
        return min(wakes) if wakes else None

    def status_interval(self) -> float:
        """Seconds between `status.json` refreshes of a running run: `status_interval`, or
        longer when many runs are held, so that all refreshes together stay near
        `STATUS_REFRESHES` per second."""
        return self.settings.status_interval * max(1.0, len(self.drivers) / STATUS_REFRESHES)

    def wake(self) -> None:
        """Ask the loop to look again now (a report or a command arrived)."""
        if self._wake is not None:
            self._wake.set()

    def look_now(self) -> None:
        """Look at the commands at once, not at the next heartbeat (one was just posted)."""
        self._next_housekeeping = 0.0
        self.wake()

    def _mark(self, driver: RunDriver) -> None:
        driver.dirty = True
        self._dirty.add(driver.run_id)

    def wake_at(self, when: float, driver: RunDriver) -> None:
        """Tick `driver` again at `when` (a status.json rewrite that was coalesced)."""
        heapq.heappush(self._timers, (when, driver.run_id))

    def _schedule(self, driver: RunDriver) -> None:
        """Remember when the engine will next act on its own for this run (a deadline)."""
        wake_at = next_wake(driver.definition.pipeline, driver.state)
        if wake_at is not None and self._wake_at.get(driver.run_id) != wake_at:
            self._wake_at[driver.run_id] = wake_at
            heapq.heappush(self._timers, (wake_at, driver.run_id))

    async def _sleep(self, now: float) -> None:
        assert self._wake is not None
        pause = self._full.waiting(now)
        if pause:
            await asyncio.sleep(pause)  # reports and commands wait: nothing can be recorded
            return
        timeout = max(0.0, self._next_housekeeping - now)
        if self._timers:
            timeout = min(timeout, max(0.0, self._timers[0][0] - now))
        if not self._dirty:
            await self._wake.sleep(timeout)
        self._wake.clear()

    def _poll_commands(self) -> None:
        if not self.drivers:
            return
        try:
            pending = self.store.pending_commands(None)
        except StorageError as exc:  # a locked database: the commands wait for the next look
            level = level_for(exc)
            log.log(level, "cannot read commands: %s", exc, extra={"action": "poll_failed"})
            return
        for record in pending:
            driver = self.drivers.get(record.run_id)
            if driver is not None and all(c.id != record.id for c in driver.commands):
                driver.commands.append(record)
                self._mark(driver)

    def _tick(self, now: float) -> list[RunDriver]:
        """`_tick_runs`, its duration told to `on_tick` when one listens."""
        if self.on_tick is None:
            return self._tick_runs(now)
        started = time.perf_counter()
        try:
            return self._tick_runs(now)
        finally:
            self.on_tick(time.perf_counter() - started)

    def _tick_runs(self, now: float) -> list[RunDriver]:
        """Observe, decide, append (one transaction for all runs), then act."""
        if self._dirty:
            self._dirty |= self._lazy  # starts join a commit that happens anyway
            self._lazy.clear()
        dirty = [self.drivers[r] for r in sorted(self._dirty) if r in self.drivers]
        self._dirty.clear()
        batches: list[tuple[RunDriver, list[NewEvent], AppendBatch]] = []
        slots = self._slots(dirty, now)
        task_slots = self._task_slots(dirty, now)
        for driver in dirty:
            driver.dirty = False
            granted = slots.get(driver.run_id, []) + task_slots.get(driver.run_id, [])
            new, consumed = driver.step(now, granted)
            if driver.state.task_slot_waits:
                new += self._first_asks(driver, new, now)
            if new or consumed:
                reuser = driver.reuser
                batch = AppendBatch(
                    lease=driver.lease,
                    events=new,
                    summary=driver.summary(),
                    consumed=consumed,
                    artifacts=driver.stored,
                    cache=reuser.take_index(driver.state) if reuser and reuser.to_index else (),
                )
                driver.stored = []
                batches.append((driver, new, batch))
            else:
                self._act(driver)
                self._schedule(driver)
        if not batches:
            return dirty
        # Ended runs' leases ride along with this commit instead of paying for their own.
        releases, self._releases = self._releases, []
        try:
            crash_point("before_append")
            results = self.store.append_many([b for _, _, b in batches], now, releases=releases)
            crash_point("after_append")
        except StorageError as exc:
            self._releases = releases + self._releases
            if isinstance(exc, DiskFull):
                self._full.failed(exc, now, [d.run_id for d, _, _ in batches])
            else:
                log.log(
                    level_for(exc, logging.ERROR),
                    "append failed: %s",
                    exc,
                    extra={"action": "append_failed"},
                )
            for driver, _, _ in batches:
                try:
                    self._reload(driver)
                except StorageError as again:
                    # What was recorded cannot be read back now: let the run go. Its lease
                    # runs out and it is taken up again (here or elsewhere) from the ledger.
                    self._drop(driver, again)
            return dirty
        self._full.succeeded()
        recorded = []
        for (driver, new, batch), result in zip(batches, results, strict=True):
            if isinstance(result, Exception):
                self._refused(driver, batch, result)
                continue
            self._emit(driver, result - len(new) + 1, new)
            recorded.append(driver)
        self._task_slots_recorded(recorded, now)
        for driver, effects in self._write_outputs(recorded):
            self._act(driver, effects)
            self._schedule(driver)
        return dirty

    def _slots(self, dirty: list[RunDriver], now: float) -> dict[str, list[NewEvent]]:
        """New runs of pipelines with `concurrency`: each its slot, or a look again soon.

        Asked oldest run first: the store lets runs of a key start in the order they were
        created only among runs that have asked, and the tick's order is by run id."""
        waiting = [d for d in dirty if waits_for_slot(d.definition.pipeline, d.state)]
        found: dict[str, list[NewEvent]] = {}
        for driver in sorted(waiting, key=lambda d: (d.state.created_at, d.run_id)):
            taken = take_slot(self.store, driver.definition, driver.state, now)
            if taken is not None:
                self._slot_waiters.discard(driver.run_id)
                found[driver.run_id] = [taken]
                continue
            self._slot_waiters.add(driver.run_id)
            self._slot_waiters &= self.drivers.keys()  # forget runs let go meanwhile
            self.wake_at(now + slot_poll(len(self._slot_waiters)), driver)
            found[driver.run_id] = awaiting(driver.definition, driver.state, now)
        return found

    def _task_slots(self, dirty: list[RunDriver], now: float) -> dict[str, list[NewEvent]]:
        """Attempts waiting for a slot of their worker's key: each its slot, or a look again
        soon (`interlock.runtime.task_slots`)."""
        self.task_slots.keep_only(self.drivers.keys())
        taken = self.task_slots.take(dirty, now)
        for driver in dirty:
            if driver.run_id in self.task_slots.waiting():
                self.wake_at(now + self.task_slots.poll(), driver)
        return taken

    def _first_asks(self, driver: RunDriver, new: list[NewEvent], now: float) -> list[NewEvent]:
        """Attempts that started waiting in this tick ask at once: one that gets its slot is
        dispatched in the same commit (one commit per step, as without a key). So do those
        of a run that was paused when it last looked and runs again (an approval)."""
        started = any(isinstance(n.event, ev.TaskSlotAwaited) for n in new)
        if not started and not self.task_slots.resumed(driver):
            return []
        taken = self.task_slots.take([driver], now).get(driver.run_id, [])
        if not taken:
            self.wake_at(now + self.task_slots.poll(), driver)
            return []
        more = driver.decide(now)
        if any(isinstance(n.event, ev.TaskSlotAwaited) for n in more):
            self.wake_at(now, driver)  # newer waits: they ask at the next turn
        return taken + more

    def _task_slots_recorded(self, recorded: list[RunDriver], now: float) -> None:
        """Free the slots of attempts that ended; runs that wait here for a slot of a key
        ask again at once when one was freed."""
        freed = False
        for driver in recorded:
            freed = self.task_slots.committed(driver) or freed
        if freed:
            for run_id in self.task_slots.waiting():
                if run_id in self.drivers:
                    self.wake_at(now, self.drivers[run_id])

    def _write_outputs(self, drivers: list[RunDriver]) -> list[tuple[RunDriver, list[Effect]]]:
        """Write the outputs the ledger now holds (and final.md files) of every run of the
        tick, atomically (through a temporary file and a rename) but without waiting for the
        disk: their bodies are durable in the ledger already. A crash of the process leaves
        them whole; a power loss can leave them short, and a resume, the only way back into
        a run that was not let go, rewrites them from the ledger (`restore_outputs`). A run
        is let go, or archived, only once its files are durable (`EndedSyncs`)."""
        staged = []
        for driver in drivers:
            effects = driver.plan()
            staged.append((driver, effects, *driver.stage(effects)))
        files = [item for _, _, pending, _ in staged for item in pending]
        if files:
            try:
                artifacts.write_files(files, durable=False)
            except OSError as exc:
                if not is_enospc(exc):
                    raise
                cause = f"writing outputs: {exc.strerror}, ENOSPC"
                raise DiskFull(stop_message(sorted(self.drivers), cause)) from None
        for driver, _, pending, delivering in staged:
            driver.unsynced += [path for path, _ in pending]
            if delivering:
                crash_point("after_deliver")
        return [(driver, effects) for driver, effects, _, _ in staged]

    def _archive_delivered(self) -> None:
        """Before the loop lets its runs go: archive the runs that were delivered and whose
        files are now durable (`EndedSyncs.finish`), in one last tick of those runs alone (no
        other run is decided on, so nothing new starts). One that cannot be archived now is
        handed back unfinished (`release`)."""
        due = {d.run_id for d in self.drivers.values() if awaits_archive(d.state) and d.durable()}
        if not due:
            return
        others, lazy = self._dirty - due, self._lazy
        self._dirty, self._lazy = set(due), set()
        try:
            self._tick(self.clock())
        except (InterlockError, OSError) as exc:
            log.warning("cannot archive %d delivered run(s) before stopping: %s", len(due), exc)
        finally:
            self._dirty |= others
            self._lazy |= lazy
        status_writer().flush()  # the archived runs' last status.json, before the process ends

    def _act(self, driver: RunDriver, effects: list[Effect] | None = None) -> None:
        """`driver.act`; a full disk while writing outputs stops the loop (the ledger holds
        them: resume writes them once there is space)."""
        try:
            driver.act(effects)
        except OSError as exc:
            if not is_enospc(exc):
                raise
            cause = f"writing into {driver.run_dir}: {exc.strerror}, ENOSPC"
            raise DiskFull(stop_message(sorted(self.drivers), cause)) from None

    def _emit(self, driver: RunDriver, first_seq: int, new: list[NewEvent]) -> None:
        self.children.recorded(driver.run_id)
        for offset, item in enumerate(new):
            for listener in self.listeners:
                listener(driver.run_id, first_seq + offset, item, driver.state)

    def _reload(self, driver: RunDriver) -> None:
        """After a failed or ambiguous commit: rebuild from what is really stored."""
        driver.state = fold([s.event for s in self.store.events(driver.run_id)])
        self.task_slots.reloaded(driver.run_id)
        driver.workers.acted_mark = 0  # a state rebuilt: every task in flight is looked at again
        driver.stored = []
        driver.keep_recorded_outputs()
        driver.reobserve()
        driver.checked_adoption = False
        self._mark(driver)

    def _drop(self, driver: RunDriver, error: Exception) -> None:
        log.warning("%s", error, extra={"run_id": driver.run_id, "action": "lease_lost"})
        for handle in driver.workers.handles.values():
            handle.cancel()
        self.drivers.pop(driver.run_id, None)
        if self.settings.write_status:
            self._supersede(driver, error)

    def _supersede(self, driver: RunDriver, error: Exception) -> None:
        """Mark the status.json of a run let go as superseded (it is no longer kept current)."""
        by, since = None, self.clock()
        if isinstance(error, LeaseLost):
            with contextlib.suppress(Exception):  # who took it over is a courtesy, not a need
                record = self.store.get_run(driver.run_id)
                if record.lease_owner and record.lease_owner != self.owner:
                    by, since = record.lease_owner, record.lease_acquired_at or since
        why = f"this orchestrator ({self.owner}) stopped driving the run: {error}"
        status_writer().flush(driver.run_dir / "status.json")  # or it would undo the mark
        try:
            mark_superseded(driver.run_dir, self.owner, by=by, since=since, why=why)
        except OSError as exc:
            log.warning("cannot mark status.json superseded: %s", exc)

    def _lease_gone(self, holder: RunDriver, error: Exception) -> None:
        """From the keeper's thread: a lease is lost for good (or the disk is full); the
        loop lets the run go at its next turn."""
        self._gone.append((holder, error))
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(self.wake)

    def _refused(self, driver: RunDriver, batch: AppendBatch, error: Exception) -> None:
        """A run's append was refused: carry on from the ledger if its lease is (again) this
        orchestrator's, otherwise let the run go."""
        if isinstance(error, LeaseLost) and self.leases.take_back(driver, batch.lease.token):
            try:
                self._reload(driver)
                return
            except StorageError as again:
                error = again
        self._drop(driver, error)

    def _retire(self, ticked: list[RunDriver], stop_when_paused: bool) -> None:
        for driver in ticked:
            state = driver.state
            finished = state.status.ended and (
                state.archived or (state.status != RunStatus.DELIVERED and driver.durable())
            )
            paused = (
                stop_when_paused
                and state.status is RunStatus.PAUSED
                and (
                    not state.flight
                    or all(self.children.held_by_idle(driver, t) for t in state.in_flight())
                )
            )
            if self._lets_go(driver) and not driver.reports:
                self.release(driver)
                continue
            if driver.dirty or driver.reports or not (finished or paused):
                continue
            if paused or all(handle.done() for handle in driver.workers.handles.values()):
                self.release(driver)

    def _lets_go(self, driver: RunDriver) -> bool:
        """A run this process hands back while it waits for a slot (see Settings)."""
        if not self.settings.let_slot_waiters_go or driver.state.slot_awaited is None:
            return False
        if not waits_for_slot(driver.definition.pipeline, driver.state):
            return False
        self._slot_waiters.discard(driver.run_id)
        return True

    def release(self, driver: RunDriver) -> None:
        """Stop driving a run and hand its lease back.

        An ended run's lease is released after it was acted on (a released lease tells other
        orchestrators there is nothing left to do for it), together with others: with the
        next commit, at the next heartbeat, or at shutdown, whichever comes first.
        """
        for handle in driver.workers.handles.values():
            handle.cancel()
        self.drivers.pop(driver.run_id, None)
        if awaits_archive(driver.state):
            self._let_lapse(driver)
            return
        if driver.state.status.ended:
            if not self._releases:
                self._releases_since = self.clock()
            self._releases.append(driver.lease)
            if len(self._releases) >= 256:
                self.flush_releases()
            return
        status_writer().flush(driver.run_dir / "status.json")  # before anyone else writes it
        with contextlib.suppress(StorageError, LeaseLost):
            self.store.release_lease(driver.lease)

    def _let_lapse(self, driver: RunDriver) -> None:
        """Hand back a run delivered but not archived yet: its delivery is not done, so its
        lease is not released (a released lease says the run was fully acted on) but ended
        now, still naming its holder, the mark of an ended run whose driver stopped before
        finishing it. Whoever looks for work next (a fleet orchestrator, `interlock serve`,
        this one started again) takes it up and archives it."""
        status_writer().flush(driver.run_dir / "status.json")  # before anyone else writes it
        with contextlib.suppress(StorageError, LeaseLost):  # already run out: the same
            self.store.renew_lease(driver.lease, 0.0, self.clock())
        log.warning(
            "run %s is delivered but not archived yet: left for the next orchestrator",
            driver.run_id,
            extra={"run_id": driver.run_id, "action": "archive_left"},
        )

    def flush_releases(self) -> None:
        """Release the leases of ended runs gathered so far (one transaction)."""
        if self._releases:
            leases, self._releases = self._releases, []
            with contextlib.suppress(StorageError):
                self.store.release_leases(leases)

    async def shutdown(self) -> None:
        """Stop every task (killing process groups) and release every lease; a delivered
        run is archived first (its delivery is done only then)."""
        await self.syncs.finish(self.drivers.values())  # a live view: read after the wait
        self._archive_delivered()
        handles = [h for d in self.drivers.values() for h in d.workers.handles.values()]
        for driver in list(self.drivers.values()):
            self.release(driver)
        self.flush_releases()
        for handle in handles:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await handle

    # -- tasks --------------------------------------------------------------------------------

    def start_task(self, driver: RunDriver, task: TaskState) -> asyncio.Task[None]:
        """Start the recorded attempt of `task`; its report arrives at a later tick."""
        if driver.definition.pipeline.worker(task.role).pipeline is not None:
            return self.children.start(driver, task)  # a child run, driven from here
        return self.dispatcher.submit(attempt_of(self, driver, task))

    def report(self, driver: RunDriver, report: Report) -> None:
        """Hand a worker's report to the next tick.

        A start rides along with the next tick (at the latest the next heartbeat) rather than
        having a commit of its own: only the dispatch had to be durable before the task began.
        """
        driver.reports.append(report)
        if isinstance(report.event, ev.TaskStarted):
            self._lazy.add(driver.run_id)
        else:
            self._mark(driver)
            self.wake()

    def touch(self, driver: RunDriver) -> None:
        """Look at the run again at the next tick (a task of an ended run has stopped)."""
        if self.drivers.get(driver.run_id) is driver:
            self._mark(driver)
            self.wake()

    def progress(self, run_id: str, task_id: str, text: str) -> None:
        """Forward a streamed fragment to progress listeners (never recorded)."""
        for listener in self.progress_listeners:
            listener(run_id, task_id, text)


def awaits_archive(state: RunState) -> bool:
    """A run delivered whose archive is not recorded yet: its delivery is not done."""
    return state.status is RunStatus.DELIVERED and not state.archived


def inert_message(run_id: str, status: str) -> str:
    """Why an imported run is not driven, and the ways on from its `status`."""
    return (
        f"run {run_id} was imported from a bundle and runs nothing until you say so (a "
        "bundle's definition is code: 'interlock verify FILE' lists the commands and call: "
        f"targets it runs). {imported_next(run_id, status, trusted=False)}"
    )


def imported_next(run_id: str, status: str, *, trusted: bool) -> str:
    """The commands that take an imported run on from `status`: a run that ended can only
    be run again (`rerun`), a paused one approved, a running or waiting one resumed."""
    if status in ("delivered", "failed", "cancelled"):
        own = f"run your own workflow on its outputs: interlock rerun {run_id} --workflow FILE"
        if trusted:
            return f"{own[0].upper()}{own[1:]}, or its own: interlock rerun {run_id}"
        return f"{own[0].upper()}{own[1:]}; or its own: interlock rerun {run_id} --trust-bundle"
    step = f"interlock approve {run_id}" if status == "paused" else f"interlock resume {run_id}"
    if trusted:
        return f"Go on with it: {step}"
    return f"Run it as imported: interlock trust {run_id}, then {step}"
