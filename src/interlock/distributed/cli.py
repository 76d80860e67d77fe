"""What `interlock worker` and `interlock orchestrate` run (imported only by those commands)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.distributed.orchestrate import Fleet
from interlock.distributed.queue import TaskQueue
from interlock.distributed.sources import ClaimSource
from interlock.distributed.worker import RemoteWorker
from interlock.errors import MissingExtra, UsageError
from interlock.providers.config_files import ConfigError
from interlock.providers.redaction import protect_url
from interlock.runtime.home import Home
from interlock.runtime.models import ModelRunner
from interlock.runtime.orchestrator import Settings, new_owner
from interlock.storage.postgres import PostgresStore

if TYPE_CHECKING:
    from interlock.distributed.redis_streams import RedisStreams

log = logging.getLogger("interlock.distributed")
POOL_MOST = 32  # connections a worker's pool grows to, at most (plus two)
COMMAND_SLOTS = 4  # processes on this machine
CALL_SLOTS = 32  # `call:` functions: in this domain they mostly wait on a model or a service
UNLIMITED_SLOTS = 32  # model calls of a provider with no `max_concurrency`


def default_slots(models: ModelRunner) -> dict[str, int]:
    """Attempts a worker runs at once by kind, unless `--concurrency` says otherwise. Model
    calls: as many as its providers allow at once (the largest `max_concurrency` of its
    configuration, 8 unless set); claiming more would only hold them, waiting for the
    provider's slots in this process, while another worker could run them.

    Raises:
        ConfigError: the worker's `interlock.toml` is invalid (the message names it).
    """
    limits = [p.max_concurrency or UNLIMITED_SLOTS for p in models.config(None).providers.values()]
    model = max(limits, default=UNLIMITED_SLOTS)
    return {"command": COMMAND_SLOTS, "model": model, "call": CALL_SLOTS}


def open_shared(url: str | None, pool_size: int) -> PostgresStore:
    """The PostgreSQL ledger both commands need (a SQLite file cannot be shared)."""
    if not url or not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(
            "workers and fleet orchestrators share a PostgreSQL ledger: "
            "pass --store postgresql://... (or set INTERLOCK_STORE)"
        )
    protect_url(url)  # its password, masked in whatever this process records
    return PostgresStore(url, pool_size=pool_size)


def parse_pairs(pairs: tuple[str, ...], option: str) -> dict[str, int]:
    """`NAME=N` pairs into a dict."""
    values = {}
    for pair in pairs:
        name, sep, number = pair.rpartition("=")
        if not sep or not name or not number.lstrip("-").isdigit():
            raise UsageError(f"{option} {pair!r} is not NAME=NUMBER")
        values[name] = int(number)
    return values


async def until_signalled(main: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Set `stop` on SIGTERM or SIGINT, then wait for `main` to wind down."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await main


def run_worker(
    url: str | None,
    home: str | None,
    *,
    slots: dict[str, int],
    kinds: tuple[str, ...],
    tags: tuple[str, ...],
    lease_ttl: float,
    grace: float,
    redis_url: str | None,
) -> None:
    """Claim and run tasks of `kinds` (checked by the command) until SIGTERM/SIGINT, up to
    `slots[kind]` of each at once (`default_slots` for a kind not given); running tasks
    finish or are handed back."""
    transport = redis_transport() if redis_url else None  # a missing extra: said first
    protect_url(redis_url)
    models = ModelRunner(Home.at(home).root)
    try:
        slots = {**default_slots(models), **slots}
    except ConfigError as exc:  # named now, not at each model call
        raise UsageError(f"{exc}; fix it, then start the worker again") from None
    # Statements under way at once are far fewer than attempts (heartbeats begin a third of
    # a lease in; turns carry many outcomes): a pool that grows to this many is enough.
    store = open_shared(url, pool_size=min(sum(slots[k] for k in kinds), POOL_MOST) + 2)
    # Rate limits shared by the fleet: in Redis when the worker uses it, else in the store.
    from interlock.runtime.shared_limits import share_limits_for

    share_limits_for(url, redis_url=redis_url)
    name = f"worker:{new_owner()}"
    source: ClaimSource | None = None
    if redis_url and transport is not None:
        from interlock.distributed.stream_source import StreamSource

        source = StreamSource(transport(redis_url), TaskQueue(store), min_idle=lease_ttl)
    worker = RemoteWorker(
        store,
        name=name,
        per_kind=slots,
        kinds=kinds,
        tags=tags,
        lease_ttl=lease_ttl,
        grace=grace,
        models=models,
        source=source,
    )
    taking = ", ".join(f"{slots[kind]} {kind}" for kind in kinds)
    # One line on stderr, whatever the log level: what this process will do, at once.
    print(f"{name}: runs at most {taking} tasks at once (SIGTERM stops it)", file=sys.stderr)

    async def main() -> None:
        stop = asyncio.Event()
        await until_signalled(asyncio.create_task(worker.run(stop)), stop)

    try:
        asyncio.run(main())
    finally:
        store.close()


def run_orchestrate(
    url: str | None,
    home: str | None,
    *,
    capacity: int,
    lease_ttl: float,
    priorities: tuple[str, ...],
    limits: tuple[str, ...],
    redis_url: str | None,
    queue_retention: float = 3600.0,
    heartbeat: float = 0.5,
) -> None:
    """Drive unowned runs of the shared ledger until SIGTERM/SIGINT."""
    transport = redis_transport() if redis_url else None  # a missing extra: said first
    protect_url(redis_url)
    store = open_shared(url, pool_size=6)
    queue = TaskQueue(store)
    for scope, limit in parse_pairs(limits, "--limit").items():
        queue.set_limit(scope, None if limit < 0 else limit)
    streams = transport(redis_url) if redis_url and transport is not None else None
    settings = Settings(lease_ttl=lease_ttl, max_concurrency=capacity, heartbeat=heartbeat)
    fleet = Fleet(
        store,
        Home.at(home),
        capacity=capacity,
        settings=settings,
        priorities=parse_pairs(priorities, "--priority"),
        transport=streams,
        queue_retention=None if queue_retention < 0 else queue_retention,
    )

    async def main() -> None:
        stop = asyncio.Event()
        if streams is not None:
            loop = asyncio.get_running_loop()
            orchestrator = fleet.orchestrator

            def relay(run_id: str, task_id: str, text: str) -> None:
                loop.call_soon_threadsafe(orchestrator.progress, run_id, task_id, text)

            streams.follow_progress(relay)
        await until_signalled(asyncio.create_task(fleet.run(stop)), stop)

    Path(Home.at(home).root).mkdir(parents=True, exist_ok=True)
    print(
        f"{fleet.orchestrator.owner}: driving up to {capacity} runs of the shared ledger "
        "(SIGTERM stops it)",
        file=sys.stderr,
    )
    try:
        asyncio.run(main())
    finally:
        store.close()


def redis_transport() -> type[RedisStreams]:
    """The Redis Streams transport (`--redis`), or why it cannot be had here."""
    try:
        from interlock.distributed.redis_streams import RedisStreams
    except ImportError as exc:
        raise MissingExtra(
            f"--redis needs an extra: pip install 'interlock[redis]' ({exc})"
        ) from None
    return RedisStreams
