"""Waking the coroutines that wait on queue entries.

Notifications (`interlock_task_states`) wake a waiter at once and say what the entry became
(and which worker holds it, or that its model call went into a provider batch or came back:
`parked`, `unparked`), so a waiter usually need not ask the queue; a single batched query
every `poll` seconds covers notifications lost while the listening connection was down, so
hundreds of waiting attempts cost one poll query, not hundreds.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict

from interlock.distributed.listen import Listener
from interlock.distributed.queue import STATES, TaskQueue, parse_notification

RECENT = 4096  # news kept for entries nobody watches yet (heard before `watch` was called)


class Watcher:
    """asyncio events per queue entry, set when the entry may have changed."""

    def __init__(self, queue: TaskQueue, *, poll: float) -> None:
        self.queue = queue
        self.poll = poll
        self._events: dict[int, asyncio.Event] = {}
        # What the last poll read of each entry: (state, delivery, parked_at, unparked_at).
        self._seen: dict[int, tuple[object, ...]] = {}
        # The latest (state, worker) heard of recent entries, until a waiter takes it.
        self._news: OrderedDict[int, tuple[str, str]] = OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: Listener | None = None
        self._poller: asyncio.Task[None] | None = None
        self._inbox: list[tuple[int, str, str] | None] = []  # filled by the listener thread
        self._inbox_lock = threading.Lock()
        self._drain_due = False

    def watch(self, entry_id: int) -> asyncio.Event:
        """The event to wait on for `entry_id` (starts listening on first use)."""
        if self._loop is None or self._loop is not asyncio.get_running_loop():
            self._start()
        return self._events.setdefault(entry_id, asyncio.Event())

    def take(self, entry_id: int) -> tuple[str, str] | None:
        """What a notification said `entry_id` became, (state, worker), once; None when
        nothing was heard since the last call, or it may be out of date (ask the queue)."""
        return self._news.pop(entry_id, None)

    def unwatch(self, entry_id: int) -> None:
        """Stop tracking an entry."""
        self._events.pop(entry_id, None)
        self._seen.pop(entry_id, None)
        self._news.pop(entry_id, None)

    def _start(self) -> None:
        self.close()
        self._loop = asyncio.get_running_loop()
        self._listener = Listener(self.queue.store.url, [STATES], self._notified).start()
        self._poller = self._loop.create_task(self._poll(), name="interlock-queue-poll")

    def close(self) -> None:
        """Stop the listener and the poller."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None

    def _notified(self, channel: str, payload: str) -> None:
        """In the listener thread: hand the news to the event loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        # None: reconnected, anything may have changed meanwhile (kept in order with news).
        parsed = parse_notification(payload) if channel else None
        if channel and parsed is None:
            return
        # A burst of notifications costs one wake-up of the loop, not one each.
        with self._inbox_lock:
            self._inbox.append(parsed)
            if self._drain_due:
                return
            self._drain_due = True
        loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._inbox_lock:
            heard, self._inbox = self._inbox, []
            self._drain_due = False
        for news in heard:
            if news is None:
                self._set_all()
            else:
                self._heard(*news)

    def _heard(self, entry_id: int, state: str, worker: str) -> None:
        self._news[entry_id] = (state, worker)
        self._news.move_to_end(entry_id)
        if len(self._news) > RECENT:
            self._news.popitem(last=False)
        self._set(entry_id)

    def _set(self, entry_id: int) -> None:
        event = self._events.get(entry_id)
        if event is not None:
            event.set()

    def _set_all(self) -> None:
        self._news.clear()  # what was heard before the gap may be stale: waiters ask
        for event in self._events.values():
            event.set()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll)
            ids = list(self._events)
            if not ids:
                continue
            with contextlib.suppress(Exception):  # the next round tries again
                states = await asyncio.to_thread(self.queue.watched, ids)
                for entry_id, state in states.items():
                    if self._seen.get(entry_id) != state:
                        self._seen[entry_id] = state
                        self._news.pop(entry_id, None)  # the waiter asks the queue itself
                        self._set(entry_id)
