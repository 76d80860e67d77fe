"""A store wrapper that injects storage faults into any `Store`.

A failed commit writes nothing and raises; an ambiguous commit writes everything and then
raises, as when the connection drops after the database committed; a busy store refuses a
lease renewal or a command poll as SQLite does when another writer holds the lock too long.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from interlock.errors import StorageError
from interlock.storage.base import AppendBatch, Lease, Store

Fault = Callable[[str], bool]  # asked "does this fault fire now?" by point name


class FaultyStore:
    """Delegates to `inner`, failing where `fault` says so."""

    def __init__(self, inner: Store, fault: Fault) -> None:
        self.inner = inner
        self.fault = fault

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def as_store(self) -> Store:
        """This wrapper, typed as the contract it keeps."""
        return cast(Store, self)

    def append_many(
        self, batches: Sequence[AppendBatch], now: float, *, releases: Sequence[Lease] = ()
    ) -> list[int | Exception]:
        """See `Store.append_many`; may fail before or (ambiguously) after committing."""
        if self.fault("commit_failed"):
            raise StorageError("simulated: the commit failed (disk I/O error)")
        results = self.inner.append_many(batches, now, releases=releases)
        if self.fault("commit_ambiguous"):
            raise StorageError("simulated: the connection dropped after the commit")
        return results

    def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        """See `Store.renew_lease`; may find the database locked."""
        if self.fault("store_busy"):
            raise StorageError("simulated: database is locked (busy timeout)")
        return self.inner.renew_lease(lease, ttl, now)

    def pending_commands(self, run_id: str | None = None) -> Any:
        """See `Store.pending_commands`; may find the database locked."""
        if self.fault("store_busy"):
            raise StorageError("simulated: database is locked (busy timeout)")
        return self.inner.pending_commands(run_id)
