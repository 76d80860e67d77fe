"""Where task inputs and outputs travel between machines: content-addressed blobs.

Orchestrators and workers need not share a file system. An artifact is stored once under its
SHA-256 and fetched by it; the database holds them by default. Another backend (an object
store, a shared directory) only has to implement `ArtifactStore`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from interlock.distributed.sql import by_keys, queue_queries
from interlock.storage.postgres import PostgresStore

Q = queue_queries()


class ArtifactStore(Protocol):
    """Immutable blobs named by their SHA-256."""

    def put(self, data: bytes) -> str:
        """Store `data` (a no-op if present); returns its SHA-256 hex."""
        ...

    def get(self, sha256: str) -> bytes:
        """The blob (KeyError if unknown)."""
        ...

    def get_many(self, digests: Iterable[str]) -> dict[str, bytes]:
        """The blobs of `digests` by SHA-256 (KeyError if one is unknown)."""
        ...

    def missing(self, digests: Iterable[str]) -> set[str]:
        """Which of `digests` are not stored yet."""
        ...


class RecentBodies:
    """The bodies a process handled last, by SHA-256, within a budget of bytes.

    An artifact never changes, so a body kept under its digest is always the right one: a
    worker that produced a task's output reads it back from here when a later task of the
    run takes it as input (a fan-in usually runs where some of its inputs were made),
    without a round trip. Safe to use from several threads."""

    def __init__(self, budget: int = 32 << 20, largest: int = 1 << 20) -> None:
        self.budget, self.largest = budget, largest
        self._bodies: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def keep(self, data: bytes, sha256: str | None = None) -> str:
        """Keep `data` (its digest computed unless the caller just did); returns the digest."""
        sha = sha256 or hashlib.sha256(data).hexdigest()
        if len(data) > self.largest:
            return sha
        with self._lock:
            if sha not in self._bodies:
                self._bodies[sha] = data
                self._size += len(data)
            self._bodies.move_to_end(sha)
            while self._size > self.budget:
                self._size -= len(self._bodies.popitem(last=False)[1])
        return sha

    def take(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Those of `digests` kept here."""
        with self._lock:
            found = {sha: self._bodies[sha] for sha in digests if sha in self._bodies}
            for sha in found:
                self._bodies.move_to_end(sha)
        return found


class PostgresArtifacts:
    """Artifacts in the ledger's database (fine up to a few megabytes per output), the last
    ones handled kept in memory (`recent`) as well."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.recent = RecentBodies()

    def put(self, data: bytes) -> str:
        """See `ArtifactStore.put`."""
        sha = self.recent.keep(data)
        self.store.single(lambda db: db.execute(Q["put_artifact"], (sha, len(data), data)))
        return sha

    def get(self, sha256: str) -> bytes:
        """See `ArtifactStore.get`."""
        rows = self.store.single(lambda db: db.execute(Q["get_artifact"], (sha256,)).fetchall())
        if not rows:
            raise KeyError(f"artifact {sha256[:12]} is not stored")
        return bytes(rows[0][0])

    def get_many(self, digests: Iterable[str]) -> dict[str, bytes]:
        """See `ArtifactStore.get_many` (one query for those not kept in memory)."""
        wanted = sorted(set(digests))
        found = self.recent.take(wanted)
        unknown = [sha for sha in wanted if sha not in found]
        if not unknown:
            return found
        query = Q["get_artifacts"]
        rows = self.store.single(lambda db: by_keys(db, query, unknown))
        for sha, body in rows:
            data = found[sha] = bytes(body)
            self.recent.keep(data, sha)
        for sha in wanted:
            if sha not in found:
                raise KeyError(f"artifact {sha[:12]} is not stored")
        return found

    def missing(self, digests: Iterable[str]) -> set[str]:
        """See `ArtifactStore.missing`."""
        wanted = set(digests)
        if not wanted:
            return set()
        query = Q["has_artifacts"]
        rows = self.store.single(lambda db: by_keys(db, query, sorted(wanted)))
        return wanted - {r[0] for r in rows}
