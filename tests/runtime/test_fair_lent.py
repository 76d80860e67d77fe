"""A place of the process's running tasks lent out while a call waits in a provider batch:
another task takes it meanwhile, the lender waits for one again, and a lender stopped
while it waits leaves the count of places as it was."""

from __future__ import annotations

import asyncio

from interlock.runtime.fair import FairGate


async def _lend_and_take_back() -> list[str]:
    gate, order = FairGate(1), []
    answered = asyncio.Event()

    async def batched() -> None:
        async with gate.turn("") as place:
            order.append("batched starts")
            async with place.lent():
                await answered.wait()
            order.append("batched finishes")

    async def other() -> None:
        async with gate.turn(""):
            order.append("other runs")
            answered.set()
            await asyncio.sleep(0.01)
            order.append("other ends")

    first = asyncio.create_task(batched())
    await asyncio.sleep(0)
    await asyncio.gather(first, other())
    return order


def test_a_lent_place_runs_another_task_and_is_taken_back_after_it() -> None:
    """With one place: the other task runs while the call waits; the call finishes once
    the other task gave the place back."""
    assert asyncio.run(_lend_and_take_back()) == [
        "batched starts",
        "other runs",
        "other ends",
        "batched finishes",
    ]


async def _stopped_while_lent() -> bool:
    gate = FairGate(1)
    waiting = asyncio.Event()

    async def batched() -> None:
        async with gate.turn("") as place, place.lent():
            waiting.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(batched())
    await waiting.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    async with gate.turn(""):  # the one place is free again, and only one
        pass

    async def second() -> None:
        async with gate.turn(""):
            await asyncio.sleep(3600)

    holder = asyncio.create_task(second())
    await asyncio.sleep(0)
    try:
        async with asyncio.timeout(0.05), gate.turn(""):
            return False  # a second place: counted twice
    except TimeoutError:
        return True
    finally:
        holder.cancel()


def test_a_call_stopped_while_its_place_is_lent_gives_back_nothing_more() -> None:
    """Stopped in the wait (its run ended), the task ends holding nothing: one place stays
    one place."""
    assert asyncio.run(_stopped_while_lent())
