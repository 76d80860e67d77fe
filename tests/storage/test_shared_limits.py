"""Provider limits shared through PostgreSQL and Redis: processes of a fleet (two limiters on
two handles stand for two processes) obey one key's limits together, and a 429 that one of
them gets holds the others."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from tests.providers.fake_llm_server import FakeServer, FakeState, Fault

from interlock.providers import ModelConfig, ProviderError, ProviderRegistry, RetryPolicy
from interlock.providers.base import ModelRequest
from interlock.providers.buckets import BucketStore, key_digest
from interlock.providers.limits import ProviderLimiter
from interlock.providers.redaction import Secret
from interlock.providers.transport import HttpEndpoint
from interlock.runtime.shared_limits import open_buckets
from interlock.storage.buckets_pg import PostgresBuckets
from interlock.storage.buckets_redis import RedisBuckets

REDIS = os.environ.get("INTERLOCK_TEST_REDIS", "redis://127.0.0.1:6379/7")
KEY = "test-key-0123456789"

Opener = Callable[[], BucketStore]


class Waited(Exception):
    """Raised by `refusing_sleep`: the limiter wanted to wait this long."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


async def refusing_sleep(seconds: float) -> None:
    """A sleep that stops the caller instead, saying how long it would have waited."""
    raise Waited(seconds)


@pytest.fixture(params=["postgres", "redis"])
def opener(request: pytest.FixtureRequest) -> Iterator[Opener]:
    """Opens handles on one fresh set of shared buckets (each stands for a process)."""
    opened: list[BucketStore] = []
    prefix = f"il-test:{uuid.uuid4().hex}:"
    url = request.getfixturevalue("pg_database") if request.param == "postgres" else REDIS

    def open_one() -> BucketStore:
        store: BucketStore = (
            PostgresBuckets(url)
            if request.param == "postgres"
            else RedisBuckets(url, prefix=prefix)
        )
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()
    if request.param == "redis":
        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible server on 127.0.0.1."""
    state = FakeState(api_key=KEY, models={"gpt-test", "gpt-other"}, reply=["Hello", "."])
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    state.stopping.set()
    srv.shutdown()
    srv.server_close()
    thread.join()


def limiter(store: BucketStore, **limits: Any) -> ProviderLimiter:
    """A limiter on `store` for one key, whose waits raise `Waited`."""
    return ProviderLimiter(store=store, key="k1", sleep=refusing_sleep, **limits)


async def admitted_until_a_wait(limiter: ProviderLimiter) -> int:
    """How many requests `limiter` lets out before it would wait."""
    count = 0
    try:
        while True:
            await limiter.admit(10)
            count += 1
    except Waited:
        return count


def test_two_processes_together_get_what_the_key_allows(opener: Opener) -> None:
    """Two limiters on two handles send 30 requests between them under 30 per minute,
    not 30 each as limits kept per process would."""
    first, second = (
        limiter(opener(), requests_per_minute=30),
        limiter(opener(), requests_per_minute=30),
    )

    async def both() -> list[int]:
        return list(
            await asyncio.gather(admitted_until_a_wait(first), admitted_until_a_wait(second))
        )

    started = time.monotonic()
    counts = asyncio.run(both())
    # The bucket refills one request each 2 s while the test runs: never a second minute's
    # worth, as two buckets of their own would give.
    refilled = math.ceil((time.monotonic() - started) / 2)
    assert 30 <= sum(counts) <= 30 + refilled, counts


def test_token_limits_are_shared_and_settled(opener: Opener) -> None:
    """Tokens per minute are one budget for both processes, corrected by what calls used."""
    first = limiter(opener(), tokens_per_minute=100)
    second = limiter(opener(), tokens_per_minute=100)

    async def run() -> float:
        for _ in range(5):
            await first.admit(10)  # 50 reserved
        first.settle(50, 90)  # the calls used 40 more than estimated
        await first.admit(1)  # the debt rides with the next round trip: 9 left
        await second.admit(9)
        try:
            await second.admit(1)
        except Waited as waited:
            return waited.seconds
        raise AssertionError("the bucket should be empty")

    assert asyncio.run(run()) > 0


def test_a_429_in_one_process_holds_the_other(opener: Opener, server: FakeServer) -> None:
    """A 429 with Retry-After answered to one process's call makes another process's next
    request wait for it, before it is ever sent."""
    hit, other = opener(), opener()
    endpoint = HttpEndpoint(
        name="fake",
        base_url=server.url + "/v1",
        limiter=ProviderLimiter(store=hit, key="k1", requests_per_minute=6000),
        retry=RetryPolicy(max_attempts=1),
    )
    server.fail_next(Fault(status=429, retry_after="20"))

    async def call() -> None:
        await endpoint.stream(
            path="chat/completions", headers={"Authorization": f"Bearer {KEY}"},
            body={"model": "gpt-test", "messages": []}, timeout=10, estimated_tokens=10,
            secret=None, consume=_never,
        )  # fmt: skip

    with pytest.raises(ProviderError, match="429"):
        asyncio.run(call())
    with pytest.raises(Waited) as waited:
        asyncio.run(limiter(other, requests_per_minute=6000).admit(10))
    assert 10 < waited.value.seconds <= 20.1  # the rest of the 20 s


async def _never(events: object) -> None:
    raise AssertionError("no stream is expected")


def test_a_429_naming_an_exhausted_limit_holds_everyone(
    opener: Opener, server: FakeServer, tmp_path: Path
) -> None:
    """A 429 without Retry-After whose headers say the key has no requests left until a
    reset holds every process until then, through the providers' own registry."""
    hit, other = opener(), opener()
    registry = ProviderRegistry(store=hit, sleep=refusing_sleep)
    config = _config(server, tmp_path)
    provider = registry.build(config.resolve("a"), config)
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "12s"}
    server.fail_next(Fault(status=429, headers=headers))
    with pytest.raises(Waited):  # its own retry waits for the reset too
        asyncio.run(provider.complete(_request()))
    # The same endpoint and key name the same buckets in another process.
    key = key_digest(base_url=f"{server.url}/v1", key=Secret(KEY))
    with pytest.raises(Waited) as waited:
        asyncio.run(ProviderLimiter(store=other, key=key, sleep=refusing_sleep).admit(1))
    assert 6 < waited.value.seconds <= 12.1  # the rest of the 12 s


