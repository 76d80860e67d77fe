"""Which bucket store a process's rate limits use, from the URL of its store.

PostgreSQL and Redis share the buckets with every process using the same database or
server (`buckets_pg`, `buckets_redis`); anything else (SQLite, memory, no URL) keeps them
in the process, as a single machine needs. ``INTERLOCK_LIMITS`` names the store outright:
a ``postgresql://`` or ``redis://`` URL, or ``process``.

The spend caps (`interlock.providers.spend_guard`) are counted in the ledger itself, on
SQLite too: every process on the file or the database sees one count (`open_spend`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence

from interlock.errors import UsageError
from interlock.providers.batch_store import BatchStore
from interlock.providers.buckets import BucketStore, MemoryBuckets
from interlock.providers.spend import CapKey, CapUsage, SpendStore

ENV = "INTERLOCK_LIMITS"


def open_buckets(
    store_url: str | None, *, redis_url: str | None = None, env: Mapping[str, str] | None = None
) -> BucketStore:
    """The bucket store for a process whose ledger is `store_url` (and whose transport is
    `redis_url`, which wins when given: Redis answers faster than a database).

    Raises:
        UsageError: A Redis URL without the `redis` extra installed.
    """
    chosen = (os.environ if env is None else env).get(ENV) or redis_url or store_url or ""
    if chosen.startswith(("postgresql://", "postgres://")):
        from interlock.storage.buckets_pg import PostgresBuckets

        return PostgresBuckets(chosen)
    if chosen.startswith(("redis://", "rediss://", "unix://")):
        from interlock.storage.buckets_redis import RedisBuckets

        try:
            return RedisBuckets(chosen)
        except ImportError as exc:
            raise UsageError(
                f"shared rate limits in Redis need an extra: pip install 'interlock[redis]' ({exc})"
            ) from None
    return MemoryBuckets()


def open_spend(ledger: str | None) -> SpendStore:
    """Where the spend caps of runs on `ledger` (a store URL) are counted; opened on its
    first use, so a process without caps never connects for them."""
    from interlock.providers.spend_guard import MemorySpend

    if not ledger or not ledger.startswith(("postgresql://", "postgres://", "sqlite://")):
        return MemorySpend()
    return _LazySpend(ledger)


def open_batches(ledger: str | None) -> BatchStore:
    """Where batch-mode model calls of runs on `ledger` are recorded (the ledger itself, so
    that a resumed orchestrator finds its provider batches); this process's memory without
    a SQLite or PostgreSQL ledger."""
    from interlock.providers.batch_store import MemoryBatches

    if ledger and ledger.startswith("sqlite://"):
        from interlock.storage.provider_batches_sqlite import SQLiteBatches

        return SQLiteBatches(ledger.removeprefix("sqlite://"))
    if ledger and ledger.startswith(("postgresql://", "postgres://")):
        from interlock.storage.provider_batches_pg import PostgresBatches

        return PostgresBatches(ledger)
    return MemoryBatches()


def ledger_of(store: object) -> str | None:
    """The URL of a store object's ledger (a SQLite file or a PostgreSQL database)."""
    url = getattr(store, "url", None)
    if isinstance(url, str):
        return url
    path = getattr(store, "path", None)
    return f"sqlite://{path}" if path is not None else None


class _LazySpend:
    def __init__(self, ledger: str) -> None:
        self.ledger = ledger
        self.where = ledger if ledger.startswith("sqlite://") else "PostgreSQL"
        self._opened: SpendStore | None = None

    def _store(self) -> SpendStore:
        if self._opened is None:
            if self.ledger.startswith("sqlite://"):
                from interlock.storage.spend_sqlite import SQLiteSpend

                self._opened = SQLiteSpend(self.ledger.removeprefix("sqlite://"))
            else:
                from interlock.storage.spend_pg import PostgresSpend

                self._opened = PostgresSpend(self.ledger)
            self.where = self._opened.where
        return self._opened

    def reserve(
        self, *, hold: str, keys: Sequence[CapKey], amount_usd: float, now: float, expires: float
    ) -> str | None:
        return self._store().reserve(
            hold=hold, keys=keys, amount_usd=amount_usd, now=now, expires=expires
        )

    def settle(self, *, hold: str, keys: Sequence[CapKey], spent_usd: float) -> None:
        self._store().settle(hold=hold, keys=keys, spent_usd=spent_usd)

    def usage(self, *, now: float) -> list[CapUsage]:
        return self._store().usage(now=now)

    def close(self) -> None:
        if self._opened is not None:
            self._opened.close()
            self._opened = None


def share_limits_for(
    store_url: str | None, *, redis_url: str | None = None, env: Mapping[str, str] | None = None
) -> BucketStore:
    """Choose the bucket store for this process (`open_buckets`) and hand it to the
    providers for the rest of the process's life; a store of this process only changes
    nothing."""
    from interlock.providers.batch_store import use_batch_store
    from interlock.providers.spend_guard import use_spend_store

    use_spend_store(open_spend(store_url)).close()
    use_batch_store(open_batches(store_url)).close()
    buckets = open_buckets(store_url, redis_url=redis_url, env=env)
    if buckets.shared:
        from interlock.providers.factory import share_limits

        share_limits(buckets).close()
    return buckets


@contextlib.contextmanager
def limits_shared_for(store_url: str | None, *, store: object = None) -> Iterator[None]:
    """While runs on `store_url` (`store`'s ledger, when it has no URL) are driven in this
    process, their providers' limits are shared with every process on that store; then they
    are this process's own again (an object driving runs of one ledger must not leave its
    buckets to the next). Their spend caps are counted in that ledger meanwhile."""
    from interlock.providers.batch_store import use_batch_store
    from interlock.providers.spend_guard import use_spend_store

    spend = open_spend(store_url or ledger_of(store))
    before = use_spend_store(spend)
    batches = open_batches(store_url or ledger_of(store))
    batches_before = use_batch_store(batches)
    try:
        with _buckets_shared_for(store_url or ledger_of(store)):
            yield
    finally:
        use_spend_store(before)
        spend.close()
        use_batch_store(batches_before)
        batches.close()


@contextlib.contextmanager
def _buckets_shared_for(store_url: str | None) -> Iterator[None]:
    buckets = open_buckets(store_url)
    if not buckets.shared:
        yield
        return
    from interlock.providers.factory import share_limits

    previous = share_limits(buckets)
    try:
        yield
    finally:
        share_limits(previous)
        buckets.close()
