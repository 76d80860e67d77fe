"""Everything a server runs beside the HTTP routes: the orchestrator and its local workers, the
event feed, webhooks, schedules, metrics and traces, started and stopped with the app."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

from interlock.api import Interlock
from interlock.core.state import RunState, fold
from interlock.core.workflow import Pipeline
from interlock.errors import DamagedHistory, InterlockError, LeaseHeld, RunInert, UsageError
from interlock.providers import aclose_providers
from interlock.runtime.orchestrator import Orchestrator, Settings, holder_is_dead
from interlock.server.config import ServerConfig
from interlock.server.hub import Hub
from interlock.server.metrics import Metrics
from interlock.server.notify import Webhooks, annotator
from interlock.server.reads import Reads
from interlock.server.schedule import Scheduler, check_schedule
from interlock.server.workflows import Workflows
from interlock.storage.base import StoredEvent

log = logging.getLogger("interlock.server")
ADOPT_EVERY = 2.0  # seconds between looks for runs nobody drives
ADOPT_AGE = 2.0  # a run this young may still be getting its first lease from its creator


def make_dispatcher(kind: str, store: Any) -> Any:
    """`None` (the orchestrator's local worker pool) or the PostgreSQL task queue."""
    if kind == "local":
        return None
    from interlock.storage.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        raise UsageError(
            "--dispatch queue hands tasks to `interlock worker` processes through PostgreSQL: "
            "give --store postgresql://..."
        )
    from interlock.distributed.artifacts import PostgresArtifacts
    from interlock.distributed.dispatcher import QueueDispatcher
    from interlock.distributed.queue import TaskQueue

    return QueueDispatcher(TaskQueue(store), PostgresArtifacts(store))


class Service:
    """One server's runtime, on one state directory (or store)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.workflows = Workflows(config.workflows)
        for name, definition in self.workflows.load().items():
            if definition.pipeline.schedule:
                check_schedule(name, definition.pipeline.schedule)
        settings = Settings(lease_ttl=config.lease_ttl, heartbeat=config.heartbeat)
        self.api = Interlock(config.home, store=config.store_url, settings=settings)
        self.store = self.api.store
        self.home = self.api.home
        self.dispatcher = make_dispatcher(config.dispatch, self.store)
        self.orchestrator = Orchestrator(
            self.store, self.home, settings=settings, dispatcher=self.dispatcher
        )
        self.api.orchestrator = self.orchestrator  # runs started through the API are driven here
        self.reads = Reads(self.api)  # the read routes' folded histories, off the event loop
        self.metrics = Metrics(self.store, self.orchestrator)
        self.orchestrator.on_tick = self.metrics.tick.observe  # each tick's duration
        self.hub = Hub(
            self.store,
            self.pipeline_of,
            queue_size=config.queue_size,
            annotate=annotator(self.home),
        )
        self.hub.hooks.append(self.metrics.on_event)
        self.orchestrator.listeners.append(self.hub.on_event)
        self.orchestrator.progress_listeners.append(self.hub.on_progress)
        self.webhooks = Webhooks(self.store, self.home, config.webhooks, self.orchestrator.owner)
        self.webhooks.on_sent = lambda outcome: self.metrics.notifications.labels(outcome).inc()
        self.scheduler = Scheduler(
            self.workflows.load,
            self.orchestrator,
            catch_up=config.schedule_catch_up,
            on_start=lambda _: self.orchestrator.wake(),
        )
        self.stop = asyncio.Event()
        self.unreadable: dict[str, str] = {}  # runs whose history cannot be read: not taken
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: Any = None  # PostgreSQL notifications of posted commands
        self._limits = contextlib.ExitStack()  # shared rate limits and spend caps while serving
        from interlock.runtime.tracing import Tracer, configured_tracer

        tracer = configured_tracer(service="interlock serve")  # OTEL_EXPORTER_OTLP_ENDPOINT
        if tracer is None and config.otel:  # the application's own tracer provider
            tracer = Tracer()
        if tracer is not None:
            tracer.artifact = self.store.artifact  # outputs the ledger holds, for content
            self.hub.hooks.append(functools.partial(tracer.on_stored, locate=self.home.run_dir))

    def pipeline_of(self, state: RunState) -> Pipeline | None:
        """The pinned pipeline of a run (None before its first event is known)."""
        if not state.definition_hash:
            return None
        try:
            return self.orchestrator.definition(state.pipeline, state.definition_hash).pipeline
        except InterlockError:
            return None

    def state_at(self, stored: StoredEvent) -> RunState:
        """A run's state right after `stored`."""
        return fold([s.event for s in self.store.events(stored.run_id, 0, stored.seq)])

    async def start(self) -> None:
        """Take over every run nobody drives, then start the loops."""
        self.stop = asyncio.Event()
        from interlock.runtime.shared_limits import limits_shared_for

        # The runs this server drives share rate limits with every process on its store, and
        # count their spend caps in its ledger, as `interlock run` and the workers do.
        self._limits.enter_context(limits_shared_for(self.config.store_url, store=self.store))
        self.hub.start()
        self.adopt(time.time(), min_age=0.0)
        tasks = [
            self.orchestrator.serve_forever(self.stop),
            self.hub.run(self.stop),
            self._housekeeping(),
        ]
        if self.config.webhooks:
            self.webhooks.start()
            tasks.append(self.webhooks.run(self.stop, self.state_at))
        self._tasks = [asyncio.create_task(t) for t in tasks]
        self._listener = self._listen_for_commands()

    def _listen_for_commands(self) -> Any:
        """On PostgreSQL, look at the inbox as soon as another process posts a command (a
        signal, an approval); the heartbeat's look stays as the safety net. None elsewhere."""
        url = getattr(self.store, "url", None)
        if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
            return None
        from interlock.distributed.listen import Listener

        loop = asyncio.get_running_loop()

        def heard(_channel: str, _payload: str) -> None:
            loop.call_soon_threadsafe(self.orchestrator.look_now)

        return Listener(url, ["interlock_commands"], heard).start()

    async def close(self) -> None:
        """Stop the loops, stop running tasks and hand every lease back."""
        self.stop.set()
        if self._listener is not None:
            await asyncio.to_thread(self._listener.stop)
        self.orchestrator.wake()
        self.hub.wake()
        self.webhooks.wake.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10)
        await self.orchestrator.shutdown()
        await asyncio.to_thread(self.reads.close)
        await aclose_providers()
        self._limits.close()
        close = getattr(self.dispatcher, "close", None)
        if close is not None:
            close()
        self.store.close()

    def adopt(self, now: float, min_age: float = ADOPT_AGE) -> list[str]:
        """Take the lease of every running, waiting or paused run that no live process holds."""
        taken = []
        for status in ("running", "waiting", "paused", "delivered"):
            for record in self.store.list_runs(status=status, limit=10_000):
                if record.run_id in self.orchestrator.drivers or now - record.created_at < min_age:
                    continue
                if self.orchestrator.inert.get(record.run_id) == record.last_seq:
                    continue  # imported, not trusted: never taken up (`Orchestrator.taken`)
                if status == "delivered" and not record.lease_owner:
                    continue  # released by its driver once delivered and archived
                live = record.lease_owner and (record.lease_expires or 0) > now
                if live and not holder_is_dead(record.lease_owner or ""):
                    continue
                if record.run_id in self.unreadable:
                    continue
                try:
                    self.orchestrator.take(record.run_id)
                except (LeaseHeld, RunInert):
                    continue
                except DamagedHistory as exc:  # that run alone: the others are taken up
                    self.unreadable[record.run_id] = exc.message
                    log.error(exc.message, extra={"action": "run_unreadable"})
                    continue
                taken.append(record.run_id)
        if taken:
            self.orchestrator.wake()
        return taken

    async def _housekeeping(self) -> None:
        """Schedules and adoption of orphaned runs, every couple of seconds."""
        while not self.stop.is_set():
            now = time.time()
            try:
                if self.config.schedules:
                    self.scheduler.tick(now)
                self.adopt(now)
            except Exception:  # a failed round is retried at the next one
                log.exception("housekeeping failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), ADOPT_EVERY)
