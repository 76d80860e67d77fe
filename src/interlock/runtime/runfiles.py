"""Run files that are projections of the ledger, written by a thread of their own instead of
the event loop: `status.json`, the outputs whose bodies the ledger holds, `final.md`, prompt
records, and the move of a delivered run's folder to the archive.

Creating and renaming a file waits on the file system's journal, which the fsyncs of the
ledger keep busy: under load each such write took 1-2 ms of the loop's time, most of it
waiting, none of it needed before the loop goes on. Each of these files can be rebuilt from
the ledger (or is a record nothing decides on), so it may lag behind the ledger:

- The loop hands the bytes over and goes on; a path handed over again before the thread got
  to it is written once, with its latest bytes. Files are written atomically (temporary file
  and rename, so a reader never sees one short) and without fsync; a prompt record is written
  in place.
- A task that reads outputs waits (without blocking the loop: `written`) until they are on
  disk (in the page cache; another process reading them sees them from then on).
- Before a delivered run's folder moves to the archive, and once a run ended otherwise, the
  outputs and `final.md` written without fsync are fsynced, with their folder, by this thread
  (`move`, `sync`): an archived run is never resumed, so what it holds must be durable first.
  The moves of a batch fsync their files at once, so the file system commits them together.
- `flush` waits until everything handed over (for one path, or all) is done. The orchestrator
  flushes a run's status.json before it hands back the lease of a run that has not ended and
  before it marks a file superseded; everything before it takes a run and when its loop ends.
- A folder that is gone by the time of a write (the run was moved or removed) is not made
  again: the write is dropped.
- A kill can leave these files behind the ledger. Resume (`RunDriver.restore_outputs`)
  rewrites every output that is missing or differs from its recorded hash before any task
  starts, `act` writes final.md and finishes a move to the archive, `interlock status` reads
  the ledger when status.json shows fewer events, and whoever drives the run next rewrites
  status.json at its first act.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.runtime import artifacts
from interlock.runtime.artifacts import write_atomic, write_record

log = logging.getLogger("interlock.runtime")


@dataclass(frozen=True)
class _Record:
    """A record written in place (no temporary file), its folder made if needed."""

    data: bytes


@dataclass(frozen=True)
class _Move:
    """Make `sync` durable (files, then the folder), then move the folder to `target` (None:
    it stays where it is)."""

    target: Path | None
    sync: tuple[Path, ...]


_Job = bytes | _Record | _Move


class StatusWriter:
    """One thread writing run files in the order they were handed over (a shard of
    `RunFiles`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._latest: dict[Path, _Job] = {}
        self._order: collections.deque[Path] = collections.deque()
        self._busy: set[Path] = set()  # the paths of the batch being written
        self._failed: dict[Path, OSError] = {}  # why the last write of a path failed
        self._waiters: list[tuple[set[Path], asyncio.AbstractEventLoop, asyncio.Future[None]]]
        self._waiters = []
        self._thread: threading.Thread | None = None

    def put(self, path: Path, data: bytes) -> None:
        """Write `data` to `path` atomically (no fsync), soon."""
        self._hand_over(path, data)

    def record(self, path: Path, data: bytes) -> None:
        """Write a record in place, its folder made if needed, soon."""
        self._hand_over(path, _Record(data))

    def move(self, folder: Path, target: Path | None, sync: Iterable[Path]) -> None:
        """Once everything handed over before it is written: fsync `sync` and `folder`, then
        rename `folder` to `target` (unless None)."""
        self._hand_over(folder, _Move(target, (*sync, folder)))

    def _hand_over(self, path: Path, job: _Job) -> None:
        with self._cond:
            if path not in self._latest:
                self._order.append(path)
            self._latest[path] = job
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="interlock-runfiles", daemon=True
                )
                self._thread.start()

    def pending(self, path: Path) -> bool:
        """Whether something handed over for `path` is not written yet."""
        with self._cond:
            return path in self._latest or path in self._busy

    def flush(self, path: Path | None = None) -> None:
        """Wait until everything handed over (for `path`, if given) is written."""
        with self._cond:
            if path is None:
                while self._order or self._busy:
                    self._cond.wait()
            else:
                while path in self._latest or path in self._busy:
                    self._cond.wait()

    async def written(self, paths: Iterable[Path]) -> None:
        """Return once none of `paths` waits to be written; the event loop goes on meanwhile.

        Raises:
            OSError: why the last write of one of them failed (a full disk).
        """
        wanted = set(paths)
        with self._cond:
            future: asyncio.Future[None] | None = None
            if self._waiting_for(wanted):
                loop = asyncio.get_running_loop()
                future = loop.create_future()
                self._waiters.append((wanted, loop, future))
        if future is not None:
            await future
        for path in wanted:
            failure = self._failed.get(path)
            if failure is not None:
                raise failure

    def _waiting_for(self, paths: set[Path]) -> bool:
        return any(p in self._latest or p in self._busy for p in paths)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._order:
                    self._cond.wait()
                batch = [(path, self._latest.pop(path)) for path in self._order]
                self._order.clear()
                self._busy = {path for path, _ in batch}
            try:
                self._write_batch(batch)
            finally:
                with self._cond:
                    self._busy = set()
                    self._cond.notify_all()
                    self._wake_waiters()

    def _wake_waiters(self) -> None:
        """Resolve the futures of `written` calls whose paths are all written (lock held)."""
        still = []
        for wanted, loop, future in self._waiters:
            if self._waiting_for(wanted):
                still.append((wanted, loop, future))
                continue
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(_resolve, future)
        self._waiters = still

    def _write_batch(self, batch: list[tuple[Path, _Job]]) -> None:
        """Write a batch in order; the moves together at its end, and what goes into a moved
        folder after them."""
        moves = [(path, job) for path, job in batch if isinstance(job, _Move)]
        targets = {job.target for _, job in moves if job.target is not None}
        later = []
        for path, job in batch:
            if isinstance(job, _Move):
                continue
            if targets and (path.parent in targets or path.parent.parent in targets):
                later.append((path, job))
                continue
            self._note(path, _guarded(_write_one, path, job))
        if moves:
            _guarded(_move_all, Path("archive"), moves)
        for path, job in later:
            self._note(path, _guarded(_write_one, path, job))

    def _note(self, path: Path, failure: OSError | None) -> None:
        """Keep why the write of `path` failed, for `written` (forgotten once one succeeds)."""
        if failure is not None:
            self._failed[path] = failure
        elif self._failed:
            self._failed.pop(path, None)


