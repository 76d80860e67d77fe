"""Provider batches in the SQLite ledger: every process on the file sees the same batches.

A connection of its own to the ledger file, each operation one `BEGIN IMMEDIATE`
transaction; the tables come with the ledger's migrations (015).
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
        self.path = Path(path)
        self.where = str(self.path)
        self._busy_timeout = busy_timeout
        self._db: sqlite3.Connection | None = None  # opened on first use: most runs batch nothing
        self._lock = threading.Lock()
        self._q = named("sqlite", "provider_batches.sql")

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            from interlock.storage.sqlite import SQLiteStore

            SQLiteStore(self.path, verify=False).close()  # runs the migrations
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False,
                timeout=self._busy_timeout)  # fmt: skip
            self._db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        return self._db

    @contextmanager
    def transaction(self) -> Iterator[Run]:
        with self._lock:
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield lambda name, args: db.execute(self._q[name], args).fetchall()
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
