"""How a process spends a shared bucket: leases in chunks, debts carried by the next round
trip, leases given back when they age, holds that empty them; and how a provider's
rate-limit headers become a hold."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from interlock.providers import HttpEndpoint, ProviderTimeout, RetryPolicy
from interlock.providers.buckets import Ask, Grant, MemoryBuckets
from interlock.providers.limits import LEASE_TTL_S, ProviderLimiter
from interlock.providers.retry import hold_of

from .fake_llm_server import FakeServer
from .test_limits_and_retry import FakeTime


class SharedMemory(MemoryBuckets):
    """The in-process store taken for a shared one, recording every ask: the lease logic
    of a fleet, with a clock the test turns."""

    shared = True

    def __init__(self, time: FakeTime) -> None:
        super().__init__(clock=time.clock)
        self.asks: list[Ask] = []

    def take(self, name: str, ask: Ask) -> Grant:
        self.asks.append(ask)
        return super().take(name, ask)


def test_a_shared_bucket_is_leased_in_chunks() -> None:
    """At 2,400 requests a minute a process takes ten at a time: ten requests cost one
    round trip, not ten."""
    time = FakeTime()
    store = SharedMemory(time)
    limiter = ProviderLimiter(requests_per_minute=2400, store=store, clock=time.clock)

    async def run() -> None:
        for _ in range(10):
            await limiter.admit(0)

    asyncio.run(run())
    assert len(store.asks) == 1
    assert store.asks[0].need == 1 and store.asks[0].want == pytest.approx(10)


def test_an_aged_lease_goes_back_with_the_next_round_trip() -> None:
    """Leased requests not sent within the lease's life are given back (sending them later
    would burst past the rate), on the next round trip rather than one of their own."""
    time = FakeTime()
    store = SharedMemory(time)
    limiter = ProviderLimiter(requests_per_minute=2400, store=store, clock=time.clock)
    asyncio.run(limiter.admit(0))  # leases 10, spends 1
    time.now += LEASE_TTL_S + 0.1
    asyncio.run(limiter.admit(0))
    assert len(store.asks) == 2
    assert store.asks[1].force == pytest.approx(-9)


def test_token_debts_ride_with_the_next_round_trip() -> None:
    """A call that used more tokens than estimated owes the difference: it is taken with
    the next request's round trip, which costs no extra one."""
    time = FakeTime()
    store = SharedMemory(time)
    limiter = ProviderLimiter(tokens_per_minute=1_000_000, store=store, clock=time.clock)
    asyncio.run(limiter.admit(100))
    limiter.settle(100, 250, "")
    calls = len(store.asks)
    asyncio.run(limiter.admit(100_000))  # more than the lease holds: a round trip
    assert len(store.asks) == calls + 1
    assert store.asks[-1].force == pytest.approx(150)


def test_a_hold_drops_the_lease_and_stops_every_caller() -> None:
    """After a hold the process's own lease is void: its next request waits too."""
    time = FakeTime()
    store = SharedMemory(time)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.now += seconds

    limiter = ProviderLimiter(requests_per_minute=2400, store=store, clock=time.clock, sleep=sleep)

    async def run() -> None:
        await limiter.admit(0)
        await limiter.hold_off(5.0)
        await limiter.admit(0)

    asyncio.run(run())
    assert waits and waits[0] == pytest.approx(5.0 + 1 / 40)


def test_limits_per_model_keep_each_model_apart() -> None:
    """With limits per model, one model's empty bucket does not hold another's calls; with
    limits per key, it does."""
    time = FakeTime()
    for per_model, other_waits in ((True, False), (False, True)):
        waits: list[float] = []

        async def sleep(seconds: float, waits: list[float] = waits) -> None:
            waits.append(seconds)
            time.now += seconds

        limiter = ProviderLimiter(
            requests_per_minute=2, per_model=per_model, clock=time.clock, sleep=sleep
        )

        async def run(limiter: ProviderLimiter = limiter) -> None:
            for _ in range(2):
                await limiter.admit(0, "model-a")
            await limiter.admit(0, "model-b")

        asyncio.run(run())
        assert bool(waits) is other_waits


def test_a_429_in_one_call_holds_the_others_of_the_process() -> None:
    """Within one process (a run on SQLite) a hold stops the other calls too: they no longer
    each find out with a 429 of their own."""
    time = FakeTime()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.now += seconds

    limiter = ProviderLimiter(requests_per_minute=600, clock=time.clock, sleep=sleep)

    async def run() -> None:
        await limiter.hold_off(3.0)
        await limiter.admit(10)

    asyncio.run(run())
    assert waits and waits[0] >= 3.0


NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "headers", "hold"),
    [
        (429, {"Retry-After": "7"}, 7.0),
        (429, {"retry-after-ms": "1500"}, 1.5),
        # OpenAI: no Retry-After, but the exhausted limit says when it resets.
        (429, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30.5s"},
         90.5),
        (429, {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "20ms",
               "x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "9s"}, 0.02),
        # Anthropic: RFC 3339 reset times.
        (429, {"anthropic-ratelimit-requests-remaining": "0",
               "anthropic-ratelimit-requests-reset": "2026-01-01T12:00:04Z"}, 4.0),
        # A success, even with nothing left (its reset is when the limit is whole again),
        # or a 429 that says nothing: no hold.
        (200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"}, None),
        (429, {}, None),
        (429, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, None),
    ],
)  # fmt: skip
def test_rate_limit_headers_become_a_hold(
    status: int, headers: dict[str, str], hold: float | None
) -> None:
    """Retry-After wins on a 429; otherwise the reset of a limit with nothing left; a
    success never holds."""
    found = hold_of(status, headers, now=NOW)
    assert found == (None if hold is None else pytest.approx(hold))


def test_a_hold_longer_than_the_call_times_the_call_out(server: FakeServer) -> None:
    """A call whose key is held past its timeout ends as a timeout at its deadline, saying
    why, instead of sleeping through the hold; nothing is sent."""
    limiter = ProviderLimiter(requests_per_minute=600)
    asyncio.run(limiter.hold_off(600.0))
    endpoint = HttpEndpoint(
        name="fake", base_url=server.url + "/v1", limiter=limiter, retry=RetryPolicy()
    )

    async def call() -> None:
        await endpoint.stream(
            path="chat/completions", headers={}, body={"model": "gpt-test", "messages": []},
            timeout=0.2, estimated_tokens=10, secret=None, consume=_nothing,
        )  # fmt: skip

    with pytest.raises(ProviderTimeout, match="rate limits of its key"):
        asyncio.run(call())
    assert server.requests == []


async def _nothing(events: object) -> None:
    raise AssertionError("no stream is expected")
