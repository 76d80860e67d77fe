"""Provider batches in PostgreSQL: every process of the fleet sees the same batches.

One connection per process, opened on first use (and again after it broke), as the spend
caps do (`spend_pg`); the tables come with the store's migrations (022).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from interlock.providers.redaction import safe_url
from interlock.storage.postgres import PostgresStore
from interlock.storage.provider_batches import Run, SQLBatches
from interlock.storage.queries import named


class PostgresBatches(SQLBatches):
    """The provider batches of the database at `url`."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.where = safe_url(url)
        self._connect_timeout = connect_timeout
        self._db: psycopg.Connection[Any] | None = None
        self._migrated = False
        self._lock = threading.Lock()
        self._q = named("postgres", "provider_batches.sql")

    def _connection(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed or self._db.broken:
            if not self._migrated:
                PostgresStore(self.url, pool_size=1).close()  # runs the migrations
                self._migrated = True
            self._db = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
            )
        return self._db

    @contextmanager
    def transaction(self) -> Iterator[Run]:
        with self._lock:
            db = self._connection()
            with db.transaction():

                def run(name: str, args: tuple[Any, ...]) -> list[Any]:
                    cursor = db.execute(self._q[name], args)
                    return cursor.fetchall() if cursor.description else []

                yield run

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
