"""Per-provider limits shared by every call in the process.

A wide fan-out would otherwise open dozens of requests at once and trip the provider's own
limits, turning into a storm of 429s. Each provider name gets one `ProviderLimiter`:
a concurrency cap plus token buckets for requests per minute and tokens per minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from interlock.providers.retry import SleepFn

Clock = Callable[[], float]
"""Monotonic seconds; tests inject a fake one."""


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


class ProviderLimiter:
    """Concurrency and rate limits for one provider.

    Use `async with limiter.slot():` around a whole call, `await limiter.admit(n)` before
    each HTTP request, and `limiter.settle(n, actual)` once the real token count is known.
    """

    def __init__(
        self,
        *,
        max_concurrency: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        clock: Clock = time.monotonic,
        sleep: SleepFn = asyncio.sleep,
    ) -> None:
        self.max_concurrency = max_concurrency
        self._requests = (
            TokenBucket(requests_per_minute, clock=clock) if requests_per_minute else None
        )
        self._tokens = TokenBucket(tokens_per_minute, clock=clock) if tokens_per_minute else None
        self._sleep = sleep
        # asyncio primitives belong to one event loop; keep one semaphore per loop so the
        # limiter survives a process that runs several loops one after another.
        self._semaphore: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

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

    async def admit(self, estimated_tokens: int) -> None:
        """Wait until one more request and `estimated_tokens` fit in the per-minute limits."""
        while True:
            waits = [0.0]
            if self._requests is not None:
                waits.append(self._requests.wait_time(1))
            if self._tokens is not None:
                waits.append(self._tokens.wait_time(estimated_tokens))
            wait = max(waits)
            if wait <= 0:
                # No await between the check and the take, so concurrent tasks cannot both
                # pass the check on the same units.
                if self._requests is not None:
                    self._requests.take(1)
                if self._tokens is not None:
                    self._tokens.take(estimated_tokens)
                return
            await self._sleep(wait)

    def settle(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Correct the token bucket once the provider reported what the call really used."""
        if self._tokens is None:
            return
        if actual_tokens > estimated_tokens:
            self._tokens.take(actual_tokens - estimated_tokens)
        else:
            self._tokens.give_back(estimated_tokens - actual_tokens)
