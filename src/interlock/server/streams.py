"""Replay-then-live streams, shared by the WebSocket and Server-Sent Events endpoints.

To leave no gap and send nothing twice: subscribe to the live feed first (so nothing committed
from now on is missed), then replay from the store everything after the client's cursor, then
pass on live messages, skipping those the replay already covered (by seq for one run, by
global id for all runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from interlock.core.state import RunState, apply, fold
from interlock.server.hub import Hub, Subscriber
from interlock.server.messages import is_final


class Dropped(Exception):
    """The client fell further behind than its queue allows."""

    def __init__(self, resume: dict[str, Any]) -> None:
        super().__init__("client fell behind")
        self.resume = resume


async def next_live(subscriber: Subscriber) -> dict[str, Any]:
    """The next queued message, or `Dropped` as soon as the hub gave up on this client."""
    if subscriber.dropped.is_set():
        raise Dropped({})
    getter = asyncio.ensure_future(subscriber.queue.get())
    dropped = asyncio.ensure_future(subscriber.dropped.wait())
    try:
        done, _ = await asyncio.wait({getter, dropped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also when the stream itself is cancelled (the client left): no helper task may
        # outlive it, or it is destroyed pending once the subscriber is collected.
        for helper in (getter, dropped):
            helper.cancel()
    if getter in done and not getter.cancelled():
        return getter.result()
    raise Dropped({})


async def run_stream(
    hub: Hub, subscriber: Subscriber, run_id: str, since: int
) -> AsyncIterator[dict[str, Any]]:
    """Every event of one run after seq `since`, then live ones, until the final one.

    `subscriber` must have been subscribed (to this run) before the call."""
    last = since
    yield {"type": "hello", "run_id": run_id, "since": since}
    state = RunState()
    for stored in hub.store.events(run_id):
        apply(state, stored.event)
        if stored.seq > since:
            last = stored.seq
            message = hub.message(stored, state)
            yield message
            if message["final"]:
                return
        await asyncio.sleep(0)  # long histories: let the loop breathe between events
    if is_final(state):
        return
    while True:
        try:
            message = await next_live(subscriber)
        except Dropped:
            raise Dropped({"since": last}) from None
        if message["type"] == "event":
            if message["seq"] <= last:
                continue
            last = message["seq"]
        yield message
        if message.get("final"):
            return


async def all_stream(
    hub: Hub, subscriber: Subscriber, since: int | None
) -> AsyncIterator[dict[str, Any]]:
    """Every event of every run after global id `since` (None: from now), then live ones.

    `subscriber` must have been subscribed (to all runs) before the call."""
    last = hub.cursor if since is None else since
    yield {"type": "hello", "since": last}
    states: dict[str, RunState] = {}
    while True:
        batch = hub.store.all_events(last, 500)
        for stored in batch:
            state = states.get(stored.run_id)
            if state is None:
                older = hub.store.events(stored.run_id, 0, stored.seq - 1)
                state = states[stored.run_id] = fold([s.event for s in older])
            apply(state, stored.event)
            last = stored.id
            yield hub.message(stored, state)
        if len(batch) < 500:
            break
    while True:
        try:
            message = await next_live(subscriber)
        except Dropped:
            raise Dropped({"since": last}) from None
        if message["type"] == "event":
            if message["id"] <= last:
                continue
            last = message["id"]
        yield message
