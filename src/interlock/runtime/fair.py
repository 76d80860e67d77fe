"""A semaphore that is fair between lanes: what runs tasks of this process, at most N at once.

Waiters are served round-robin between lanes (one task of each lane with waiters before a
second of any), oldest first within a lane. The dispatcher gives each task concurrency key
its own lane, so a key with a long backlog does not crowd out the others for this process's
capacity; tasks without a key share one lane, first come first served as before.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairGate:
    """At most `limit` holders at once; the next turn goes to the lane that waited longest
    since its last turn."""

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._lanes: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @asynccontextmanager
    async def turn(self, lane: str) -> AsyncIterator[Place]:
        """Hold one of the places for the duration of the block."""
        await self._take(lane)
        place = Place(self, lane)
        try:
            yield place
        finally:
            if place.held:
                self._release()

    async def _take(self, lane: str) -> None:
        if self._free > 0 and not self._lanes:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lanes.setdefault(lane, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a place just as it was cancelled: pass it on
            else:
                self._forget(lane, waiter)
            raise

    def _release(self) -> None:
        """Hand the place to the first waiter of the next lane, or free it."""
        while self._lanes:
            lane, queue = next(iter(self._lanes.items()))
            waiter = queue.popleft()
            if queue:
                self._lanes.move_to_end(lane)  # its next waiter waits for the other lanes
            else:
                del self._lanes[lane]
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1

    def _forget(self, lane: str, waiter: asyncio.Future[None]) -> None:
        queue = self._lanes.get(lane)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._lanes[lane]


class Place:
    """A place of a `FairGate` held by a `turn`, which may be lent out and taken back."""

    def __init__(self, gate: FairGate, lane: str) -> None:
        self._gate, self._lane = gate, lane
        self.held = True

    @asynccontextmanager
    async def lent(self) -> AsyncIterator[None]:
        """Give the place up for the duration of the block (a model call waiting hours in a
        provider batch: other tasks run meanwhile), then wait for one again in its lane,
        behind those that waited before it."""
        if not self.held:
            yield
            return
        self.held = False
        self._gate._release()
        yield  # stopped meanwhile (its run ended): it ends holding nothing
        await self._gate._take(self._lane)  # cancelled while waiting: nothing held
        self.held = True
