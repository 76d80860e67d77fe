"""Rate-limit buckets in PostgreSQL: one row per bucket, changed by one function call.

`interlock_bucket_take` (migration 018) applies `interlock.providers.buckets.step` to the
row under its lock, with the server's clock: one round trip, atomic for every process of
the fleet. Callers lease units in chunks (`interlock.providers.limits`), so a call seldom
needs the round trip at all.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from interlock.core.buckets import Ask, Grant
from interlock.providers.redaction import safe_url
from interlock.storage.postgres import PostgresStore

_TAKE = "SELECT granted, wait_s FROM interlock_bucket_take(%s, %s, %s, %s, %s, %s, %s)"


class PostgresBuckets:
    """Buckets shared by every process using the database at `url`.

    One connection, opened on first use (and again after it broke); statements are short,
    so one connection per process serves all its calls. The schema is brought up to date
    on first use, as the ledger does, so the buckets work before any ledger was opened.
    """

    shared = True

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.where = safe_url(url)
        self._connect_timeout = connect_timeout
        self._db: psycopg.Connection[Any] | None = None
        self._migrated = False
        self._lock = threading.Lock()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed or self._db.broken:
            if not self._migrated:
                PostgresStore(self.url, pool_size=1).close()  # runs the migrations
                self._migrated = True
            self._db = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
            )
        return self._db

    def take(self, name: str, ask: Ask) -> Grant:
        """Apply `ask` to the row of `name` (raises psycopg errors when the server is gone)."""
        with self._lock:
            db = self._connection()
            row = db.execute(
                _TAKE,
                (name, ask.rate, ask.capacity, ask.need, ask.want, ask.force, ask.hold_s),
                prepare=True,
            ).fetchone()
        assert row is not None  # the function returns one row
        return Grant(granted=float(row[0]), wait_s=float(row[1]))

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
