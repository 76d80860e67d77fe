"""A run's history as the read routes need it: folded off the event loop, and only once.

A run of 100,000 events takes seconds to read from the store and fold; done on the event
loop, that froze the whole server (health checks, streams, the orchestrator) for as long,
and a few clients polling a run's graph held it up for good. So each read of a run's folded
views runs on one of `THREADS` threads of its own, and what it folded is kept (for the
`RUNS` runs read last, at most `EVENTS` events of history in all): the next read of that run
reads only the events recorded since, and a read while nothing happened reads none. Reads of
one run wait for each other (a lock per run, awaited on the loop), so four clients polling
one run fold it once; reads of different runs go on side by side.

What a route builds from the folded views (`Folded`) it builds inside `call`, on the read
thread and under the run's lock: the views are only ever touched there.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi.encoders import jsonable_encoder
from fastapi.responses import Response

from interlock.core.state import RunState, apply
from interlock.server.attempts import TimelineFold
from interlock.server.graph import PathFold
from interlock.storage.base import RunRecord

if TYPE_CHECKING:
    from interlock.api import Interlock

T = TypeVar("T")
THREADS = 2  # reads never take more of the process than this
RUNS = 32  # runs whose folded history is kept
EVENTS = 1_000_000  # events of history kept folded, over all those runs
PAGE = 10_000  # events read from the store at a time while folding
MEMO = 16  # answers derived from one run's folded views, kept until it records more
BUNDLES = 64 * 1024 * 1024  # bytes of exported bundles kept, each for its run's last seq


def render(value: Any, depth: int = 2) -> bytes:
    """`value` as the API's JSON answer encodes it (`JSONResponse`'s encoding). A long list
    is encoded an item at a time: one call of the C encoder holds the interpreter for as long
    as it runs, which for a body of megabytes held up the event loop on the other thread."""
    if depth and isinstance(value, dict):
        parts = (_encode(str(k)) + b":" + render(v, depth - 1) for k, v in value.items())
        return b"{" + b",".join(parts) + b"}"
    if depth and isinstance(value, list | tuple) and len(value) > 64:
        return b"[" + b",".join(render(item, depth - 1) for item in value) + b"]"
    return _encode(value)


def _encode(value: Any) -> bytes:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except TypeError:  # not plain JSON (a set, a dataclass): as FastAPI would encode it
        return _encode(jsonable_encoder(value))
    return text.encode("utf-8")


def respond(value: Any) -> Response:
    """`value` as a JSON answer, encoded here (on a read thread)."""
    return Response(render(value), media_type="application/json")


@dataclass(slots=True)
class Folded:
    """One run's history folded into the views the read routes serve."""

    run_id: str
    record: RunRecord | None = None  # the run as the store listed it at this read
    seq: int = 0  # the last event folded
    state: RunState = field(default_factory=RunState)
    timeline: TimelineFold = field(default_factory=TimelineFold)
    path: PathFold = field(default_factory=PathFold)
    # What routes derived from the views at `seq` (cleared when more events are folded).
    memo: dict[Hashable, Any] = field(default_factory=dict)

    def remember(self, key: Hashable, make: Callable[[], T]) -> T:
        """`make()`, computed once per folded `seq` (at most `MEMO` answers are kept: a client
        asking for ever other pages cannot fill the memory)."""
        if key not in self.memo:
            if len(self.memo) >= MEMO:
                del self.memo[next(iter(self.memo))]
            self.memo[key] = make()
        found: T = self.memo[key]
        return found


@dataclass(slots=True)
class _Entry:
    folded: Folded
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Reads:
    """The folded histories of the runs read last, kept up to date on read."""

    def __init__(self, api: Interlock, *, runs: int = RUNS, events: int = EVENTS) -> None:
        self.api = api
        self.runs, self.events = runs, events
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="interlock-read")
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # Exports read every event and file of a run: one at a time, beside the other reads.
        self._exports = ThreadPoolExecutor(1, thread_name_prefix="interlock-export")
        self._bundles: OrderedDict[str, tuple[int, bytes]] = OrderedDict()

    async def call(self, run_id: str, build: Callable[[Folded], T]) -> T:
        """`build(folded)` on a read thread, with `run_id`'s history folded to its last event."""
        entry = self._entry(run_id)
        async with entry.lock:
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(self._pool, self._refresh_then, entry, build)
            try:
                return await asyncio.shield(work)
            finally:
                if not work.done():
                    # The request was cancelled (its client left) while the thread folds: the
                    # lock is kept until it is done, so no two threads ever fold one run.
                    await asyncio.wait({work})

    async def json(self, run_id: str, build: Callable[[Folded], Any]) -> Response:
        """`build(folded)` encoded as the JSON answer on the read thread too: a big answer's
        encoding would hold the loop as long as a fold."""
        return await self.call(run_id, lambda folded: respond(build(folded)))

    async def json_off_loop(self, work: Callable[[], Any]) -> Response:
        """`work()` and its encoding as the JSON answer, on a read thread."""
        return await self.off_loop(lambda: respond(work()))

    async def off_loop(self, work: Callable[[], T]) -> T:
        """Other reads that are heavy but not kept (a diff of two runs, a page of events)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    async def bundle(self, run_id: str, export: Callable[[], bytes]) -> bytes:
        """`export()` (the run as a bundle) on the export thread, or the bundle made for the
        run's last event already."""
        return await asyncio.get_running_loop().run_in_executor(
            self._exports, self._bundle, run_id, export
        )

    def _bundle(self, run_id: str, export: Callable[[], bytes]) -> bytes:
        last = self.api.store.get_run(run_id).last_seq
        kept = self._bundles.get(run_id)
        if kept is not None and kept[0] == last:
            self._bundles.move_to_end(run_id)
            return kept[1]
        data = export()
        self._bundles[run_id] = (last, data)
        self._bundles.move_to_end(run_id)
        while sum(len(d) for _, d in self._bundles.values()) > BUNDLES and self._bundles:
            self._bundles.popitem(last=False)
        return data

    def close(self) -> None:
        """Stop the read threads (a read in progress finishes first)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._exports.shutdown(wait=True, cancel_futures=True)
        self._entries.clear()
        self._bundles.clear()

    def _entry(self, run_id: str) -> _Entry:
        entry = self._entries.get(run_id)
        if entry is None:
            entry = self._entries[run_id] = _Entry(Folded(run_id))
        self._entries.move_to_end(run_id)
        self._evict()
        return entry

    def _evict(self) -> None:
        """Forget the runs read longest ago beyond the bounds (not one being read now)."""
        total = sum(e.folded.seq for e in self._entries.values())
        for run_id in list(self._entries)[:-1]:  # never the one just asked for
            if len(self._entries) <= self.runs and total <= self.events:
                return
            entry = self._entries[run_id]
            if entry.lock.locked():
                continue
            total -= entry.folded.seq
            del self._entries[run_id]

    def _refresh_then(self, entry: _Entry, build: Callable[[Folded], T]) -> T:
        folded = entry.folded
        store = self.api.store
        record = store.get_run(folded.run_id)
        if record.last_seq < folded.seq:  # the history was replaced (an import): start over
            folded = entry.folded = Folded(folded.run_id)
        folded.record = record
        while folded.seq < record.last_seq:
            page = store.events(folded.run_id, folded.seq, PAGE)
            if not page:
                break
            for stored in page:
                apply(folded.state, stored.event)
            folded.timeline.feed(page)
            folded.path.feed(page)
            folded.seq = page[-1].seq
            folded.memo.clear()
        return build(folded)
