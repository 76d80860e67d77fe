"""What the loop does when the disk is full: wait with a growing pause, then stop and say so.

An append that fails for lack of space is not retried at once: the next try waits 0.1 s, then
twice as long each time (at most 2 s), so a full disk costs a few log lines, not a tight loop.
When space has not come back after `patience` seconds (well inside the lease, so nobody takes
the runs over meanwhile), the loop stops with `DiskFull`, naming the runs to resume.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterable

from interlock.errors import DiskFull

log = logging.getLogger("interlock.runtime")

FIRST_PAUSE = 0.1
LONGEST_PAUSE = 2.0


class DiskFullBackoff:
    """The state of one loop's wait for space."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self.since: float | None = None  # when the disk was first found full
        self.until = 0.0  # no append before this time
        self._pause = FIRST_PAUSE

    def failed(self, error: DiskFull, now: float, run_ids: Iterable[str]) -> None:
        """An append or a lease renewal found the disk full: pause, or give up (raise)."""
        ids = sorted(set(run_ids))
        if self.since is None:
            self.since, self._pause = now, FIRST_PAUSE
        elif now - self.since >= self.patience:
            raise DiskFull(stop_message(ids, error.message))
        else:
            self._pause = min(self._pause * 2, LONGEST_PAUSE)
        self.until = now + self._pause
        log.error(
            "disk full, trying again in %.1fs: %s",
            self._pause,
            error.message,
            extra={"action": "disk_full"},
        )

    def succeeded(self) -> None:
        """A write went through: space is back."""
        if self.since is not None:
            log.warning("disk space is back", extra={"action": "disk_full_over"})
        self.since, self.until = None, 0.0

    def waiting(self, now: float) -> float:
        """Seconds left before the next try (0 when not waiting)."""
        return max(0.0, self.until - now)


def stop_message(run_ids: list[str], cause: str) -> str:
    """What a person reads when the loop gives up: free space, then resume these runs."""
    if not run_ids:
        return f"disk full: free space, then start again ({cause})"
    resumes = "; ".join(f"`interlock resume {r}`" for r in run_ids[:5])
    more = f" (and {len(run_ids) - 5} more)" if len(run_ids) > 5 else ""
    return f"disk full: free space, then {resumes}{more} ({cause})"


def is_enospc(exc: BaseException) -> bool:
    """Whether an error is the file system's "no space left" (or a quota's)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
