"""Where task inputs and outputs travel between machines: content-addressed blobs.

Orchestrators and workers need not share a file system. An artifact is stored once under its
SHA-256 and fetched by it; the database holds them by default. Another backend (an object
store, a shared directory) only has to implement `ArtifactStore`.
"""

from __future__ import annotations

import hashlib
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


class PostgresArtifacts:
    """Artifacts in the ledger's database (fine up to a few megabytes per output)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def put(self, data: bytes) -> str:
        """See `ArtifactStore.put`."""
        sha = hashlib.sha256(data).hexdigest()
        self.store.single(lambda db: db.execute(Q["put_artifact"], (sha, len(data), data)))
        return sha

    def get(self, sha256: str) -> bytes:
        """See `ArtifactStore.get`."""
        rows = self.store.single(lambda db: db.execute(Q["get_artifact"], (sha256,)).fetchall())
        if not rows:
            raise KeyError(f"artifact {sha256[:12]} is not stored")
        return bytes(rows[0][0])

    def get_many(self, digests: Iterable[str]) -> dict[str, bytes]:
        """See `ArtifactStore.get_many` (one query for all of them)."""
        wanted = sorted(set(digests))
        if not wanted:
            return {}
        query = Q["get_artifacts"]
        rows = self.store.single(lambda db: by_keys(db, query, wanted))
        found = {sha: bytes(body) for sha, body in rows}
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
