"""Spend caps in PostgreSQL: every process of the fleet sees one count.

One connection per process, opened on first use (and again after it broke), as the rate
buckets do (`buckets_pg`). A reservation is one transaction: `lock_total` locks each cap's
row of the window, in cap-name order, until it commits, so concurrent reservations of
several processes queue on the row and never over-commit.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import psycopg

from interlock.core.spend import CapKey, CapUsage
from interlock.providers.redaction import safe_url
from interlock.storage.postgres import PostgresStore
from interlock.storage.queries import named
from interlock.storage.spend_sql import reserve_in, settle_in, usage_of


class PostgresSpend:
    """The caps' counts in the database at `url`."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.where = safe_url(url)
        self._connect_timeout = connect_timeout
        self._db: psycopg.Connection[Any] | None = None
        self._migrated = False
        self._lock = threading.Lock()
        self._q = named("postgres", "spend.sql")

    def _connection(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed or self._db.broken:
            if not self._migrated:
                PostgresStore(self.url, pool_size=1).close()  # runs the migrations
                self._migrated = True
            self._db = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
            )
        return self._db

    def reserve(
        self, *, hold: str, keys: Sequence[CapKey], amount_usd: float, now: float, expires: float
    ) -> str | None:
        """See `interlock.providers.spend.SpendStore.reserve`."""
        with self._lock:
            db = self._connection()
            with db.transaction() as tx:

                def run(name: str, args: tuple[Any, ...]) -> list[Any]:
                    cursor = db.execute(self._q[name], args, prepare=True)
                    return cursor.fetchall() if cursor.description else []

                blocked = reserve_in(
                    run, hold=hold, keys=keys, amount_usd=amount_usd, now=now, expires=expires
                )
                if blocked is not None:
                    raise psycopg.Rollback(tx)
            return blocked

    def settle(self, *, hold: str, keys: Sequence[CapKey], spent_usd: float) -> None:
        """See `interlock.providers.spend.SpendStore.settle`."""
        with self._lock:
            db = self._connection()
            with db.transaction():

                def run(name: str, args: tuple[Any, ...]) -> list[Any]:
                    cursor = db.execute(self._q[name], args, prepare=True)
                    return cursor.fetchall() if cursor.description else []

                settle_in(run, hold=hold, keys=keys, spent_usd=spent_usd)

    def usage(self, *, now: float) -> list[CapUsage]:
        """See `interlock.providers.spend.SpendStore.usage`."""
        with self._lock:
            return usage_of(self._connection().execute(self._q["usage"], (now,)).fetchall())

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
