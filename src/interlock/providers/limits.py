"""Per-provider limits: a concurrency cap per process, and per-minute rate limits that
every process sharing a store obeys together.

A wide fan-out would otherwise open dozens of requests at once and trip the provider's own
limits, turning into a storm of 429s. Each provider gets one `ProviderLimiter`: a
concurrency cap (this process's calls) plus token buckets for requests per minute and
tokens per minute, kept in a `BucketStore` (`interlock.providers.buckets`). On SQLite that
store is this process's memory; on PostgreSQL or Redis it is shared by the fleet, so N
workers send what one key allows, not N times it.

Round trips are saved by leases: a process takes up to a quarter of a second of the rate
at once and spends it locally. A leased unit not spent within `LEASE_TTL_S` goes back
(the bucket has refilled meanwhile: spending it later would burst). A process that dies
holding a lease loses at most that much of the bucket, which refills as ever: nothing
waits on a dead process.

A provider's 429 with a wait (or rate-limit headers saying it is exhausted) holds the
bucket for everyone (`hold_off`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from interlock.providers.buckets import Ask, BucketStore, Grant, MemoryBuckets, finite_wait
from interlock.providers.retry import SleepFn

logger = logging.getLogger("interlock.providers")

Clock = Callable[[], float]
"""Monotonic seconds; tests inject a fake one."""

LEASE_S = 0.25
"""A lease holds about this many seconds of a shared bucket's rate."""
LEASE_TTL_S = 1.0
"""Leased units not spent by then go back to the shared bucket."""
FALLBACK_S = 10.0
"""After the shared store failed, limits are this process's own for this long."""
UNLIMITED_PER_MINUTE = 1e12
"""The rate of the bucket of a provider without limits: it only carries holds (a 429's
wait) to every call."""


class TokenBucket:
    """A bucket refilled continuously at `per_minute / 60` units per second.

    It starts full, so a quiet provider accepts a burst of up to one minute's allowance.
    """

    def __init__(self, per_minute: float, *, clock: Clock = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError("a rate limit must be positive")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._level = self.capacity
        self._updated = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._updated) * self.rate)
        self._updated = now

    def wait_time(self, amount: float) -> float:
        """Seconds until `amount` units are available (0 when they are now)."""
        self._refill()
        # A single request larger than the whole bucket would wait forever; let it go
        # once the bucket is full instead.
        needed = min(amount, self.capacity)
        if self._level >= needed:
            return 0.0
        return (needed - self._level) / self.rate

    def take(self, amount: float) -> None:
        """Remove `amount` units; the level may go below zero to record overuse."""
        self._refill()
        self._level -= amount

    def give_back(self, amount: float) -> None:
        """Return units that were reserved but not used (never above capacity)."""
        self._refill()
        self._level = min(self.capacity, self._level + amount)


