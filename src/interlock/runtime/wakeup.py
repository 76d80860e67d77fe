"""The loop's sleep between turns: until something new arrives or a timeout passes.

An `asyncio.Event` awaited under `asyncio.timeout` did the same with a context manager, a
timeout object, the event's waiter queue and, at each timeout, a cancellation of the
sleeping task; the loop sleeps several times per run, so this holds one future and one
timer per sleep instead.
"""

from __future__ import annotations

import asyncio


class Wakeup:
    """A flag the loop sleeps on: `set` ends the current sleep, or the next one at once."""

    __slots__ = ("_loop", "_set", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        """Ask for a look now (called on the loop's thread)."""
        self._set = True
        _wake(self._waiter)

    def is_set(self) -> bool:
        """Whether a look was asked for since the last `clear`."""
        return self._set

    def clear(self) -> None:
        """Forget the asks so far."""
        self._set = False

    async def sleep(self, timeout: float) -> None:
        """Return once `set` is called or `timeout` seconds have passed (at once if set)."""
        if self._set:
            return
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
