"""The rate-limit bucket stores (in-process, PostgreSQL, Redis) follow one rule, `step`, and
the shared ones are shared: two handles stand for two processes of a fleet."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from interlock.providers.buckets import Ask, BucketState, BucketStore, MemoryBuckets, step
from interlock.storage.buckets_pg import PostgresBuckets
from interlock.storage.buckets_redis import RedisBuckets

REDIS = os.environ.get("INTERLOCK_TEST_REDIS", "redis://127.0.0.1:6379/7")
BACKENDS = ["memory", "postgres", "redis"]
SLOW = 1e-9  # units per second: nothing refills while a test runs

Opener = Callable[[], BucketStore]


@pytest.fixture(params=BACKENDS)
def opener(request: pytest.FixtureRequest) -> Iterator[Opener]:
    """Opens handles on one fresh set of buckets; each call stands for another process."""
    opened: list[BucketStore] = []
    prefix = f"il-test:{uuid.uuid4().hex}:"
    if request.param == "memory":
        shared = MemoryBuckets()

        def open_one() -> BucketStore:
            return shared

    elif request.param == "postgres":
        url = request.getfixturevalue("pg_database")

        def open_one() -> BucketStore:
            return PostgresBuckets(url)

    else:

        def open_one() -> BucketStore:
            return RedisBuckets(REDIS, prefix=prefix)

    def tracked() -> BucketStore:
        store = open_one()
        opened.append(store)
        return store

    yield tracked
    for store in opened:
        store.close()
    if request.param == "redis":
        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()


def ask(**fields: float) -> Ask:
    """An ask on a bucket of 10 that refills too slowly to matter."""
    return Ask(**{"rate": SLOW, "capacity": 10.0, **fields})


def test_each_store_follows_the_rule(opener: Opener) -> None:
    """A sequence of takes, debts, refunds and holds gives what `step` gives, in every store."""
    store = opener()
    sequence = [
        ask(need=1, want=4),
        ask(need=3, want=3),
        ask(need=5, want=5),  # 3 left: refused
        ask(force=6),  # overuse: -3
        ask(need=1, want=1),
        ask(force=-100),  # given back: full, never above
        ask(need=25, want=25),  # more than the whole bucket: granted once full
        ask(force=-4, hold_s=1e6),
        ask(need=1, want=1),
    ]
    state: BucketState | None = None
    for number, current in enumerate(sequence):
        state, expected = step(state, current, now=1000.0)
        got = store.take("b", current)
        assert got.granted == pytest.approx(expected.granted, abs=1e-6), number
        assert got.wait_s == pytest.approx(expected.wait_s, rel=1e-3, abs=1.0), number


def test_a_fresh_bucket_grants_its_capacity_then_says_how_long_to_wait(opener: Opener) -> None:
    """A new bucket is full: a lease takes all of it, and the next take is told the wait."""
    store = opener()
    rate = 10.0 / 60
    assert store.take("b", Ask(rate=rate, capacity=10, need=1, want=50)).granted == 10
    refused = store.take("b", Ask(rate=rate, capacity=10, need=2, want=2))
    assert refused.granted == 0
    assert 0 < refused.wait_s <= 2 / rate + 1e-6


def test_two_handles_never_hand_out_more_than_the_bucket(opener: Opener) -> None:
    """Eight threads on two handles taking one unit at a time share a bucket of 50 exactly."""
    handles = [opener(), opener()]
    granted: list[float] = []
    lock = threading.Lock()

    def taker(store: BucketStore) -> None:
        for _ in range(20):
            got = store.take("shared", Ask(rate=SLOW, capacity=50, need=1, want=1)).granted
            with lock:
                granted.append(got)

    threads = [threading.Thread(target=taker, args=(handles[n % 2],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 50
    assert len(granted) == 160


def test_a_hold_from_one_handle_stops_the_other(opener: Opener) -> None:
    """A 429's wait, put in by one process, refuses the next take of another until then."""
    first, second = opener(), opener()
    fast = Ask(rate=100.0, capacity=6000.0, need=1, want=1)
    assert second.take("b", fast).granted == 1
    first.take("b", Ask(rate=100.0, capacity=6000.0, hold_s=30))
    refused = second.take("b", fast)
    assert refused.granted == 0
    assert 20 < refused.wait_s <= 30.1  # the rest of the 30 s (a loaded machine is slow)


def test_buckets_of_other_names_are_apart(opener: Opener) -> None:
    """Emptying one key's bucket leaves another's full."""
    store = opener()
    assert store.take("key-a", ask(need=10, want=10)).granted == 10
    assert store.take("key-b", ask(need=10, want=10)).granted == 10


CRASHER = """
import os, sys
from interlock.providers.buckets import Ask
from interlock.storage.buckets_pg import PostgresBuckets
from interlock.storage.buckets_redis import RedisBuckets
backend, url, prefix = sys.argv[1:]
store = PostgresBuckets(url) if backend == "postgres" else RedisBuckets(url, prefix=prefix)
print(store.take("b", Ask(rate=2.0, capacity=4.0, need=1, want=4)).granted, flush=True)
os.kill(os.getpid(), 9)  # dies holding the whole bucket as its lease
"""


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_a_crashed_lease_holder_does_not_block_the_bucket(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A process killed while it holds the whole bucket as a lease costs only that lease:
    the bucket refills at its rate, and another process is served."""
    prefix = f"il-test:{uuid.uuid4().hex}:"
    url = request.getfixturevalue("pg_database") if backend == "postgres" else REDIS
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", CRASHER, backend, url, prefix]
    crashed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert crashed.returncode == -9, crashed.stderr
    assert float(crashed.stdout) == 4
    store: BucketStore = PostgresBuckets(url) if backend == "postgres" else RedisBuckets(
        url, prefix=prefix
    )  # fmt: skip
    try:
        want = Ask(rate=2.0, capacity=4.0, need=1, want=1)
        first = store.take("b", want)
        if not first.granted:
            # Empty for now, but for no longer than one unit takes to refill.
            assert 0 < first.wait_s <= 0.5
            time.sleep(first.wait_s)
            assert store.take("b", want).granted == 1
    finally:
        store.close()
