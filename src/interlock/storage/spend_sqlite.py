"""Spend caps in the SQLite ledger: every process on this machine sees one count.

A connection of its own to the ledger file; each operation is one `BEGIN IMMEDIATE`
transaction, which takes SQLite's write lock first, so a reservation's read and write are
one step for every process on the file. The tables come with the ledger's migrations.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from interlock.core.spend import CapKey, CapUsage
from interlock.storage.queries import named
from interlock.storage.spend_sql import reserve_in, settle_in, usage_of


class SQLiteSpend:
    """The caps' counts in the ledger at `path` (opened, and so migrated, by its store)."""

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
        self._q = named("sqlite", "spend.sql")

    @contextmanager
    def _transaction(self) -> Iterator[Callable[[str, tuple[Any, ...]], list[Any]]]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield lambda name, args: self._db.execute(self._q[name], args).fetchall()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def reserve(
        self, *, hold: str, keys: Sequence[CapKey], amount_usd: float, now: float, expires: float
    ) -> str | None:
        """See `interlock.providers.spend.SpendStore.reserve`."""
        try:
            with self._transaction() as run:
                blocked = reserve_in(
                    run, hold=hold, keys=keys, amount_usd=amount_usd, now=now, expires=expires
                )
                if blocked is not None:
                    raise _Refused(blocked)  # rolls back the holds taken before it
        except _Refused as refusal:
            return refusal.cap
        return None

    def settle(self, *, hold: str, keys: Sequence[CapKey], spent_usd: float) -> None:
        """See `interlock.providers.spend.SpendStore.settle`."""
        with self._transaction() as run:
            settle_in(run, hold=hold, keys=keys, spent_usd=spent_usd)

    def usage(self, *, now: float) -> list[CapUsage]:
        """See `interlock.providers.spend.SpendStore.usage`."""
        with self._lock:
            return usage_of(self._db.execute(self._q["usage"], (now,)).fetchall())

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


class _Refused(Exception):
    """A reservation that does not fit: its holds are rolled back."""

    def __init__(self, cap: str) -> None:
        super().__init__(cap)
        self.cap = cap
