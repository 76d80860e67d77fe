"""Token buckets that several processes can share: the rule, the port, the in-process store.

A bucket is three numbers: its level, when it was last refilled and a "not before" time
(set when a provider answered 429 with a wait). `step` is the whole rule, pure; each store
applies it atomically where the bucket lives (`MemoryBuckets` here, a PostgreSQL row in
`interlock.storage.buckets_pg`, a Redis hash in `interlock.storage.buckets_redis`), each
with its own clock, so that processes on machines whose clocks disagree still agree on
the bucket.

A store's `take` hands out between `need` and `want` units at once: a process keeps the
surplus as a lease (`interlock.providers.limits`) and spends it without a round trip.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from interlock.providers.redaction import Secret

Clock = Callable[[], float]
"""Monotonic seconds; tests inject a fake one."""


@dataclass(frozen=True, kw_only=True)
class Ask:
    """One atomic operation on a bucket.

    Attributes:
        rate: Units refilled per second.
        capacity: The most the bucket holds (a full bucket allows this burst).
        need: Units wanted now (0: take nothing, only apply `force` and `hold_s`).
        want: Units gladly taken if the bucket has them (at least `need`): the lease.
        force: Units taken whatever the level (a call that used more than it reserved);
            negative gives units back (never above capacity).
        hold_s: A provider asked everyone to wait this long: nothing is handed out and
            nothing refills until then, and the bucket is emptied.
    """

    rate: float
    capacity: float
    need: float = 0.0
    want: float = 0.0
    force: float = 0.0
    hold_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Grant:
    """What a `take` handed out.

    Attributes:
        granted: Units handed out (0 when `need` could not be had).
        wait_s: When nothing was handed out: seconds until `need` may be had.
    """

    granted: float
    wait_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class BucketState:
    """A bucket as stored: its level, when it was refilled last, and the hold."""

    level: float
    updated: float
    not_before: float = 0.0


def step(state: BucketState | None, ask: Ask, now: float) -> tuple[BucketState, Grant]:
    """The bucket after `ask` at time `now` (the store's clock), and what it handed out.

    A bucket never seen starts full. The level may go below zero (`force`): overuse is then
    paid back by waiting. A single `need` above the capacity is handed out once the bucket
    is full, rather than never. The PostgreSQL function and the Redis script implement this
    same rule, line for line (`step_values` is it on plain numbers).
    """
    before = None if state is None else (state.level, state.updated, state.not_before)
    level, updated, not_before, granted, wait = step_values(
        before, now, ask.rate, ask.capacity, ask.need, ask.want, ask.force, ask.hold_s
    )
    return BucketState(level=level, updated=updated, not_before=not_before), Grant(
        granted=granted, wait_s=wait
    )


def step_values(
    state: tuple[float, float, float] | None,
    now: float,
    rate: float,
    capacity: float,
    need: float,
    want: float,
    force: float = 0.0,
    hold_s: float = 0.0,
) -> tuple[float, float, float, float, float]:
    """`step` on plain numbers, for the in-process store's hot path (a call in one process
    pays no value objects): (level, updated, not_before) in, and out with what was
    granted and the wait."""
    if state is None:
        state = (capacity, now, 0.0)
    level, updated, not_before = state
    level = min(capacity, level + max(0.0, now - max(updated, not_before)) * rate)
    level = min(capacity, level - force)
    if hold_s > 0:
        not_before = max(not_before, now + hold_s)
        level = min(level, 0.0)
    granted, wait = 0.0, 0.0
    if need > 0:
        needed = min(need, capacity)
        if now < not_before:
            wait = not_before - now + max(0.0, needed - level) / rate
        elif level >= needed:
            granted = max(need, min(want, level))
            level -= granted
        else:
            wait = (needed - level) / rate
    return level, now, not_before, granted, wait


class BucketStore(Protocol):
    """Where buckets live; every operation is atomic for everyone sharing the store.

    Attributes:
        shared: Whether other processes see the same buckets (then calls lease units in
            chunks, to save round trips).
        where: How messages name the store (no password).
    """

    shared: bool
    where: str

    def take(self, name: str, ask: Ask) -> Grant:
        """Apply `ask` to bucket `name` atomically (blocking: call it off the event loop
        when it does I/O)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


class MemoryBuckets:
    """Buckets of this process only: what every process had before buckets were shared,
    and what a run on SQLite keeps."""

    shared = False
    where = "this process"

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._states: dict[str, tuple[float, float, float]] = {}
        self._lock = threading.Lock()  # event loops in several threads share the registry

    def take(self, name: str, ask: Ask) -> Grant:
        """Apply `ask` to bucket `name`."""
        granted, wait = self.apply(
            name, ask.rate, ask.capacity, ask.need, ask.want, ask.force, ask.hold_s
        )
        return Grant(granted=granted, wait_s=wait)

    def apply(
        self,
        name: str,
        rate: float,
        capacity: float,
        need: float,
        want: float,
        force: float = 0.0,
        hold_s: float = 0.0,
    ) -> tuple[float, float]:
        """`take` on plain numbers: (granted, wait)."""
        with self._lock:
            level, updated, not_before, granted, wait = step_values(
                self._states.get(name), self._clock(), rate, capacity, need, want, force, hold_s
            )
            self._states[name] = (level, updated, not_before)
        return granted, wait

    def close(self) -> None:
        """Nothing to release."""


def key_digest(*, base_url: str, key: Secret | None) -> str:
    """What names a provider account's buckets: a hash of its endpoint and its key, never
    the key itself.

    Two configurations calling one endpoint with one key share its buckets whatever their
    provider names; two keys of one provider do not (each key has its own limits).
    """
    digest = hashlib.sha256(b"interlock-bucket\0" + base_url.rstrip("/").encode())
    if key is not None:
        digest.update(b"\0" + key.reveal().encode())
    return digest.hexdigest()[:24]


def finite_wait(seconds: float) -> float:
    """A wait as a number a sleep takes (a store's answer is data, never trusted blindly)."""
    if not math.isfinite(seconds) or seconds < 0:
        return 0.0
    return seconds
