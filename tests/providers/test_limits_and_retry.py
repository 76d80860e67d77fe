"""Rate limiting with an injectable clock, and the retry timing rules."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest

from interlock.providers import ProviderLimiter, RetryPolicy, TokenBucket, parse_retry_after


class FakeTime:
    """A clock and a sleep that advances it, so rate limits can be tested without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def test_bucket_refills_at_the_per_minute_rate() -> None:
    """A bucket of 60 per minute refills one unit per second after being emptied."""
    time = FakeTime()
    bucket = TokenBucket(60, clock=time.clock)
    assert bucket.wait_time(60) == 0
    bucket.take(60)
    assert bucket.wait_time(1) == pytest.approx(1.0)
    time.now += 0.5
    assert bucket.wait_time(1) == pytest.approx(0.5)
    time.now += 100
    assert bucket.wait_time(60) == 0  # never above capacity
    bucket.take(60)
    assert bucket.wait_time(60) == pytest.approx(60)


def test_request_larger_than_the_bucket_is_not_stuck_forever() -> None:
    """A single request above capacity proceeds once the bucket is full."""
    bucket = TokenBucket(100, clock=FakeTime().clock)
    assert bucket.wait_time(500) == 0


def test_requests_per_minute_spread_a_burst() -> None:
    """With 30 requests per minute, the 31st request waits two seconds of (fake) time."""
    time = FakeTime()
    limiter = ProviderLimiter(requests_per_minute=30, clock=time.clock, sleep=time.sleep)

    async def main() -> None:
        for _ in range(31):
            await limiter.admit(0)

    asyncio.run(main())
    assert time.now == pytest.approx(2.0)


def test_tokens_per_minute_are_settled_with_actual_usage() -> None:
    """Underused estimates are returned and overuse makes the next request wait."""
    time = FakeTime()
    limiter = ProviderLimiter(tokens_per_minute=6000, clock=time.clock, sleep=time.sleep)

    async def main() -> None:
        await limiter.admit(6000)
        limiter.settle(6000, 1000)  # 5000 given back
        await limiter.admit(5000)
        assert time.now == 0
        limiter.settle(5000, 8000)  # 3000 more than reserved: the bucket is at -3000
        await limiter.admit(1000)

    asyncio.run(main())
    assert time.now == pytest.approx(40.0)  # 4000 tokens at 100 per second


def test_concurrency_cap_holds_across_a_fan_out() -> None:
    """Fifty concurrent calls never have more than max_concurrency in flight."""
    limiter = ProviderLimiter(max_concurrency=3)
    in_flight = 0
    peak = 0

    async def call() -> None:
        nonlocal in_flight, peak
        async with limiter.slot():
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.001)
            in_flight -= 1

    async def main() -> None:
        await asyncio.gather(*(call() for _ in range(50)))

    asyncio.run(main())
    assert peak == 3


def test_limiter_works_across_event_loops() -> None:
    """The same limiter can be used by consecutive asyncio.run calls: in each, every call
    gets through and never two at once."""
    limiter = ProviderLimiter(max_concurrency=1)
    holding = 0
    seen: list[int] = []  # how many held a slot, as each call got its own

    async def hold() -> None:
        nonlocal holding
        async with limiter.slot():
            holding += 1
            seen.append(holding)
            await asyncio.sleep(0.001)  # long enough that the other calls must wait
            holding -= 1

    async def main() -> None:
        await asyncio.gather(*(hold() for _ in range(3)))

    asyncio.run(main())
    asyncio.run(main())
    assert seen == [1] * 6


def test_retry_after_parses_seconds_dates_and_garbage() -> None:
    """Retry-After accepts delta-seconds and HTTP dates, and ignores what it cannot read."""
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("12", now=now) == 12.0
    assert parse_retry_after("1.5", now=now) == 1.5
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("-5", now=now) == 0.0
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after(None) is None


def test_backoff_is_exponential_capped_and_jittered() -> None:
    """Each delay lies between half and all of min(cap, base * 2**n) and varies with jitter."""
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=10.0, rng=random.Random(1))
    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)]:
        delays = {policy.backoff(retry) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1
    assert policy.delay(1, retry_after=42.0) == 42.0
