"""The live feed: one task tails the ledger's global event order and fans each event out to
the stream clients subscribed to it.

The orchestrator's listener only wakes the tail; the events themselves are always read back
from the store, so what clients see is what was committed (by this process or any other
writer of the same store), in commit order, each with its global id. Fan-out never waits: each
client has a bounded queue, and a client that falls too far behind is marked dropped and told
so, instead of slowing the orchestrator down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from interlock.core.state import RunState, apply, fold
from interlock.core.workflow import Pipeline
from interlock.server.messages import event_message, is_final
from interlock.storage.base import Store, StoredEvent

log = logging.getLogger("interlock.server")

PipelineOf = Callable[[RunState], Pipeline | None]
Annotate = Callable[[StoredEvent, RunState], dict[str, Any] | None]
EventHook = Callable[[StoredEvent, RunState], None]


@dataclass(eq=False)
class Subscriber:
    """One stream client: the run it follows (None: every run) and its bounded queue."""

    run_id: str | None
    queue: asyncio.Queue[dict[str, Any]]
    dropped: asyncio.Event = field(default_factory=asyncio.Event)


class Hub:
    """Tails `store.all_events` and fans messages out to subscribers."""

    def __init__(
        self,
        store: Store,
        pipeline_of: PipelineOf,
        *,
        queue_size: int = 1000,
        poll: float = 0.5,
        annotate: Annotate | None = None,
    ) -> None:
        self.store = store
        self.pipeline_of = pipeline_of
        self.queue_size = queue_size
        self.poll = poll  # also catches writes by other processes sharing the store
        self.annotate = annotate
        self.hooks: list[EventHook] = []  # metrics, tracing: called once per committed event
        self.cursor = 0
        self.states: dict[str, RunState] = {}
        self._subscribers: set[Subscriber] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Begin at the end of the feed: clients replay older events from the store."""
        self._loop = asyncio.get_running_loop()
        self.cursor = last_event_id(self.store)

    def wake(self) -> None:
        """Look at the store now (safe from any thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def on_event(self, *_: Any) -> None:
        """Orchestrator listener: something was committed."""
        self.wake()

    def on_progress(self, run_id: str, task_id: str, text: str) -> None:
        """Orchestrator progress listener: a streamed model fragment (never recorded)."""
        message = {"type": "token", "run_id": run_id, "task_id": task_id, "text": text}
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.publish, message)

    def subscribe(self, run_id: str | None) -> Subscriber:
        """Start receiving live messages (of one run, or of all)."""
        subscriber = Subscriber(run_id, asyncio.Queue(self.queue_size))
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Stop receiving."""
        self._subscribers.discard(subscriber)

    def publish(self, message: dict[str, Any]) -> None:
        """Hand `message` to every subscriber it concerns, without ever waiting."""
        for subscriber in list(self._subscribers):
            if subscriber.run_id not in (None, message.get("run_id")):
                continue
            try:
                subscriber.queue.put_nowait(message)
            except asyncio.QueueFull:
                subscriber.dropped.set()
                self._subscribers.discard(subscriber)

    async def run(self, stop: asyncio.Event) -> None:
        """The tail loop, until `stop` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)
            self._wake.clear()
            try:
                self.pump()
            except Exception:  # a bad read must not end the feed; the next wake retries
                log.exception("event feed failed")

    def pump(self) -> None:
        """Publish everything committed since the cursor."""
        while True:
            batch = self.store.all_events(self.cursor, 500)
            for stored in batch:
                state = self.state_after(stored)
                self.cursor = stored.id
                for hook in self.hooks:
                    hook(stored, state)
                self.publish(self.message(stored, state))
                if is_final(state):
                    self.states.pop(stored.run_id, None)
            if len(batch) < 500:
                return

    def state_after(self, stored: StoredEvent) -> RunState:
        """The run's state after `stored`, folded incrementally."""
        state = self.states.get(stored.run_id)
        if state is None or state.events != stored.seq - 1:
            older = self.store.events(stored.run_id, 0, stored.seq - 1)
            state = fold([s.event for s in older])
            self.states[stored.run_id] = state
        apply(state, stored.event)
        return state

    def message(self, stored: StoredEvent, state: RunState) -> dict[str, Any]:
        """The stream message for one event (with its notification, if it makes one)."""
        message = event_message(stored, state, self.pipeline_of(state))
        if self.annotate is not None:
            note = self.annotate(stored, state)
            if note is not None:
                message["notification"] = note
        return message


def last_event_id(store: Store) -> int:
    """The newest event id, found with a few one-row reads (no full scan)."""
    high = 1
    while store.all_events(high - 1, 1):
        high *= 2
    low = 0  # invariant: an event with id > low exists (or low is 0), none with id > high - 1
    high -= 1
    while low < high:
        middle = (low + high + 1) // 2
        if store.all_events(middle - 1, 1):
            low = middle
        else:
            high = middle - 1
    return low
