"""Recovering a damaged SQLite ledger into a new file, row by row, with Python's sqlite3.

The sqlite3 shell's `.recover` needs a build with the `sqlite_dbpage` table (Debian's 3.40
has none: it fails on every file), and its `.dump` ends in `ROLLBACK` when a page is
damaged, which throws away every row it did read. So the rows are copied here, table by
table, into a ledger made with the current schema: each table is read in key order; where a
damaged page stops the read, reading starts again past it (a rowid table skips ahead by
growing steps), then from the other end, backwards, up to the damage. A row read twice is
kept once. What no read reaches is lost, and counted.

The new file is made from this interlock's migrations, so it opens, passes SQLite's
`integrity_check` and is marked as a ledger; its triggers are made after the rows are in, so
that copying fills no derived column twice.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Tables copied first to last (a run before its events); each with its key columns in order.
_TABLES = (
    ("definitions", ("hash",)),
    ("runs", ("run_id",)),
    ("events", ("id",)),
    ("commands", ("id",)),
    ("cursors", ("name",)),
    ("outbox", ("key",)),
    ("artifacts", ("sha256",)),
    ("task_cache", ("fingerprint", "run_id", "task_id")),
    ("pruned_runs", ("run_id",)),
    ("task_slots", ("run_id", "task_id")),
    ("sqlite_sequence", ("name",)),
)
_BATCH = 500
_MAX_SKIP = 1 << 40  # past the largest rowid a ledger reaches


@dataclass
class Salvage:
    """What was copied: rows per table, and what stopped a read (one line each)."""

    rows: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    runs_expected_events: int = 0  # the events the recovered runs' records count
    integrity: str = ""
    unreadable: list[str] = field(default_factory=list)  # tables whose schema cannot be read
    run_ids: set[str] = field(default_factory=set)  # the runs recovered
    short: dict[str, tuple[int, int]] = field(default_factory=dict)  # run -> (events, counted)
    source_pages: int = 0  # pages of the damaged file


def salvage(source: Path, target: Path) -> Salvage:
    """Copy every readable row of the ledger `source` into a new ledger `target`.

    Raises:
        FileExistsError: `target` exists (nothing is overwritten).
        sqlite3.DatabaseError: `source` cannot be opened at all.
    """
    from interlock.storage.sqlite import SQLiteStore

    if target.exists():
        raise FileExistsError(target)
    found = Salvage()
    SQLiteStore(target, state_dir=target.parent / ".salvage-not-a-state-dir", verify=False).close()
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    dst = sqlite3.connect(target, isolation_level=None)
    try:
        triggers = dst.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        made = list(triggers.fetchall())
        dst.execute("BEGIN")
        for name, _ in made:
            dst.execute(f'DROP TRIGGER "{name}"')
        with contextlib.suppress(sqlite3.DatabaseError):
            found.source_pages = int(src.execute("PRAGMA page_count").fetchone()[0])
        for table, key in _TABLES:
            found.rows[table] = _copy(src, dst, table, key, found.problems, found.unreadable)
        for _, sql in made:
            dst.execute(sql)
        dst.execute("COMMIT")
        found.runs_expected_events = int(
            dst.execute("SELECT coalesce(sum(last_seq), 0) FROM runs").fetchone()[0]
        )
        found.run_ids = {str(r[0]) for r in dst.execute("SELECT run_id FROM runs")}
        counted = dst.execute(
            "SELECT r.run_id, r.last_seq, (SELECT count(*) FROM events e WHERE e.run_id = "
            "r.run_id) FROM runs r"
        )
        found.short = {str(r): (int(n), int(seq)) for r, seq, n in counted if int(n) < int(seq)}
        found.integrity = str(dst.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        src.close()
        dst.close()
    return found


def _columns(db: sqlite3.Connection, table: str, schema: str = "main") -> list[str]:
    return [str(row[1]) for row in db.execute(f'PRAGMA {schema}.table_info("{table}")')]


def _copy(
    src: sqlite3.Connection,
    dst: sqlite3.Connection,
    table: str,
    key: tuple[str, ...],
    problems: list[str],
    unreadable: list[str],
) -> int:
    """Copy the readable rows of `table`; the number copied."""
    try:
        have = _columns(src, table)
    except sqlite3.DatabaseError as exc:
        problems.append(f"{table}: its columns cannot be read ({exc})")
        unreadable.append(table)
        return 0
    columns = [c for c in _columns(dst, table) if c in have]
    if not columns or not all(k in columns for k in key):
        return 0  # a table this ledger's version did not have yet
    names = ", ".join(f'"{c}"' for c in columns)
    insert = f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})'
    before = dst.total_changes
    keys = [columns.index(k) for k in key]
    last: tuple[object, ...] | None = None
    stopped = False
    rowid = key == ("id",)
    for rows, error in _read(src, table, names, key, None, forward=True):
        if rows:
            dst.executemany(insert, rows)
            last = tuple(rows[-1][i] for i in keys)
        if error is not None:
            stopped = True
            problems.append(f"{table}: a damaged page stopped the read after key {last}: {error}")
            if rowid:
                _skip(src, dst, table, names, insert, last)
            break
    if stopped:
        # From the other end, backwards, up to the damage.
        for rows, error in _read(src, table, names, key, None, forward=False):
            if rows:
                dst.executemany(insert, rows)
            if error is not None:
                break
    return dst.total_changes - before


def _skip(
    src: sqlite3.Connection,
    dst: sqlite3.Connection,
    table: str,
    names: str,
    insert: str,
    last: tuple[object, ...] | None,
) -> None:
    """Past a damaged page of a rowid table: read on from further and further ahead until a
    read reaches the end (each try is one seek in the table's B-tree)."""
    position = int(last[0]) if last and isinstance(last[0], int) else 0
    step = 1
    while step < _MAX_SKIP:
        got = failed = False
        for rows, error in _read(
            src, table, names, ("id",), (position + step,), forward=True, inclusive=True
        ):
            if rows:
                dst.executemany(insert, rows)
                position, got = int(rows[-1][0]), True  # type: ignore[call-overload]
            failed = error is not None
        if not failed:
            return
        step = 1 if got else step * 2


def _read(
    src: sqlite3.Connection,
    table: str,
    names: str,
    key: tuple[str, ...],
    after: tuple[object, ...] | None,
    *,
    forward: bool,
    inclusive: bool = False,
) -> Iterator[tuple[list[tuple[object, ...]], str | None]]:
    """Batches of rows in key order from `after` on, each with the error that ended the
    read (None while it goes on)."""
    order = ", ".join(f'"{k}"' + ("" if forward else " DESC") for k in key)
    where, args = "", list(after or ())
    if after is not None:
        row = "(" + ", ".join(f'"{k}"' for k in key) + ")"
        mark = "(" + ", ".join("?" * len(key)) + ")"
        where = f" WHERE {row} {'>=' if inclusive else '>'} {mark}"
    query = f'SELECT {names} FROM "{table}"{where} ORDER BY {order}'
    try:
        cursor = src.execute(query, args)
    except sqlite3.DatabaseError as exc:
        yield [], str(exc)
        return
    with contextlib.closing(cursor):
        rows: list[tuple[object, ...]] = []
        while True:
            try:  # one row at a time: a batch that fails part-way would lose what it read
                row = cursor.fetchone()
            except sqlite3.DatabaseError as exc:
                yield rows, str(exc)
                return
            if row is None:
                yield rows, None
                return
            rows.append(tuple(row))
            if len(rows) >= _BATCH:
                yield rows, None
                rows = []
