"""Which bucket store a process's rate limits use, from the URL of its store.

PostgreSQL and Redis share the buckets with every process using the same database or
server (`buckets_pg`, `buckets_redis`); anything else (SQLite, memory, no URL) keeps them
in the process, as a single machine needs. ``INTERLOCK_LIMITS`` names the store outright:
a ``postgresql://`` or ``redis://`` URL, or ``process``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from interlock.errors import UsageError
from interlock.providers.buckets import BucketStore, MemoryBuckets

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


def share_limits_for(
    store_url: str | None, *, redis_url: str | None = None, env: Mapping[str, str] | None = None
) -> BucketStore:
    """Choose the bucket store for this process (`open_buckets`) and hand it to the
    providers for the rest of the process's life; a store of this process only changes
    nothing."""
    buckets = open_buckets(store_url, redis_url=redis_url, env=env)
    if buckets.shared:
        from interlock.providers.factory import share_limits

        share_limits(buckets).close()
    return buckets


@contextlib.contextmanager
def limits_shared_for(store_url: str | None) -> Iterator[None]:
    """While runs on `store_url` are driven in this process, their providers' limits are
    shared with every process on that store; then they are this process's own again (an
    object driving runs of one ledger must not leave its buckets to the next)."""
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