class SharedBucket:
    """One bucket as this process sees it: where it is stored, and what it leased of it.

    Args:
        store: Where the bucket lives.
        name: Its name there (`ProviderLimiter` builds it from a hash of the key).
        per_minute: Its rate; a full bucket holds one minute of it.
        clock: Monotonic clock of the leases.
        fallback: Used while the shared store is unreachable.
    """

    def __init__(
        self,
        *,
        store: BucketStore,
        name: str,
        per_minute: float,
        clock: Clock = time.monotonic,
        fallback: BucketStore | None = None,
    ) -> None:
        if per_minute <= 0:
            raise ValueError("a rate limit must be positive")
        self.store = store
        self.name = name
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        # In one process a lease saves nothing: take exactly what is asked.
        self.chunk = self.rate * LEASE_S if store.shared else 0.0
        # The in-process store on plain numbers: a call's hot path (see `step_values`).
        self._memory = store if isinstance(store, MemoryBuckets) and not store.shared else None
        self._clock = clock
        self._fallback = fallback or MemoryBuckets(clock=clock)
        self._broken_until = 0.0
        self._left = 0.0  # leased units not spent yet
        self._expires = 0.0
        self._owed = 0.0  # to take (or, negative, give back) with the next round trip
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    async def _ask(self, ask: Ask) -> Grant:
        """`ask` of the store (off the event loop when it does I/O), or of the fallback while
        the store is unreachable: calls then go on under this process's own limits."""
        if not self.store.shared:
            return self.store.take(self.name, ask)
        now = self._clock()
        if now >= self._broken_until:
            try:
                return await asyncio.to_thread(self.store.take, self.name, ask)
            except Exception as exc:  # any failure of the store: never a failed call
                self._broken_until = now + FALLBACK_S
                logger.warning(
                    "shared rate limits at %s unreachable (%s: %s); limits are this "
                    "process's own for %gs",
                    self.store.where, type(exc).__name__, exc, FALLBACK_S,
                )  # fmt: skip
        return self._fallback.take(self.name, ask)

    def _ask_of(self, **fields: float) -> Ask:
        owed, self._owed = self._owed, 0.0
        return Ask(rate=self.rate, capacity=self.capacity, force=owed, **fields)

    def _expire(self) -> None:
        if self._left and self._clock() >= self._expires:
            self._owed -= self._left
            self._left = 0.0

    def try_now(self, amount: float) -> float | None:
        """`reserve` without a round trip: 0 when the lease (or this process's bucket) had
        the units, the seconds to wait when this process's bucket has not, None when the
        shared store must be asked (`reserve`)."""
        self._expire()
        if self._left >= amount:
            self._left -= amount
            return 0.0
        if not self.store.shared:
            return self._reserve_now(amount)
        return None

    async def reserve(self, amount: float) -> float:
        """Reserve `amount` units: 0 when they are reserved, else the seconds to wait."""
        now = self.try_now(amount)
        if now is not None:
            return now
        async with self._loop_lock():
            self._expire()  # another task may have refilled the lease meanwhile
            if self._left >= amount:
                self._left -= amount
                return 0.0
            need = amount - self._left
            grant = await self._ask(self._ask_of(need=need, want=max(need, self.chunk)))
            if grant.granted <= 0:
                return max(finite_wait(grant.wait_s), 1e-3)
            if not self._left:
                self._expires = self._clock() + LEASE_TTL_S
            self._left += grant.granted - amount
            return 0.0

    def _reserve_now(self, amount: float) -> float:
        owed, self._owed = self._owed, 0.0
        if self._memory is not None:
            granted, wait = self._memory.apply(
                self.name, self.rate, self.capacity, amount, amount, owed
            )
        else:
            ask = Ask(rate=self.rate, capacity=self.capacity, need=amount, want=amount, force=owed)
            grant = self.store.take(self.name, ask)
            granted, wait = grant.granted, grant.wait_s
        if granted <= 0:
            return max(finite_wait(wait), 1e-3)
        self._left += granted - amount
        return 0.0

    def unreserve(self, amount: float) -> None:
        """Put back units reserved for a request that is not sent now."""
        self._left += amount

    def settle(self, delta: float) -> None:
        """Take `delta` more units (a call used more than it reserved), or give `-delta`
        back; carried by the next round trip, none of its own."""
        if not self.store.shared:
            self.store.take(self.name, Ask(rate=self.rate, capacity=self.capacity, force=delta))
        else:
            self._owed += delta

    async def hold_off(self, seconds: float) -> None:
        """Let no unit out for `seconds`, in every process sharing the bucket; this
        process's lease is given up (the provider has just said there is nothing left)."""
        self._left = 0.0
        await self._ask(self._ask_of(hold_s=seconds))