def _config(server: FakeServer, folder: Path, *, per_model: bool = False) -> ModelConfig:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "interlock.toml").write_text(
        f"""
[providers.fake]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_KEY"
requests_per_minute = 600
limits_per_model = {"true" if per_model else "false"}

[models.a]
provider = "fake"
model = "gpt-test"

[models.b]
provider = "fake"
model = "gpt-other"
"""
    )
    return ModelConfig.load([folder], env={"FAKE_KEY": KEY})


def _request(**fields: object) -> ModelRequest:
    values: dict[str, object] = {
        "alias": "a", "model": "gpt-test", "system": "", "prompt": "Hi", "timeout": 10.0,
        "idempotency_key": "run-1/a/1",
    }  # fmt: skip
    values.update(fields)
    return ModelRequest(**values)  # type: ignore[arg-type]


def test_buckets_are_named_by_a_hash_of_the_key_and_by_model(
    pg_database: str, server: FakeServer, tmp_path: Path
) -> None:
    """The rows of a provider whose limits are per model name each model, and never hold
    the key: they are named by a hash of the endpoint and key."""
    registry = ProviderRegistry(store=PostgresBuckets(pg_database))
    config = _config(server, tmp_path, per_model=True)
    for alias, model in (("a", "gpt-test"), ("b", "gpt-other")):
        provider = registry.build(config.resolve(alias), config)
        asyncio.run(provider.complete(_request(alias=alias, model=model)))
    registry.store.close()
    with psycopg.connect(pg_database) as db:
        names = sorted(str(row[0]) for row in db.execute("SELECT name FROM rate_buckets"))
    assert len(names) == 2
    assert [name.split(":")[1:] for name in names] == [
        ["gpt-other", "requests"],
        ["gpt-test", "requests"],
    ]
    assert names[0].split(":")[0] == names[1].split(":")[0]  # one key
    assert all(KEY not in name and server.url not in name for name in names)


def test_an_unreachable_store_leaves_calls_under_this_process_limits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the shared store down, requests still go out, under this process's own
    buckets, and the log says so."""
    down = PostgresBuckets("postgresql://postgres@127.0.0.1:9/nothing", connect_timeout=1)
    limits = limiter(down, requests_per_minute=2)
    with caplog.at_level(logging.WARNING, logger="interlock.providers"):

        async def run() -> int:
            return await admitted_until_a_wait(limits)

        assert asyncio.run(run()) == 2  # this process's bucket of 2
    assert "unreachable" in caplog.text and "this process's own" in caplog.text


def test_the_store_url_chooses_where_buckets_live(pg_database: str) -> None:
    """PostgreSQL and Redis URLs share buckets; SQLite or none keeps them in the process;
    INTERLOCK_LIMITS chooses outright, and a worker's Redis wins over its database."""
    assert type(open_buckets(pg_database, env={})).__name__ == "PostgresBuckets"
    assert type(open_buckets(pg_database, redis_url=REDIS, env={})).__name__ == "RedisBuckets"
    assert type(open_buckets("sqlite:///x.db", env={})).__name__ == "MemoryBuckets"
    assert type(open_buckets(None, env={})).__name__ == "MemoryBuckets"
    chosen = open_buckets(None, env={"INTERLOCK_LIMITS": REDIS})
    assert chosen.shared and type(chosen).__name__ == "RedisBuckets"
    assert not open_buckets(pg_database, env={"INTERLOCK_LIMITS": "process"}).shared


def test_a_worker_shares_its_limits_and_a_driven_run_lends_them_back(pg_database: str) -> None:
    """A worker's store URL hands the providers shared buckets for the process's life;
    runs driven on a PostgreSQL ledger share them only while they are driven, then the
    process's own buckets come back (a SQLite ledger changes nothing)."""
    from interlock.providers import factory
    from interlock.runtime.shared_limits import limits_shared_for, share_limits_for

    before = factory._default_registry.store
    assert not before.shared
    with limits_shared_for(pg_database):
        assert type(factory._default_registry.store).__name__ == "PostgresBuckets"
    assert factory._default_registry.store is before
    with limits_shared_for("sqlite:///ledger.db"):
        assert factory._default_registry.store is before
    shared = share_limits_for(pg_database, redis_url=None, env={})
    try:
        assert factory._default_registry.store is shared and shared.shared
    finally:
        factory.share_limits(before)
        shared.close()
