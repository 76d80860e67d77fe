"""Provider batches in the SQLite ledger: every process on the file sees the same batches.

A connection of its own to the ledger file, each operation one `BEGIN IMMEDIATE`
transaction; the tables come with the ledger's migrations (014).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from interlock.storage.provider_batches import Run, SQLBatches
from interlock.storage.queries import named


class SQLiteBatches(SQLBatches):
    """The provider batches of the ledger at `path` (opened, and so migrated, by its store)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        from interlock.storage.sqlite import SQLiteStore

        self.path = Path(path)
        self.where = str(self.path)
        SQLiteStore(self.path, verify=False).close()  # runs the migrations
        self._db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
        )
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        self._lock = threading.Lock()
        self._q = named("sqlite", "provider_batches.sql")

    @contextmanager
    def transaction(self) -> Iterator[Run]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield lambda name, args: self._db.execute(self._q[name], args).fetchall()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()