def _write_one(path: Path, job: _Job) -> None:
    if isinstance(job, _Record):
        write_record(path, job.data)
    elif isinstance(job, bytes):
        write_atomic(path, job, durable=False, make_folder=False)


def _move_all(_: Path, moves: list[tuple[Path, _Move]]) -> None:
    """Fsync the files of every move at once (one journal commit for all), then move."""
    artifacts.sync_paths([path for _, move in moves for path in move.sync])
    for folder, move in moves:
        if move.target is not None:
            _guarded(move_folder, folder, move.target)


def move_folder(folder: Path, target: Path) -> None:
    """Rename a run's folder into the archive (made if missing); done if it is there already."""
    try:
        os.rename(folder, target)  # the same file system: one atomic rename
    except FileNotFoundError:
        if folder.exists():  # only the archive folder is missing
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(folder, target)


def _guarded(job: Callable[..., None], path: Path, *args: Any) -> OSError | None:
    """Run one job of the thread: nothing it meets may stop the thread (`flush` would then wait
    for it forever) or anything else (these files are projections); an OSError other than a
    missing folder is returned (a task that reads the file fails with it)."""
    try:
        job(path, *args)
    except FileNotFoundError:
        pass  # the run's folder moved or went away: nothing to keep current there
    except OSError as exc:  # a full disk must not stop anything for it: resume rewrites it
        log.warning("cannot write %s: %s", path, exc)
        return exc
    except Exception:
        log.exception("cannot write %s", path)
    return None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


SHARDS = 8  # writer threads: a file creation waits on the journal, several wait at once


class RunFiles:
    """Writer threads for run files, each run's files always by the same one (so that they
    are written in the order they were handed over, the move to the archive last)."""

    def __init__(self, shards: int = SHARDS) -> None:
        self._shards = [StatusWriter() for _ in range(shards)]

    def _shard(self, path: Path) -> StatusWriter:
        """The writer of the run whose folder holds `path` (or is `path`)."""
        folder = path.parent.parent if path.parent.name == "prompts" else path.parent
        return self._shards[hash(folder.name) % len(self._shards)]

    def put(self, path: Path, data: bytes) -> None:
        """See `StatusWriter.put`."""
        self._shard(path).put(path, data)

    def record(self, path: Path, data: bytes) -> None:
        """See `StatusWriter.record`."""
        self._shard(path).record(path, data)

    def move(self, folder: Path, target: Path | None, sync: Iterable[Path]) -> None:
        """See `StatusWriter.move`."""
        self._shard(folder / "status.json").move(folder, target, sync)

    def pending(self, path: Path) -> bool:
        """See `StatusWriter.pending`."""
        return self._shard(path).pending(path)

    def flush(self, path: Path | None = None) -> None:
        """See `StatusWriter.flush`."""
        if path is not None:
            self._shard(path).flush(path)
            return
        for shard in self._shards:
            shard.flush()

    async def written(self, paths: Iterable[Path]) -> None:
        """See `StatusWriter.written`."""
        for path in paths:
            await self._shard(path).written([path])


@functools.cache
def status_writer() -> RunFiles:
    """The process's writers (shared by every orchestrator of the process)."""
    return RunFiles()
