"""Making the files of ended runs durable before they are archived or let go.

The loop writes outputs without an fsync (their bodies are durable in the ledger already);
a run that ended is archived, or let go, only once a sync that began after its last event
is done (`RunDriver.durable`): an archived run is never resumed, and a resume is what would
repair its files after a power loss.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from interlock.core.state import RunStatus
from interlock.runtime import artifacts

if TYPE_CHECKING:
    from interlock.runtime.driver import RunDriver

log = logging.getLogger("interlock.runtime")


class EndedSyncs:
    """The syncs of ended runs' files: one at a time, in a thread of its own."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        heartbeat: float,
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        current: Callable[[RunDriver], bool],
        mark: Callable[[RunDriver], None],
        wake_at: Callable[[float, RunDriver], None],
        wake: Callable[[], None],
    ) -> None:
        """`loop`: the running loop, None when stepped by a simulation; `current`: whether
        the loop still drives that run; `mark`: look at it at the next tick; `wake_at`: at
        that time; `wake`: look again now."""
        self._clock = clock
        self._heartbeat = heartbeat
        self._loop = loop
        self._current = current
        self._mark = mark
        self._wake_at = wake_at
        self._wake = wake
        # Ended runs whose files wait to be made durable, and the sync under way (one at a
        # time: runs that end meanwhile are synced together by the next).
        self._due: dict[str, RunDriver] = {}
        self._running: concurrent.futures.Future[OSError | None] | None = None

    def ended(self, drivers: Iterable[RunDriver]) -> None:
        """Make the files of runs that ended durable, in a thread of its own: a delivered
        run is archived, and an ended one let go, only after that (see `RunDriver.durable`).
        One sync runs at a time; runs that end meanwhile go together into the next, whose
        fsyncs the file system commits together."""
        for driver in drivers:
            state = driver.state
            if not state.status.ended or state.archived or driver.syncing:
                continue
            if not driver.durable():
                self._due[driver.run_id] = driver
            elif state.status is RunStatus.DELIVERED:
                self._mark(driver)  # durable without a sync (written by `act`): archive it
        if self._running is not None or not self._due:
            return
        batch = [(d, d.state.events, d.unsynced) for d in self._due.values()]
        self._due = {}
        for driver, _, _ in batch:
            driver.syncing, driver.unsynced = True, []
        paths = [path for _, _, files in batch for path in files]
        loop = self._loop()
        if loop is None or not paths:  # stepped by a simulation, or nothing to wait for
            self._synced(batch, _sync(paths))
            return
        running = _sync_thread().submit(_sync, paths)
        self._running = running

        def done(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(self._synced, batch, running.result())

        running.add_done_callback(done)

    def _synced(
        self, batch: list[tuple[RunDriver, int, list[artifacts.StrPath]]], error: OSError | None
    ) -> None:
        """A sync ended: its runs go on (to their archive, or to be let go), or, if it
        failed, try again later; the next sync starts if runs wait for it."""
        self._running = None
        now = self._clock()
        for driver, mark, files in batch:
            driver.syncing = False
            if error is not None:
                driver.unsynced[:0] = files
                self._wake_at(now + self._heartbeat, driver)  # not at once
                continue
            driver.synced_mark = mark
            if self._current(driver):
                self._mark(driver)
        if error is not None:
            log.error(
                "cannot make the files of %d ended run(s) durable (tried again in %gs): %s",
                len(batch),
                self._heartbeat,
                error,
                extra={"action": "sync_failed"},
            )
        self._wake()
        if self._due:
            self.ended([])

    async def finish(self, drivers: Iterable[RunDriver]) -> None:
        """Before the loop lets its runs go: the sync under way ends, and runs that ended
        since are synced (their leases are released as they are let go). `drivers` is read
        once that sync ended."""
        if self._running is not None:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(self._running)
            await asyncio.sleep(0)  # its callback runs
        ended = [d for d in drivers if d.state.status.ended and not d.durable()]
        paths = [path for driver in ended for path in driver.unsynced]
        if ended and await asyncio.to_thread(_sync, paths) is None:
            for driver in ended:
                driver.unsynced, driver.synced_mark = [], driver.state.events


def _sync(paths: list[artifacts.StrPath]) -> OSError | None:
    """`artifacts.sync_files`, returning its error instead of raising it."""
    try:
        artifacts.sync_files(paths)
    except OSError as exc:
        return exc
    return None


@functools.cache
def _sync_thread() -> concurrent.futures.ThreadPoolExecutor:
    """The thread that makes ended runs' files durable (its fsyncs spread over the writers'
    pool)."""
    return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="interlock-sync")
