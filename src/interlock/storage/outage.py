"""One warning when a database stops answering and one when it answers again.

Every pooled statement, every listening connection and the pool's own reconnection attempts
fail while a server is down: logged one by one, an outage of twenty seconds printed some thirty
lines of two or three lines each, and none of them said when it was over. The parts of a
process that talk to one database share one `Outage`: the first failure says what happened,
repeats are kept to a reminder a minute, and the first success after them says how long it
lasted.
"""

from __future__ import annotations

import logging
import threading
import time

from interlock.errors import StorageUnavailable

REMIND_EVERY = 60.0  # seconds between "still unreachable" reminders

_shared: dict[str, Outage] = {}
_shared_lock = threading.Lock()


def level_for(error: BaseException, otherwise: int = logging.WARNING) -> int:
    """The level to log `error` at where it stops a piece of work: debug for an outage (said
    once by its `Outage`), `otherwise` for anything else."""
    return logging.DEBUG if isinstance(error, StorageUnavailable) else otherwise


def one_line(error: BaseException | str) -> str:
    """An error's text on one line (libpq's messages carry a hint on a second, tabbed line)."""
    return " ".join(str(error).split())


class Outage:
    """Whether `what` (a database, named without its password) is answering, as the parts of
    a process that use it found; thread-safe."""

    def __init__(self, what: str, log: logging.Logger, remind_every: float = REMIND_EVERY) -> None:
        self.what = what
        self._log = log
        self._remind_every = remind_every
        self._lock = threading.Lock()
        self.since: float | None = None  # monotonic time of the first failure, while down
        self._said = 0.0

    @classmethod
    def of(cls, what: str, log: logging.Logger) -> Outage:
        """The one `Outage` of `what` in this process."""
        with _shared_lock:
            found = _shared.get(what)
            if found is None:
                found = _shared[what] = cls(what, log)
            return found

    def failed(self, error: BaseException | str) -> None:
        """A connection to it failed or was lost; the caller retries."""
        now = time.monotonic()
        with self._lock:
            if self.since is None:
                self.since = self._said = now
                self._log.warning(
                    "%s is not answering (%s); retrying until it does", self.what, one_line(error)
                )
            elif now - self._said >= self._remind_every:
                self._said = now
                self._log.warning(
                    "%s still not answering after %.0f s (%s); retrying",
                    self.what,
                    now - self.since,
                    one_line(error),
                )
            else:
                self._log.debug("%s: %s", self.what, one_line(error))

    def answered(self, began: float) -> None:
        """A statement or connection to it that `began` at that monotonic time succeeded
        (cheap when it was up already). One begun before the outage was noticed proves
        nothing: its answer may have left the server just before it went away."""
        if self.since is None:
            return
        with self._lock:
            if self.since is None or began < self.since:
                return
            lasted, self.since = time.monotonic() - self.since, None
            self._log.warning("%s answers again, after %.1f s", self.what, lasted)
