"""`interlock orchestrate`: one of many orchestrators sharing the runs of one database.

Each run is driven by whoever holds its lease. An orchestrator takes live runs whose lease is
free or expired (new runs, runs whose orchestrator died or stalled), up to its `capacity`,
a few at a time and in random order so that several orchestrators spread the runs between
them. A run handed back (submitted, or let go) wakes every orchestrator through `NOTIFY`
(`interlock_runs`; the appends of runs being driven wake nobody here), and so does a posted
command (a signal, an approval) for the inbox; a slow poll catches expired leases and
anything a dropped connection missed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

from interlock.api import Interlock
from interlock.distributed.artifacts import PostgresArtifacts
from interlock.distributed.dispatcher import QueueDispatcher, Transport
from interlock.distributed.listen import Listener
from interlock.distributed.queue import TaskQueue
from interlock.distributed.stale import supersede_stale
from interlock.errors import InterlockError, RunInert
from interlock.runtime.home import Home
from interlock.runtime.orchestrator import Orchestrator, Settings
from interlock.runtime.tracing import configured_tracer
from interlock.storage.outage import level_for
from interlock.storage.postgres import PostgresStore

log = logging.getLogger("interlock.distributed")
PRUNE_EVERY = 60.0  # seconds between prunings of the queue
TAKE_PER_LOOK = 8  # runs taken per look: several orchestrators share a burst between them


class Fleet:
    """An orchestrator that takes unowned runs and dispatches through the queue."""

    def __init__(
        self,
        store: PostgresStore,
        home: Home,
        *,
        capacity: int = 200,
        settings: Settings | None = None,
        scan: float = 1.0,
        priorities: dict[str, int] | None = None,
        transport: Transport | None = None,
        queue_retention: float | None = 3600.0,
    ) -> None:
        self.store = store
        self.capacity = capacity
        self.scan = scan
        self.queue_retention = queue_retention  # None: queue entries are kept for ever
        self._pruned_at = float("-inf")
        self.dispatcher = QueueDispatcher(
            TaskQueue(store), PostgresArtifacts(store), priorities=priorities, transport=transport
        )
        # Runs waiting for a slot of their key are handed back, not held: a key's backlog then
        # takes none of the capacity that other keys' runs need.
        settings = dataclasses.replace(settings or Settings(), let_slot_waiters_go=True)
        self.orchestrator = Orchestrator(store, home, settings=settings, dispatcher=self.dispatcher)
        tracer = configured_tracer(service="interlock orchestrate")
        if tracer is not None:  # OTEL_EXPORTER_OTLP_ENDPOINT is set
            self.orchestrator.listeners.append(tracer.listener_at(home.run_dir, store.artifact))

    async def run(self, stop: asyncio.Event) -> None:
        """Take and drive runs until `stop` is set; then hand every lease back."""
        loop = asyncio.get_running_loop()
        look = asyncio.Event()

        def notified(channel: str, _payload: str) -> None:
            if channel != "interlock_runs":  # a command (a signal, an approval) was posted
                loop.call_soon_threadsafe(self.orchestrator.look_now)
            # A run was handed back (submitted, or let go): look, once for a burst. Appends
            # (`interlock_events`) are not listened to: they never free a run to take.
            if channel != "interlock_commands" and not look.is_set():
                loop.call_soon_threadsafe(look.set)

        channels = ["interlock_runs", "interlock_commands"]
        listener = Listener(self.store.url, channels, notified).start()
        orchestrator = self.orchestrator
        try:  # before taking any run: what is marked here is nobody's any more
            runs = orchestrator.home.root / "runs"
            await asyncio.to_thread(supersede_stale, self.store, runs, orchestrator.owner)
        except InterlockError as exc:
            log.warning("cannot look for stale status files: %s", exc)
        driving = loop.create_task(self._drive(stop))
        try:
            while not stop.is_set():
                look.clear()  # before looking: news arriving meanwhile asks for another look
                more = self._take_some()
                await self._prune()
                if not more:  # a backlog is taken look after look, not one look per scan
                    waits = [loop.create_task(look.wait()), loop.create_task(stop.wait())]
                    await asyncio.wait(
                        waits, timeout=self.scan, return_when=asyncio.FIRST_COMPLETED
                    )
                    for waiting in waits:
                        waiting.cancel()
                # Let notifications of a burst of new runs gather into one look, and other
                # orchestrators take their share of a backlog between two looks.
                await asyncio.sleep(0.05)
        finally:
            await driving
            await self.orchestrator.shutdown()
            listener.stop()
            self.dispatcher.close()

    async def _drive(self, stop: asyncio.Event) -> None:
        """The reconcile loop, restarted if the database stays away longer than its retries."""
        while not stop.is_set():
            try:
                await self.orchestrator.serve_forever(stop)
            except InterlockError as exc:
                log.error("orchestrator loop stopped: %s; restarting", exc)
                await asyncio.sleep(1.0)

    async def _prune(self) -> None:
        """Now and then, drop queue entries of ended runs (see `TaskQueue.prune`), so that
        the queue holds live work, not the whole past."""
        now = asyncio.get_running_loop().time()
        if now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        queue, pruned = self.dispatcher.queue, 0
        try:
            # Entries left queued for runs that ended (an attempt failed while dispatching)
            # are withdrawn first, so that they are pruned like any other.
            withdrawn = await asyncio.to_thread(queue.withdraw_ended)
            if self.queue_retention is not None:
                pruned = await asyncio.to_thread(queue.prune, self.queue_retention)
        except InterlockError as exc:
            log.warning("cannot prune the queue: %s", exc)
            return
        if withdrawn:
            log.info("withdrew %d queued entries of ended runs", withdrawn)
        if pruned:
            log.info("pruned %d finished queue entries of ended runs", pruned)

    def _take_some(self) -> bool:
        """Take a few unowned runs; true when more may be waiting and there is room for them
        (the look found as many as it asked for)."""
        room = self.capacity - len(self.orchestrator.drivers)
        if room <= 0:
            return False
        now = self.orchestrator.clock()
        asked = min(room, TAKE_PER_LOOK)
        try:
            # A few per look: orchestrators looking at once then share a burst of new runs.
            candidates = self.store.unowned_runs(now, asked)
        except InterlockError as exc:
            log.log(level_for(exc), "cannot look for runs: %s", exc)
            return False
        orchestrator = self.orchestrator
        fresh = [
            run_id
            for run_id in candidates
            if run_id not in orchestrator.drivers and run_id not in orchestrator.inert
        ]
        try:
            # Their leases, records and histories in one transaction; a run someone else
            # took meanwhile is left out.
            leased = self.store.take_leases(
                fresh, orchestrator.owner, orchestrator.settings.lease_ttl, now
            )
        except InterlockError as exc:
            log.log(level_for(exc), "cannot take runs: %s", exc)
            return False
        taken = 0
        for lease, record, stored in leased:
            try:
                orchestrator.taken(lease, record, stored)
                taken += 1
            except RunInert:
                continue  # imported, not trusted: left alone (`Orchestrator.taken`)
            except InterlockError as exc:  # its lease runs out; it is taken up again later
                log.warning("cannot drive run %s: %s", record.run_id, exc)
        if taken:
            log.info("took %d run(s); driving %d", taken, len(self.orchestrator.drivers))
            self.orchestrator.wake()
        return len(candidates) == asked < room


def submit(
    store: str,
    workflow: str | Path,
    pipeline: str | None = None,
    *,
    topic: str,
    inputs: dict[str, Any] | None = None,
    home: str | Path | None = None,
) -> str:
    """Record a new run and leave it for the fleet (its lease is handed back at once)."""
    app = Interlock(home, store=store)
    try:
        return app.submit(workflow, pipeline, topic=topic, inputs=inputs)
    finally:
        app.close()
