"""Replay-then-live streams, shared by the WebSocket and Server-Sent Events endpoints.

To leave no gap and send nothing twice: subscribe to the live feed first (so nothing committed
from now on is missed), then replay from the store everything after the client's cursor, then
pass on live messages, skipping those the replay already covered (by seq for one run, by
global id for all runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from interlock.core.state import RunState, apply, fold
from interlock.server.board import Board, BoardDropped, Watcher
from interlock.server.hub import Dropped, Encoded, Hub, Subscriber, encode
from interlock.server.messages import is_final


async def run_stream(
    hub: Hub, subscriber: Subscriber, run_id: str, since: int
) -> AsyncIterator[list[Encoded]]:
    """Every event of one run after seq `since`, then live ones, until the final one; in
    chunks (a client sends each chunk at once).

    `subscriber` must have been subscribed (to this run) before the call."""
    last = since
    yield [encode({"type": "hello", "run_id": run_id, "since": since})]
    state = RunState()
    for stored in hub.store.events(run_id):
        apply(state, stored.event)
        if stored.seq > since:
            last = stored.seq
            message = encode(hub.message(stored, state))
            yield [message]
            if message.final:
                return
        await asyncio.sleep(0)  # long histories: let the loop breathe between events
    if is_final(state):
        return
    while True:
        try:
            chunk = await hub.next_live(subscriber)
        except Dropped:
            raise Dropped({"since": last}) from None
        fresh = []
        for message in chunk:
            if message.type == "event":
                if message.seq <= last:
                    continue
                last = message.seq
            fresh.append(message)
            if message.final:
                yield fresh
                return
        if fresh:
            yield fresh


async def all_stream(
    hub: Hub, subscriber: Subscriber, since: int | None
) -> AsyncIterator[list[Encoded]]:
    """Every event of every run after global id `since` (None: from now), then live ones; in
    chunks (a client sends each chunk at once).

    `subscriber` must have been subscribed (to all runs) before the call."""
    last = hub.cursor if since is None else since
    yield [encode({"type": "hello", "since": last})]
    states: dict[str, RunState] = {}
    while True:
        batch = hub.store.all_events(last, 500)
        replayed = []
        for stored in batch:
            state = states.get(stored.run_id)
            if state is None:
                older = hub.store.events(stored.run_id, 0, stored.seq - 1)
                state = states[stored.run_id] = fold([s.event for s in older])
            apply(state, stored.event)
            last = stored.id
            replayed.append(encode(hub.message(stored, state)))
        if replayed:
            yield replayed
        if len(batch) < 500:
            break
    while True:
        try:
            chunk = await hub.next_live(subscriber)
        except Dropped:
            raise Dropped({"since": last}) from None
        ids = [m.id for m in chunk if m.type == "event"]
        if not ids or ids[0] > last:  # the usual case: nothing the replay sent, passed as is
            last = ids[-1] if ids else last
            yield chunk
            continue
        fresh = [m for m in chunk if m.type != "event" or m.id > last]
        last = max(last, ids[-1])
        if fresh:
            yield fresh


async def board_stream(board: Board, watcher: Watcher) -> AsyncIterator[list[Encoded]]:
    """Run summaries, a frame per tick (see `board.py`), after a hello; the client reads the
    list itself (from the API) when it has said hello.

    `watcher` must have been made by `board.watch()` before the call."""
    yield [encode({"type": "hello", "view": "summary", "interval": board.interval})]
    while True:
        try:
            frame, last = await board.next_frame(watcher)
        except BoardDropped:
            raise Dropped({}) from None
        yield [Encoded(text=frame, type="runs", id=last)]
