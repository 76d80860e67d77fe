"""The token-bucket rule that several processes can share, on plain values.

A bucket is three numbers: its level, when it was last refilled and a "not before" time
(set when a provider answered 429 with a wait). `step` is the whole rule, pure; each store
applies it atomically where the bucket lives (in the process, a PostgreSQL row, a Redis
hash: `interlock.providers.buckets`, `interlock.storage.buckets_pg`,
`interlock.storage.buckets_redis`), so the stores below the providers and the providers
agree on one rule without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


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
