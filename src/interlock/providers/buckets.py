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
from typing import Protocol

from interlock.core.buckets import Ask, BucketState, Grant, step, step_values
from interlock.providers.redaction import Secret

__all__ = [
    "Ask",
    "BucketState",
    "BucketStore",
    "Grant",
    "MemoryBuckets",
    "finite_wait",
    "key_digest",
    "step",
    "step_values",
]

Clock = Callable[[], float]
"""Monotonic seconds; tests inject a fake one."""


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
