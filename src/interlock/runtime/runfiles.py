"""`status.json` rewrites, written by a thread of their own instead of the event loop.

Creating and renaming a file waits on the file system's journal, which the fsyncs of outputs
and of the ledger keep busy: a rewrite of `status.json` took 1-2 ms of the loop's time under
load, most of it waiting, none of it needed before the loop goes on. status.json is a
projection of the ledger (never read back to decide anything), so it may lag behind:

- The loop hands the new bytes over and goes on; a path handed over again before the thread
  got to it is written once, with its latest bytes.
- `flush` waits until everything handed over (for one path, or all) is on disk (in the page
  cache, like before: no fsync). The orchestrator flushes a run's status.json before its
  directory moves to the archive (the last rewrite of an archived run is written into the
  archive after the move), before it hands back the lease of a run that has not ended and
  before it marks a file superseded; and all of them after it creates runs (status.json
  exists once a run is recorded) and when its loop ends.
- A folder that is gone by the time of the write (the run was moved or removed) is not made
  again: the write is dropped.
- A kill can leave status.json behind the ledger: `interlock status` then reads the ledger
  (it uses the file only when it shows every recorded event), and whoever drives the run
  next rewrites it from the ledger at its first act.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
from pathlib import Path

from interlock.runtime.artifacts import write_atomic

log = logging.getLogger("interlock.runtime")


class StatusWriter:
    """One thread writing projection files in the order they were handed over."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._latest: dict[Path, bytes] = {}
        self._order: collections.deque[Path] = collections.deque()
        self._busy: Path | None = None  # the path being written
        self._thread: threading.Thread | None = None

    def put(self, path: Path, data: bytes) -> None:
        """Write `data` to `path` atomically, soon."""
        with self._cond:
            if path not in self._latest:
                self._order.append(path)
            self._latest[path] = data
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="interlock-status", daemon=True
                )
                self._thread.start()

    def flush(self, path: Path | None = None) -> None:
        """Wait until everything handed over (for `path`, if given) is written."""
        with self._cond:
            if path is None:
                while self._order or self._busy is not None:
                    self._cond.wait()
            else:
                while path in self._latest or self._busy == path:
                    self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._order:
                    self._cond.wait()
                path = self._order.popleft()
                data = self._latest.pop(path)
                self._busy = path
            try:
                write_atomic(path, data, durable=False, make_folder=False)
            except FileNotFoundError:
                pass  # the run's folder moved or went away: nothing to keep current there
            except OSError as exc:  # a projection: a full disk must not stop anything for it
                log.warning("cannot write %s: %s", path, exc)
            except Exception:  # never let the thread die: `flush` would wait for it forever
                log.exception("cannot write %s", path)
            finally:
                with self._cond:
                    self._busy = None
                    self._cond.notify_all()


@functools.cache
def status_writer() -> StatusWriter:
    """The process's writer (one thread for every orchestrator of the process)."""
    return StatusWriter()
