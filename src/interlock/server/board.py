"""The runs board: what a list of every run needs, coalesced per tick and encoded once.

A list of runs shows each run's state, not each event, so its clients (`/ws/runs?view=summary`)
get one frame per tick (at most every `interval` seconds, or less often when so many clients
watch that the sends would cost more than a budget) holding the latest summary of every run
that changed since the previous tick. A run's summaries replace each other within a tick,
so a run's final state is always in the last tick it changed in, and the bytes sent follow the
number of runs that changed, not the number of events.

Each tick's frame is encoded once for every client, as JSON text and, for clients whose
connection takes prepared frames (see `wire.py`), as a WebSocket frame. A client that is level
gets the newest frame; one that was still sending when later ticks came gets them merged into
one frame (built once for all clients at the same place: skipped ahead, never replayed event
by event); one that fell behind every tick kept (`keep`) is dropped and told to reconnect,
which resyncs it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

from interlock.server.messages import run_summary
from interlock.server.wire import text_frame


@dataclass(frozen=True, slots=True)
class Tick:
    """One published tick: the summaries of the runs that changed, each encoded once."""

    number: int
    at: float  # when the oldest event it covers was recorded: its lag is measured from there
    id: int  # the newest global event id it covers
    runs: dict[str, str]  # run id -> its summary as JSON text
    frame: str


def frame_of(at: float, last_id: int, runs: dict[str, str]) -> str:
    """The frame for a set of run summaries (`at` first: clients find it without parsing)."""
    head = orjson.dumps({"type": "runs", "at": at, "id": last_id}).decode()
    return head[:-1] + ',"runs":[' + ",".join(runs.values()) + "]}"


@dataclass(eq=False)
class Watcher:
    """One client of the board: the number of the next tick it needs."""

    position: int
    dropped: asyncio.Event


class BoardDropped(Exception):
    """The client was still sending when the oldest kept tick went."""


class Board:
    """Coalesces run summaries into ticks and hands each watcher what it has not sent."""

    def __init__(self, *, interval: float = 0.1, keep: int = 50, sends: float = 1000) -> None:
        self.interval = interval
        self.keep = keep
        self.sends = sends
        self.watchers: set[Watcher] = set()
        self.ticks: deque[Tick] = deque()
        self.head = 0  # the number the next tick will have
        self._pending: dict[str, dict[str, Any]] = {}
        self._pending_at = 0.0
        self._pending_id = 0
        self._last = float("-inf")  # monotonic time of the last tick
        self._timer: asyncio.TimerHandle | None = None
        self._merged: dict[int, str] = {}  # catch-up frames from a position, this tick
        self._wires: dict[str, bytes] = {}  # frames serialized for the wire, this tick
        self._ticked = asyncio.Event()  # replaced at each tick: set once per tick

    def watch(self) -> Watcher:
        """A new watcher, level with the board (its list was read from the API)."""
        watcher = Watcher(position=self.head, dropped=asyncio.Event())
        self.watchers.add(watcher)
        return watcher

    def leave(self, watcher: Watcher) -> None:
        """Stop serving `watcher`."""
        self.watchers.discard(watcher)
        if not self.watchers:
            self._pending.clear()
            self.ticks.clear()
            self._merged.clear()
            self._wires.clear()

    def note(self, message: dict[str, Any]) -> None:
        """Take in an event's stream message (only the run's latest summary is kept)."""
        if not self.watchers or message.get("type") != "event":
            return
        if not self._pending:
            self._pending_at = float(message["at"])
        self._pending[str(message["run_id"])] = run_summary(message)
        self._pending_id = int(message["id"])

    def flush(self) -> None:
        """Publish what was noted now, or when the interval since the last tick is over (the
        first change after a quiet spell goes out at once)."""
        if not self._pending or self._timer is not None:
            return
        wait = self._last + self.spacing() - time.monotonic()
        if wait <= 0:
            self._tick()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self._tick)

    def spacing(self) -> float:
        """Seconds between ticks: `interval`, or more with many watchers, so that the server
        sends at most about `sends` frames a second in all (each send costs the event loop
        some 30-40 us of CPU, that the orchestrator sharing it does not get)."""
        return max(self.interval, len(self.watchers) / self.sends)

    def _tick(self) -> None:
        self._timer = None
        if not self._pending or not self.watchers:
            self._pending.clear()
            return
        runs = {run: orjson.dumps(s).decode() for run, s in self._pending.items()}
        at, last_id = self._pending_at, self._pending_id
        self.ticks.append(Tick(self.head, at, last_id, runs, frame_of(at, last_id, runs)))
        self.head += 1
        self._pending = {}
        self._last = time.monotonic()
        while len(self.ticks) > self.keep:
            self.ticks.popleft()
        oldest = self.ticks[0].number
        for watcher in [w for w in self.watchers if w.position < oldest]:
            watcher.dropped.set()  # still sending what came `keep` ticks ago: it is stalled
            self.watchers.discard(watcher)
        self._merged.clear()
        self._wires.clear()
        ticked, self._ticked = self._ticked, asyncio.Event()
        ticked.set()

    async def next_frame(self, watcher: Watcher) -> tuple[str, int]:
        """The frame `watcher` sends next and the newest event id it covers (waiting for a
        tick if it has sent them all).

        Raises:
            BoardDropped: it fell behind every tick kept.
        """
        while watcher.position >= self.head:
            if watcher.dropped.is_set():
                raise BoardDropped
            await self._ticked.wait()
        if watcher.dropped.is_set() or not self.ticks or watcher.position < self.ticks[0].number:
            raise BoardDropped
        newest = self.ticks[-1]
        if watcher.position == newest.number:
            frame = newest.frame
        else:
            frame = self._merged.get(watcher.position) or self._merge(watcher.position)
        watcher.position = self.head
        return frame, newest.id

    def wire(self, frame: str) -> bytes:
        """`frame` (one `next_frame` gave) as a WebSocket frame, serialized once for all the
        clients that send it."""
        built = self._wires.get(frame)
        if built is None:
            built = self._wires[frame] = text_frame(frame)
        return built

    def _merge(self, position: int) -> str:
        """One frame for the ticks from `position` on: each run's newest summary."""
        covered = [t for t in self.ticks if t.number >= position]
        runs: dict[str, str] = {}
        for tick in covered:
            for run, summary in tick.runs.items():
                runs.pop(run, None)  # re-inserted: runs keep the order they last changed in
                runs[run] = summary
        frame = frame_of(covered[0].at, covered[-1].id, runs)
        self._merged[position] = frame
        return frame
