"""The loop's sleep ends when a look is asked for, or when its timeout passes."""

from __future__ import annotations

import asyncio
import contextlib
import time

from interlock.runtime.wakeup import Wakeup


def test_a_set_before_the_sleep_ends_it_at_once() -> None:
    """A look asked for before the loop sleeps is not missed: the sleep returns at once."""

    async def go() -> float:
        wakeup = Wakeup(asyncio.get_running_loop())
        wakeup.set()
        started = time.monotonic()
        await wakeup.sleep(30)
        return time.monotonic() - started

    assert asyncio.run(go()) < 1


def test_a_set_during_the_sleep_ends_it_and_clear_forgets_it() -> None:
    """A look asked for while the loop sleeps wakes it; once cleared, the next sleep waits
    for its timeout."""

    async def go() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        wakeup = Wakeup(loop)
        loop.call_later(0.05, wakeup.set)
        started = time.monotonic()
        await wakeup.sleep(30)
        woken = time.monotonic() - started
        assert wakeup.is_set()
        wakeup.clear()
        started = time.monotonic()
        await wakeup.sleep(0.2)
        return woken, time.monotonic() - started

    woken, slept = asyncio.run(go())
    assert woken < 5
    assert slept >= 0.19


def test_a_cancelled_sleep_leaves_no_timer_behind() -> None:
    """Cancelling the sleeping loop (a shutdown) cancels the sleep's timer too."""

    async def go() -> int:
        loop = asyncio.get_running_loop()
        wakeup = Wakeup(loop)
        task = asyncio.create_task(wakeup.sleep(30))
        await asyncio.sleep(0.01)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        scheduled = loop._scheduled  # type: ignore[attr-defined]
        return sum(1 for handle in scheduled if not handle.cancelled())

    assert asyncio.run(go()) == 0