class ProviderLimiter:
    """Concurrency and rate limits for one provider.

    Use `async with limiter.slot():` around a whole call, `await limiter.admit(n)` before
    each HTTP request, and `limiter.settle(n, actual)` once the real token count is known.
    `hold_off` carries a provider's "wait" to every call sharing the buckets.

    Args:
        max_concurrency: Calls of this process at once (never shared: a slot is held for
            the whole call, and a process that died would hold it).
        requests_per_minute: Requests allowed per minute, in all processes sharing `store`.
        tokens_per_minute: Tokens (estimated, then settled) per minute, likewise.
        clock: Monotonic clock of the in-process buckets and of leases.
        sleep: Used for rate-limit waits.
        store: Where the buckets live (default: this process's memory).
        key: What names the buckets in `store` (a hash of the endpoint and key).
        per_model: Each model has buckets of its own (the provider limits each model).
    """

    def __init__(
        self,
        *,
        max_concurrency: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        clock: Clock = time.monotonic,
        sleep: SleepFn = asyncio.sleep,
        store: BucketStore | None = None,
        key: str = "",
        per_model: bool = False,
    ) -> None:
        self.max_concurrency = max_concurrency
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.store: BucketStore = store or MemoryBuckets(clock=clock)
        self.key = key
        self.per_model = per_model
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[str, tuple[SharedBucket | None, SharedBucket | None]] = {}
        self._held: dict[str, float] = {}  # holds of a scope without a requests bucket
        # asyncio primitives belong to one event loop; keep one semaphore per loop so the
        # limiter survives a process that runs several loops one after another.
        self._semaphore: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def buckets(self, model: str = "") -> tuple[SharedBucket | None, SharedBucket | None]:
        """The requests bucket and the tokens bucket that calls to `model` use (None: no
        such limit; a shared store always has a requests bucket, to carry holds)."""
        scope = model if self.per_model else ""
        found = self._buckets.get(scope)
        if found is None:
            prefix = ":".join(part for part in (self.key, scope) if part)

            def bucket(unit: str, per_minute: float) -> SharedBucket:
                name = f"{prefix}:{unit}" if prefix else unit
                return SharedBucket(
                    store=self.store, name=name, per_minute=per_minute, clock=self._clock
                )

            requests = None
            if self.requests_per_minute or self.store.shared:
                requests = bucket("requests", self.requests_per_minute or UNLIMITED_PER_MINUTE)
            tokens = bucket("tokens", self.tokens_per_minute) if self.tokens_per_minute else None
            found = self._buckets[scope] = (requests, tokens)
        return found

    def _loop_semaphore(self) -> asyncio.Semaphore | None:
        if self.max_concurrency is None:
            return None
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore[0] is not loop:
            self._semaphore = (loop, asyncio.Semaphore(self.max_concurrency))
        return self._semaphore[1]

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the provider's concurrent-call slots for the duration of a call."""
        semaphore = self._loop_semaphore()
        if semaphore is None:
            yield
            return
        async with semaphore:
            yield

    async def admit(self, estimated_tokens: int, model: str = "") -> None:
        """Wait until one more request and `estimated_tokens` fit in the per-minute limits."""
        requests, tokens = self.buckets(model)
        scope = model if self.per_model else ""
        while True:
            # A hold kept here: a provider without limits in this process only (a bucket
            # of its own would cost every call a few microseconds for nothing).
            wait = self._held.get(scope, 0.0) - self._clock() if self._held else 0.0
            # No coroutine when the units are at hand: this runs before every request.
            if wait <= 0 and requests is not None:
                now = requests.try_now(1)
                wait = await requests.reserve(1) if now is None else now
            if wait <= 0 and tokens is not None:
                now = tokens.try_now(estimated_tokens)
                wait = await tokens.reserve(estimated_tokens) if now is None else now
                if wait > 0 and requests is not None:
                    requests.unreserve(1)  # both or neither: the request waits whole
            if wait <= 0:
                return
            await self._sleep(wait)

    def settle(self, estimated_tokens: int, actual_tokens: int, model: str = "") -> None:
        """Correct the token bucket once the provider reported what the call really used."""
        tokens = self.buckets(model)[1]
        if tokens is not None and actual_tokens != estimated_tokens:
            tokens.settle(actual_tokens - estimated_tokens)

    async def hold_off(self, seconds: float, model: str = "") -> None:
        """The provider asked to wait `seconds`: no call to `model` (to any model, unless
        limits are per model) leaves before then, in any process sharing the buckets."""
        if seconds <= 0:
            return
        requests, tokens = self.buckets(model)
        if requests is None:
            scope = model if self.per_model else ""
            self._held[scope] = max(self._held.get(scope, 0.0), self._clock() + seconds)
        for bucket in (requests, tokens):
            if bucket is not None:
                await bucket.hold_off(seconds)
