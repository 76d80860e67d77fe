"""Spend caps counted in the ledger: every backend reserves all-or-none, settles, lets a
dead holder's reservation expire, and never over-commits under many concurrent
reservations on real connections."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interlock.providers.spend import CapKey, SpendStore
from interlock.providers.spend_guard import MemorySpend
from interlock.storage.spend_pg import PostgresSpend
from interlock.storage.spend_sqlite import SQLiteSpend

Opener = Callable[[], SpendStore]
DAY = CapKey(cap="daily", window_start=1000.0, amount_usd=1.0)
ALIAS = CapKey(cap="sonnet", window_start=1000.0, amount_usd=0.5)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens handles on one fresh count; two handles stand for two processes."""
    opened: list[SpendStore] = []
    lock = threading.Lock()
    shared = MemorySpend()
    url = request.getfixturevalue("pg_database") if request.param == "postgres" else ""

    def open_one() -> SpendStore:
        store: SpendStore
        if request.param == "memory":
            return shared
        if request.param == "sqlite":
            store = SQLiteSpend(tmp_path / "ledger.db")
        else:
            store = PostgresSpend(url)
        with lock:
            opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def test_a_reservation_holds_against_every_cap_or_none(opener: Opener) -> None:
    """Refused by one cap, it holds nothing against the others either."""
    store = opener()
    assert store.reserve(hold="a", keys=[DAY, ALIAS], amount_usd=0.4, now=0, expires=100) is None
    assert store.reserve(hold="b", keys=[DAY, ALIAS], amount_usd=0.2, now=0, expires=100) == (
        "sonnet"
    )
    by_cap = {u.cap: u for u in opener().usage(now=0)}
    assert by_cap["daily"].held_usd == pytest.approx(0.4)
    assert by_cap["daily"].holds == 1
    assert store.reserve(hold="c", keys=[DAY], amount_usd=0.6, now=0, expires=100) is None


def test_settling_counts_the_cost_and_ends_the_hold(opener: Opener) -> None:
    """A settled call counts what it cost, not its worst case; a released one nothing."""
    store = opener()
    store.reserve(hold="a", keys=[DAY], amount_usd=0.6, now=0, expires=100)
    store.reserve(hold="b", keys=[DAY], amount_usd=0.3, now=0, expires=100)
    store.settle(hold="a", keys=[DAY], spent_usd=0.25)
    store.settle(hold="b", keys=[DAY], spent_usd=0.0)
    [usage] = opener().usage(now=0)
    assert (usage.spent_usd, usage.held_usd, usage.holds) == (pytest.approx(0.25), 0, 0)
    assert store.reserve(hold="c", keys=[DAY], amount_usd=0.75, now=0, expires=100) is None
    assert store.reserve(hold="d", keys=[DAY], amount_usd=0.01, now=0, expires=100) == "daily"


def test_a_dead_holders_reservation_expires(opener: Opener) -> None:
    """A process that died holding the cap's last dollars holds them until its lease ends."""
    dead, alive = opener(), opener()
    assert dead.reserve(hold="dead", keys=[DAY], amount_usd=1.0, now=0, expires=60) is None
    assert alive.reserve(hold="b", keys=[DAY], amount_usd=0.5, now=59, expires=200) == "daily"
    assert alive.reserve(hold="b", keys=[DAY], amount_usd=0.5, now=60, expires=200) is None
    [usage] = alive.usage(now=61)
    assert (usage.held_usd, usage.holds) == (pytest.approx(0.5), 1)


def test_windows_count_apart(opener: Opener) -> None:
    """A new window starts from nothing: yesterday's spend does not hold today's calls."""
    store = opener()
    store.reserve(hold="a", keys=[DAY], amount_usd=1.0, now=0, expires=100)
    store.settle(hold="a", keys=[DAY], spent_usd=1.0)
    tomorrow = CapKey(cap="daily", window_start=DAY.window_start + 86400, amount_usd=1.0)
    assert store.reserve(hold="b", keys=[tomorrow], amount_usd=1.0, now=0, expires=100) is None


def test_concurrent_reservations_never_over_commit(opener: Opener) -> None:
    """Eight threads, each on its own connection, race for one cap with random amounts:
    what they were granted never passes it, and they fill it to within one amount."""
    cap = CapKey(cap="daily", window_start=0.0, amount_usd=3.0)
    granted: list[float] = []
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        store = opener()
        for n in range(40):
            amount = round(rng.uniform(0.01, 0.2), 4)
            hold = f"{seed}-{n}"
            if store.reserve(hold=hold, keys=[cap], amount_usd=amount, now=0, expires=1e9) is None:
                with lock:
                    granted.append(amount)
                # Half settle at once to their worst case; half stay held to the end.
                if rng.random() < 0.5:
                    store.settle(hold=hold, keys=[cap], spent_usd=amount)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [usage] = opener().usage(now=0)
    assert sum(granted) <= cap.amount_usd + 1e-6
    assert usage.spent_usd + usage.held_usd == pytest.approx(sum(granted))
    assert sum(granted) > cap.amount_usd - 0.2
