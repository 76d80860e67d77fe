"""The live feed: one task tails the ledger's global event order and fans each event out to
the stream clients subscribed to it.

The orchestrator's listener only wakes the tail; the events themselves are always read back
from the store, so what clients see is what was committed (by this process or any other
writer of the same store), in commit order, each with its global id.

Fan-out costs the same whatever the number of clients: each message is encoded once, and
clients of every run share one log of encoded messages, each with its own position in it (a
client of one run has its own short queue). Each client's writer sends what arrived since its
last send in one go, so a client costs per send, not per event. Fan-out never waits: a client
that falls more than `queue_size` messages or `QUEUE_BYTES` behind (one that stopped reading,
or reads too slowly) is marked dropped and told so, instead of slowing anyone else down.

Streamed model text (`token` messages) is coalesced: what arrives for one task before the loop
publishes it leaves as one message, of at most `PROGRESS_CHARS` characters (the rest is
counted in `skipped`), so a model that streams without pause costs watchers a bounded number
of messages and bytes per round, and a queue of `queue_size` messages a bounded size.

Clients of the runs list take run summaries from the hub's `board` instead (see `board.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from interlock.core.state import RunState, apply, fold
from interlock.core.workflow import Pipeline
from interlock.server.board import Board
from interlock.server.messages import event_message, is_final
from interlock.storage.base import Store, StoredEvent

log = logging.getLogger("interlock.server")

PROGRESS_CHARS = 64 * 1024  # of streamed text per task in one token message
QUEUE_BYTES = 8 * 1024 * 1024  # of messages a client may fall behind, besides their number

PipelineOf = Callable[[RunState], Pipeline | None]
Annotate = Callable[[StoredEvent, RunState], dict[str, Any] | None]
EventHook = Callable[[StoredEvent, RunState], None]


class Dropped(Exception):
    """The client fell further behind than its queue allows."""

    def __init__(self, resume: dict[str, Any]) -> None:
        super().__init__("client fell behind")
        self.resume = resume


@dataclass(frozen=True, slots=True)
class Encoded:
    """A message as sent (JSON text, encoded once for every client) with what streams need
    to know about it without parsing it again."""

    text: str
    type: str
    seq: int = 0  # for events: the run's seq...
    id: int = 0  # ...and the global id
    final: bool = False


def encode(message: dict[str, Any]) -> Encoded:
    """Encode a stream message once."""
    text = orjson.dumps(message, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    if message.get("type") != "event":
        return Encoded(text=text, type=str(message.get("type")))
    return Encoded(
        text=text,
        type="event",
        seq=int(message["seq"]),
        id=int(message["id"]),
        final=bool(message.get("final")),
    )


class Chunk(list[Encoded]):
    """Messages sent together. Clients of every run that are level get the same chunk, and
    the frame joining it (`?batch=1`) is built once for all of them."""

    frame: str | None = None


@dataclass(eq=False)
class Subscriber:
    """One stream client: the run it follows (None: every run), where it is in the shared log
    (every run) or its own queue (one run), and whether it was dropped."""

    run_id: str | None
    position: int = 0
    queue: deque[Encoded] = field(default_factory=deque)
    queued: int = 0  # characters in `queue`
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # (one run) queue not empty
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
        board: Board | None = None,
    ) -> None:
        self.store = store
        self.pipeline_of = pipeline_of
        self.queue_size = queue_size
        self.poll = poll  # also catches writes by other processes sharing the store
        self.annotate = annotate
        self.board = board or Board()
        self.hooks: list[EventHook] = []  # metrics, tracing: called once per committed event
        self.cursor = 0
        self.states: dict[str, RunState] = {}
        self._subscribers: set[Subscriber] = set()
        self._by_run: dict[str, set[Subscriber]] = {}
        self._everyone: set[Subscriber] = set()
        # The shared log of clients of every run: `_log[0]` is at position `_start`.
        self._log: list[Encoded] = []
        self._start = 0
        self._log_size = 0  # characters in `_log`
        self._chunks: dict[int, Chunk] = {}  # from a position to the head, this round
        self._published = asyncio.Event()  # replaced after each wake: set once per round
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Streamed text not yet published, by (run, task): its parts, their size, and what
        # was left out. Filled from any thread, emptied on the loop.
        self._progress: dict[tuple[str, str], tuple[list[str], list[int]]] = {}
        self._progress_lock = threading.Lock()

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
        """Orchestrator progress listener: a streamed model fragment (never recorded).

        Kept with the task's other fragments until the loop publishes them together; past
        `PROGRESS_CHARS` only counted."""
        if self._loop is None:
            return
        with self._progress_lock:
            first = not self._progress
            parts, sizes = self._progress.setdefault((run_id, task_id), ([], [0, 0]))
            room = PROGRESS_CHARS - sizes[0]
            if room > 0:
                parts.append(text[:room])
                sizes[0] += min(room, len(text))
            sizes[1] += max(0, len(text) - max(room, 0))
        if first:
            self._loop.call_soon_threadsafe(self._publish_progress)

    def _publish_progress(self) -> None:
        with self._progress_lock:
            taken, self._progress = self._progress, {}
        for (run_id, task_id), (parts, (_, skipped)) in taken.items():
            message: dict[str, Any] = {
                "type": "token",
                "run_id": run_id,
                "task_id": task_id,
                "text": "".join(parts),
            }
            if skipped:
                message["skipped"] = skipped
            self.publish(message)
        self._flush()

    def subscribe(self, run_id: str | None) -> Subscriber:
        """Start receiving live messages (of one run, or of all)."""
        subscriber = Subscriber(run_id, position=self._start + len(self._log))
        self._subscribers.add(subscriber)
        if run_id is None:
            self._everyone.add(subscriber)
        else:
            self._by_run.setdefault(run_id, set()).add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Stop receiving."""
        self._subscribers.discard(subscriber)
        self._everyone.discard(subscriber)
        followers = self._by_run.get(subscriber.run_id or "")
        if followers is not None:
            followers.discard(subscriber)
            if not followers:
                del self._by_run[subscriber.run_id or ""]

    def _drop(self, subscriber: Subscriber) -> None:
        subscriber.dropped.set()
        subscriber.arrived.set()
        self.unsubscribe(subscriber)

    def publish(self, message: dict[str, Any]) -> None:
        """Hand `message` to every subscriber it concerns, without ever waiting (woken at the
        end of the round: see `_flush`)."""
        encoded = encode(message)
        if self._everyone:
            self._log.append(encoded)
            self._log_size += len(encoded.text)
            if len(self._log) >= 2 * self.queue_size or self._log_size >= 2 * QUEUE_BYTES:
                self._trim()
        for subscriber in list(self._by_run.get(str(message.get("run_id")), ())):
            subscriber.queue.append(encoded)
            subscriber.queued += len(encoded.text)
            if len(subscriber.queue) > self.queue_size or subscriber.queued > QUEUE_BYTES:
                self._drop(subscriber)
            else:
                subscriber.arrived.set()

    def _flush(self) -> None:
        """Wake the writers of every-run clients once for all that was published."""
        self.board.flush()
        if not self._everyone:
            self._log.clear()
            self._start = 0
            self._log_size = 0
            return
        head = self._start + len(self._log)
        for subscriber in [s for s in self._everyone if head - s.position > self.queue_size]:
            self._drop(subscriber)
        self._chunks.clear()
        published, self._published = self._published, asyncio.Event()
        published.set()

    def _trim(self) -> None:
        """Forget the log's older part (past `queue_size` messages or `QUEUE_BYTES`); clients
        that had not read it are dropped."""
        cut = max(0, len(self._log) - self.queue_size)
        kept = sum(len(m.text) for m in self._log[cut:])
        while kept > QUEUE_BYTES and cut < len(self._log) - 1:
            kept -= len(self._log[cut].text)
            cut += 1
        self._start += cut
        del self._log[:cut]
        self._log_size = kept
        for subscriber in [s for s in self._everyone if s.position < self._start]:
            self._drop(subscriber)

    async def next_live(self, subscriber: Subscriber) -> Chunk:
        """What arrived for `subscriber` since it last asked (waiting until something did).

        Raises:
            Dropped: it fell too far behind.
        """
        while True:
            if subscriber.dropped.is_set():
                raise Dropped({})
            if subscriber.run_id is not None:
                if subscriber.queue:
                    taken = Chunk(subscriber.queue)
                    subscriber.queue.clear()
                    subscriber.queued = 0
                    return taken
                subscriber.arrived.clear()
                await subscriber.arrived.wait()
                continue
            head = self._start + len(self._log)
            if subscriber.position < self._start:
                self._drop(subscriber)
                continue
            if subscriber.position < head:
                shared = self._chunks.get(subscriber.position)
                if shared is None:
                    shared = Chunk(self._log[subscriber.position - self._start :])
                    self._chunks[subscriber.position] = shared
                subscriber.position = head
                return shared
            await self._published.wait()

    async def run(self, stop: asyncio.Event) -> None:
        """The tail loop, until `stop` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)
            self._wake.clear()
            try:
                await self.pump()
            except Exception:  # a bad read must not end the feed; the next wake retries
                log.exception("event feed failed")

    async def pump(self) -> None:
        """Publish everything committed since the cursor, waking writers after each batch."""
        while True:
            batch = self.store.all_events(self.cursor, 500)
            for stored in batch:
                state = self.state_after(stored)
                self.cursor = stored.id
                for hook in self.hooks:
                    hook(stored, state)
                message = self.message(stored, state)
                self.publish(message)
                self.board.note(message)
                if is_final(state):
                    self.states.pop(stored.run_id, None)
            self._flush()
            if len(batch) < 500:
                return
            await asyncio.sleep(0)  # a long backlog: writers send between batches

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
