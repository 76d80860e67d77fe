"""The embedded ledger: one SQLite file in WAL mode.

Writes take the database lock up front (`BEGIN IMMEDIATE`) so a writer never fails half-way on
a lock upgrade, and wait up to `busy_timeout` for other writers. `synchronous=FULL` (the
default) makes an acknowledged commit survive power loss; `NORMAL` survives a process crash but
may lose the last commits on power loss, and is offered only as an explicit setting.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from interlock.errors import DiskFull, LeaseHeld, LeaseLost, RunNotFound, StorageError
from interlock.storage import chain, codec, run_list
from interlock.storage.base import (
    AppendBatch,
    CacheEntry,
    CommandRecord,
    Lease,
    OutboxItem,
    PrunedRun,
    RunRecord,
    StoredEvent,
    damaged_history,
    receipt_from_row,
)
from interlock.storage.queries import migrations, queries
from interlock.storage.rows import event_from_row, outbox_from_row, registration_row, run_from_row
from interlock.storage.run_list import RunQuery

APPLICATION_ID = 0x494E544C  # "INTL": marks the file as an interlock ledger
Q = queries("sqlite")
NEVER = 1e300  # `next_at` of a notification given up on: never due again


class SQLiteStore:
    """A `Store` on one SQLite file (thread-safe: one connection behind a lock)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 10.0,
        state_dir: str | Path | None = None,
        verify: bool = True,
    ) -> None:
        self.path = Path(path)
        self.state_dir = Path(state_dir) if state_dir is not None else self.path.parent
        self._lock = threading.RLock()
        # Why writes are refused (a ledger that failed its check, or a full disk at open);
        # reads still work, so that people can see what they have.
        self.refusal: str | None = None
        self.check_seconds = 0.0  # what the check before the first write cost
        self._verified = not verify  # checked before the first write, so reads never pay
        self._ahead: _CheckAhead | None = None  # that check, started early (`verify_ahead`)
        # Where each run this store appended to ends, as its last commit left it: the next
        # append of the run by the same lease sets its seq and chain head in the fence
        # (`_append_tail`). Only a hint: the statement checks it against the row.
        self._tails: dict[str, _Tail] = {}
        if ledger_lost(self.path, self.state_dir):
            raise StorageError(lost_ledger(self.path, self.state_dir))
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            self._check_identity()
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute(f"PRAGMA synchronous = {synchronous}")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            error = self._storage_error(exc)
            if not isinstance(error, DiskFull):
                raise error from None
            self._open_for_reading(error, busy_timeout)

    def _open_for_reading(self, error: DiskFull, busy_timeout: float) -> None:
        """On a full disk SQLite cannot make the files a writer needs: open the ledger
        read-only, so that `runs` and `status` still answer, and refuse writes."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        wal = self.path.with_name(self.path.name + "-wal")
        # Without a write-ahead log to replay, the file alone is the ledger: read it as is.
        mode = "ro" if wal.exists() and wal.stat().st_size else "ro&immutable=1"
        try:
            self._db = sqlite3.connect(
                f"file:{self.path}?mode={mode}",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=busy_timeout,
            )
            self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError:
            raise error from None
        self.refusal = error.message

    def _beside_runs(self, what: str) -> str:
        return (
            f"{self.path} {what}, but {self.state_dir} holds runs (runs/ or archive/): it is "
            "not taken as a new, empty ledger. If the ledger was lost, put a copy of it back "
            "(`interlock doctor` shows what the state directory holds); to start afresh, move "
            "runs/ and archive/ away or use another --home"
        )

    def _storage_error(self, exc: sqlite3.Error) -> StorageError:
        text = str(exc)
        code = getattr(exc, "sqlite_errorname", "") or "an SQLite error"
        full = code == "SQLITE_FULL" or "full" in text
        if full or ("disk I/O" in text and no_space(self.path.parent)):
            return DiskFull(
                f"{self.path}: disk full (ENOSPC, no space left on device; SQLite said: "
                f"{text}); free space on {self.path.parent}"
            )
        if "not a database" in text or "malformed" in text:
            fix = "it is corrupted or not a SQLite file; run `interlock doctor`"
        elif "readonly" in text or "unable to open" in text:
            fix = "the state directory is not writable; fix its permissions or use another --home"
        elif "locked" in text or "busy" in text:
            fix = "another process holds the database lock; retry, or check for a stuck process"
        else:
            fix = f"{code}; check the disk and the file's permissions, and run `interlock doctor`"
        return StorageError(f"{self.path}: ledger error: {text} ({fix})")

    def _tables(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])

    def _check_identity(self) -> None:
        app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
            raise StorageError(
                f"{self.path}: this SQLite file is not an interlock ledger (it holds other "
                "tables); point --home at another directory"
            )
        if not tables and holds_runs(self.state_dir) and not self._tables():
            # (counted again: a process starting the first run makes them before its folder)
            empty = self.path.stat().st_size == 0
            raise StorageError(
                self._beside_runs("is empty (0 bytes)" if empty else "holds no ledger tables")
            )

    def verify_ahead(self) -> None:
        """Start the check `_verify` makes before the first write now, on a thread and a
        connection of its own, so that it overlaps what the process does before it writes
        (importing the engine, reading a workflow file): SQLite reads the file without
        holding Python's lock. The first write waits for its answer and acts on it as on
        a check made then. Does nothing once the check is made or started."""
        with self._lock:
            if self._verified or self._ahead is not None or self.refusal is not None:
                return
            try:
                self._ahead = _CheckAhead(self.path)
            except sqlite3.Error:  # the first write then checks as it always did
                self._ahead = None

    def _verify(self) -> None:
        """SQLite's check of the ledger (`ledger_check`), once per process before its first
        write: a ledger that fails it accepts no writes. It reads the whole file, so
        commands that only read never run it, and `interlock run` starts it early
        (`verify_ahead`)."""
        self._verified = True
        started = time.perf_counter()
        if self._ahead is not None:
            rows = self._ahead.answer()
            self._ahead = None
        else:
            rows = ledger_check(self._db, self.path)
        self.check_seconds = time.perf_counter() - started
        if rows != ["ok"]:
            self.refusal = (
                f"{self.path} fails SQLite's integrity check ({'; '.join(rows)[:300]}): it "
                "accepts no new writes, so that nothing more is built on a damaged ledger. Runs "
                "can still be read. Run `interlock doctor` for what is affected and how to "
                "recover the ledger into a new file"
            )

    def _migrate(self) -> None:
        current = self._db.execute("PRAGMA user_version").fetchone()[0]
        app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        scripts = migrations("sqlite")
        newest = scripts[-1][0] if scripts else 0
        if current > newest:
            raise StorageError(
                f"{self.path}: ledger schema version {current} is newer than this interlock "
                f"supports ({newest}); upgrade interlock"
            )
        if current == newest and app_id == APPLICATION_ID:
            return  # nothing to write: opening costs no write (a full disk can still be read)
        with self._write() as db:
            current = db.execute("PRAGMA user_version").fetchone()[0]
            for version, script in scripts:
                if version > current:
                    for statement in script.split(";\n"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version = {version}")
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if not self._verified:
            with self._lock:
                self._verify()
        if self.refusal is not None:
            raise (
                DiskFull(self.refusal)
                if "disk full" in self.refusal
                else StorageError(self.refusal)
            )
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._storage_error(exc) from None
            try:
                yield self._db
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise self._storage_error(exc) from None
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise self._storage_error(exc) from None

    def _read(self, query: str, *args: Any) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(query, args).fetchall()
            except sqlite3.Error as exc:
                raise self._storage_error(exc) from None

    def create_run(
        self,
        *,
        run_id: str,
        pipeline: str,
        topic: str,
        definition_hash: str,
        definition: str,
        source: str,
        created_at: float,
    ) -> None:
        """See `Store.create_run`."""
        with self._write() as db:
            db.execute(Q["insert_definition"], (definition_hash, definition))
            db.execute(
                Q["insert_run"],
                (run_id, pipeline, topic, definition_hash, source, created_at, created_at),
            )

    def definition(self, definition_hash: str) -> str:
        """See `Store.definition`."""
        rows = self._read(Q["get_definition"], definition_hash)
        if not rows:
            raise StorageError(f"{self.path}: definition {definition_hash[:12]} is missing")
        return str(rows[0][0])

    def acquire_lease(
        self, run_id: str, owner: str, ttl: float, now: float, *, take_over_from: str | None = None
    ) -> Lease:
        """See `Store.acquire_lease`."""
        with self._write() as db:
            row = db.execute(Q["get_lease"], (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id!r}")
            holder, token, expires = row
            free = holder is None or expires is None or expires <= now
            if not (free or holder in (owner, take_over_from)):
                raise LeaseHeld(
                    f"run {run_id} is being driven by {holder} (lease for {expires - now:.0f}s "
                    "more); wait for it, or stop that process"
                )
            lease = Lease(run_id=run_id, owner=owner, token=token + 1, expires_at=now + ttl)
            db.execute(Q["set_lease"], (owner, lease.token, lease.expires_at, now, now, run_id))
            return lease

    def take_slot(self, run_id: str, key: str, limit: int, now: float) -> bool:
        """See `Store.take_slot` (writers take turns, so counting and taking are atomic)."""
        with self._write() as db:
            row = db.execute(Q["slot_claim"], (key, limit, run_id)).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id!r}")
            held, created = row
            if held:
                return True
            args = (key, key, now, created, created, run_id)
            running, ahead = db.execute(Q["slot_count"], args).fetchone()
            if running + ahead >= limit:
                return False
            db.execute(Q["slot_hold"], (run_id,))
            return True

    def take_task_slot(
        self,
        run_id: str,
        task_id: str,
        attempt: int,
        key: str,
        limit: int,
        asked_at: float,
        now: float,
    ) -> bool:
        """See `Store.take_task_slot` (writers take turns: counting and taking are atomic)."""
        with self._write() as db:
            db.execute(Q["task_slot_ask"], (run_id, task_id, attempt, key, asked_at))
            held, asked = db.execute(Q["task_slot_row"], (run_id, task_id)).fetchone()
            if held:
                return True
            args = {"key": key, "now": now, "asked": asked, "run": run_id, "task": task_id}
            running, ahead = db.execute(Q["task_slot_count"], args).fetchone()
            if running + ahead >= limit:
                return False
            db.execute(Q["task_slot_hold"], (run_id, task_id))
            return True

    def keep_task_slots(self, run_id: str, keep: Mapping[str, int]) -> None:
        """See `Store.keep_task_slots`."""
        with self._write() as db:
            for task_id, attempt in db.execute(Q["task_slots_of_run"], (run_id,)).fetchall():
                if keep.get(task_id) != attempt:
                    db.execute(Q["task_slot_drop"], (run_id, task_id))

    def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        """See `Store.renew_lease`."""
        with self._write() as db:
            expires = now + ttl
            args = (expires, now, lease.run_id, lease.owner, lease.token, now)
            if db.execute(Q["renew_lease"], args).rowcount != 1:
                raise LeaseLost(f"run {lease.run_id}: the lease expired or was taken over")
            return Lease(
                run_id=lease.run_id, owner=lease.owner, token=lease.token, expires_at=expires
            )

    def artifact(self, sha256: str) -> bytes | None:
        """See `Store.artifact`."""
        rows = self._read(Q["get_artifact"], sha256)
        return bytes(rows[0][0]) if rows else None

    def renew_leases(
        self, leases: Sequence[Lease], ttl: float, now: float
    ) -> list[Lease | LeaseLost]:
        """See `Store.renew_leases`."""
        renewed: list[Lease | LeaseLost] = []
        with self._write() as db:
            for lease in leases:
                args = (now + ttl, now, lease.run_id, lease.owner, lease.token, now)
                if db.execute(Q["renew_lease"], args).rowcount == 1:
                    renewed.append(replace(lease, expires_at=now + ttl))
                else:
                    renewed.append(
                        LeaseLost(f"run {lease.run_id}: the lease expired or was taken over")
                    )
        return renewed

    def release_leases(self, leases: Sequence[Lease]) -> None:
        """See `Store.release_leases`."""
        with self._write() as db:
            for lease in leases:
                db.execute(Q["release_lease"], (lease.run_id, lease.owner, lease.token))
        self._forget_tails(lease.run_id for lease in leases)

    def release_lease(self, lease: Lease) -> None:
        """See `Store.release_lease`."""
        with self._write() as db:
            db.execute(Q["release_lease"], (lease.run_id, lease.owner, lease.token))
        self._forget_tails([lease.run_id])

    def append(self, batch: AppendBatch, now: float) -> int:
        """See `Store.append`."""
        result = self.append_many([batch], now)[0]
        if isinstance(result, Exception):
            raise result
        return result

    def append_many(
        self, batches: Sequence[AppendBatch], now: float, *, releases: Sequence[Lease] = ()
    ) -> list[int | Exception]:
        """See `Store.append_many`: one transaction, one fsync, for every batch."""
        results: list[int | Exception] = []
        tails: dict[str, _Tail | None] = {}  # None: the run's tail is not known
        with self._lock:
            with self._write() as db:
                for batch in batches:
                    results.append(self._append_one(db, batch, now, tails))
                for lease in releases:
                    db.execute(Q["release_lease"], (lease.run_id, lease.owner, lease.token))
            # Committed: the tails are where these runs now end (a failed commit keeps none).
            for run_id, tail in tails.items():
                if tail is None:
                    self._tails.pop(run_id, None)
                else:
                    self._tails[run_id] = tail
            self._forget_tails(lease.run_id for lease in releases)
        return results

    def _append_one(
        self,
        db: sqlite3.Connection,
        batch: AppendBatch,
        now: float,
        tails: dict[str, _Tail | None],
    ) -> int | Exception:
        lease = batch.lease
        tail: _Tail | None
        if batch.register is not None:
            _register(db, batch, now)
            tail = _Tail(token=lease.token, seq=0, head=None, status="running", cost_usd=0.0)
        elif lease.run_id in tails:  # appended to earlier in this transaction
            tail = tails[lease.run_id]
        else:
            tail = self._tails.get(lease.run_id)
        stamped = [new.stamped() for new in batch.events]
        s, n = batch.summary, len(stamped)
        found = None
        if tail is not None and tail.token == lease.token:
            found = _append_tail(db, batch, now, tail, stamped)
        if found is None:
            parked = int(s.batch_parked)
            listed = (s.status, s.phase, s.cost_usd, s.tokens, s.warnings, s.updated_at)
            summary = (n, *listed, parked, s.estimated)
            fence = (lease.run_id, lease.owner, lease.token, now)
            row = db.execute(Q["fence"], summary + fence).fetchone()
            if row is None:
                tails[lease.run_id] = None
                return LeaseLost(f"run {lease.run_id}: the lease expired or was taken over")
            last = int(row[0])
            rows, head = _event_rows(batch, stamped, last - n, row[1] or chain.GENESIS)
            if rows:
                db.executemany(Q["insert_event"], rows)
                db.execute(Q["set_chain_head"], (head, lease.run_id))
            found = last, (head if rows else row[1])
        last, head_now = found
        for command_id in batch.consumed:
            db.execute(Q["consume_command"], (now, command_id, lease.run_id))
        for sha, body in batch.artifacts:
            db.execute(Q["put_artifact"], (sha, len(body), body, now))
        _put_cache(db, batch.cache)
        tails[lease.run_id] = _Tail(
            token=lease.token, seq=last, head=head_now, status=s.status, cost_usd=s.cost_usd
        )
        return last

    def _forget_tails(self, run_ids: Iterable[str]) -> None:
        for run_id in run_ids:
            self._tails.pop(run_id, None)
        if len(self._tails) > _TAILS_KEPT:  # runs held by leases that were never released
            self._tails.clear()

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> list[StoredEvent]:
        """See `Store.events`."""
        rows = self._read(Q["events_since"], run_id, since, -1 if limit is None else limit)
        return [_event(r) for r in rows]

    def all_events(self, after_id: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """See `Store.all_events`."""
        return [_event(r) for r in self._read(Q["all_events_after"], after_id, limit)]

    def get_run(self, run_id: str) -> RunRecord:
        """See `Store.get_run`."""
        rows = self._read(Q["get_run"], run_id)
        if not rows:
            raise RunNotFound(f"no run {run_id!r} (see 'interlock runs')")
        return run_from_row(rows[0])

    def find_runs(self, prefix: str) -> list[str]:
        """See `Store.find_runs`."""
        return [r[0] for r in self._read(Q["find_runs"], prefix, prefix + "\U0010ffff")]

    def list_runs(
        self, *, status: str | None = None, pipeline: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """See `Store.list_runs`."""
        where, args = [], []
        if status:
            where.append("status = ?")
            args.append(status)
        if pipeline:
            where.append("pipeline = ?")
            args.append(pipeline)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        query = Q["get_run"].replace("WHERE run_id = ?", clause)
        rows = self._read(f"{query} ORDER BY created_at DESC, run_id DESC LIMIT ?", *args, limit)
        return [run_from_row(r) for r in rows]

    def search_runs(self, query: RunQuery) -> list[RunRecord]:
        """See `Store.search_runs`."""
        clause, args = run_list.where(query, "sqlite")
        select = Q["get_run"].replace(" WHERE run_id = ?", "")
        return [run_from_row(r) for r in self._read(f"{select}{clause}", *args)]

    def count_runs(self) -> dict[str, int]:
        """See `Store.count_runs`."""
        return {str(status): int(n) for status, n in self._read(Q["count_runs"])}

    def prunable_runs(
        self, before: float, statuses: Sequence[str], now: float, limit: int
    ) -> list[str]:
        """See `Store.prunable_runs`."""
        found = self._read(Q["prunable_runs"], before, json.dumps(list(statuses)), now, limit)
        return [str(row[0]) for row in found]

    def prune_runs(self, run_ids: Sequence[str], now: float) -> tuple[list[PrunedRun], set[str]]:
        """See `Store.prune_runs`."""
        with self._write() as db:
            rows = db.execute(Q["prune_receipts"], (now, json.dumps(list(run_ids)), now))
            receipts = [receipt_from_row(row) for row in rows]
            gone = json.dumps([r.run_id for r in receipts])
            shas = {str(r[0]) for r in db.execute(Q["prune_artifact_refs"], (gone,)) if r[0]}
            for name in ("events", "commands", "outbox", "cache", "runs"):
                db.execute(Q[f"prune_{name}"], (gone,))
        return receipts, shas

    def drop_artifacts(self, candidates: set[str]) -> int:
        """See `Store.drop_artifacts`."""
        if not candidates:
            return 0
        with self._write() as db:
            return int(db.execute(Q["drop_artifacts"], (json.dumps(sorted(candidates)),)).rowcount)

    def pruned_run(self, run_id: str) -> PrunedRun | None:
        """See `Store.pruned_run`."""
        rows = self._read(Q["pruned_run"], run_id)
        return receipt_from_row(rows[0]) if rows else None

    def post_command(self, run_id: str, kind: str, message: str, by: str, now: float) -> int:
        """See `Store.post_command`."""
        self.get_run(run_id)
        with self._write() as db:
            cursor = db.execute(Q["insert_command"], (run_id, kind, message, by, now))
            return int(cursor.lastrowid or 0)

    def pending_commands(self, run_id: str | None = None) -> list[CommandRecord]:
        """See `Store.pending_commands`."""
        if run_id is None:
            rows = self._read(Q["all_pending_commands"])
        else:
            rows = self._read(Q["pending_commands"], run_id)
        return [
            CommandRecord(id=r[0], run_id=r[1], kind=r[2], message=r[3], by=r[4], created_at=r[5])
            for r in rows
        ]

    def event_cursor(self, name: str) -> int:
        """See `Store.event_cursor`."""
        rows = self._read(Q["get_cursor"], name)
        return int(rows[0][0]) if rows else 0

    def outbox_enqueue(
        self, cursor: str, position: int, items: Sequence[OutboxItem], now: float
    ) -> None:
        """See `Store.outbox_enqueue`."""
        with self._write() as db:
            for item in items:
                payload = codec.dumps(item.payload)
                db.execute(
                    Q["insert_outbox"], (item.key, item.sink, item.run_id, payload, now, now)
                )
            db.execute(Q["set_cursor"], (cursor, position))

    def outbox_claim(
        self, owner: str, now: float, hold: float, limit: int = 20
    ) -> list[OutboxItem]:
        """See `Store.outbox_claim`."""
        claimed = []
        with self._write() as db:
            for row in db.execute(Q["due_outbox"], (now, now, limit)).fetchall():
                if db.execute(Q["claim_outbox"], (owner, now + hold, row[0], now)).rowcount:
                    claimed.append(_outbox(row, attempts=row[5] + 1))
        return claimed

    def outbox_settle(
        self,
        key: str,
        owner: str,
        now: float,
        *,
        error: str | None = None,
        retry_at: float | None = None,
    ) -> None:
        """See `Store.outbox_settle`."""
        delivered = now if error is None else None
        next_at = NEVER if retry_at is None else retry_at
        with self._write() as db:
            db.execute(Q["settle_outbox"], (delivered, error, next_at, key, owner))

    def outbox_items(self, run_id: str) -> list[OutboxItem]:
        """See `Store.outbox_items`."""
        rows = self._read(Q["list_outbox"], run_id)
        return [_outbox(r, attempts=r[5], delivered_at=r[6], last_error=r[7]) for r in rows]

    def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        """See `Store.cache_put`."""
        with self._write() as db:
            _put_cache(db, entries)

    def cache_find(self, fingerprint: str, since: float, limit: int = 5) -> list[CacheEntry]:
        """See `Store.cache_find`."""
        return [_cache(r) for r in self._read(Q["cache_find"], fingerprint, since, limit)]

    def cache_list(self, limit: int = 100) -> list[CacheEntry]:
        """See `Store.cache_list`."""
        return [_cache(r) for r in self._read(Q["cache_list"], limit)]

    def cache_clear(self, before: float | None = None) -> int:
        """See `Store.cache_clear`."""
        with self._write() as db:
            return int(
                db.execute(Q["cache_clear"], (NEVER if before is None else before,)).rowcount
            )

    def integrity_check(self) -> str:
        """SQLite's own consistency check ('ok' when sound)."""
        return str(self._read("PRAGMA integrity_check")[0][0])

    def close(self) -> None:
        """See `Store.close`."""
        with self._lock:
            if self._ahead is not None:
                self._ahead.cancel()
                self._ahead = None
            self._db.close()


@dataclass(frozen=True, kw_only=True, slots=True)
class _Tail:
    """Where a run ends as this store last committed it, under the lease of `token`."""

    token: int
    seq: int
    head: str | None  # the chain head (None: no event chained yet)
    status: str
    cost_usd: float


_TAILS_KEPT = 100_000  # tails remembered at most (each is a hint: forgetting costs a statement)


def _event_rows(
    batch: AppendBatch, stamped: list[tuple[str, str, str]], seq: int, head: str
) -> tuple[list[tuple[Any, ...]], str]:
    """The rows of the batch's events numbered after `seq`, chained after `head`."""
    run_id = batch.lease.run_id
    rows = []
    for new, (kind, data, content) in zip(batch.events, stamped, strict=True):
        seq += 1
        head = chain.link(head, seq, content)
        rows.append((run_id, seq, new.event.at, kind, data, new.rule, new.why, head))
    return rows, head


def _append_tail(
    db: sqlite3.Connection,
    batch: AppendBatch,
    now: float,
    tail: _Tail,
    stamped: list[tuple[str, str, str]],
) -> tuple[int, str | None] | None:
    """Append after the run's remembered tail: (new last seq, chain head), or None when the
    row does not end there (or the lease does not hold), with nothing changed."""
    lease, s = batch.lease, batch.summary
    rows, head = _event_rows(batch, stamped, tail.seq, tail.head or chain.GENESIS)
    last = tail.seq + len(rows)
    new_head = head if rows else tail.head
    fence = (lease.run_id, lease.owner, lease.token, now, tail.seq, tail.head)
    if s.status == tail.status and s.cost_usd == tail.cost_usd:
        parked = int(s.batch_parked)
        same = (last, s.phase, s.tokens, s.warnings, s.updated_at, parked, s.estimated, new_head)
        changed = db.execute(Q["fence_tail_same"], (*same, *fence, s.status, s.cost_usd))
    else:
        values = (last, s.status, s.phase, s.cost_usd, s.tokens, s.warnings, s.updated_at)
        parked = int(s.batch_parked)
        changed = db.execute(Q["fence_tail"], (*values, parked, s.estimated, new_head, *fence))
    if changed.rowcount != 1:
        return None
    if rows:
        db.executemany(Q["insert_event"], rows)
    return last, new_head


def _register(db: sqlite3.Connection, batch: AppendBatch, now: float) -> None:
    """Record a new run (and its definition) holding the batch's lease."""
    reg = batch.register
    assert reg is not None
    db.execute(Q["insert_definition"], (reg.definition_hash, reg.definition))
    db.execute(Q["insert_run_leased"], registration_row(batch, now))


def _cache(row: Any) -> CacheEntry:
    return CacheEntry(
        fingerprint=row[0],
        run_id=row[1],
        task_id=row[2],
        artifact=row[3],
        sha256=row[4],
        size=int(row[5]),
        values=codec.loads(row[6]),
        completed_at=float(row[7]),
    )


def _event(row: Any) -> StoredEvent:
    try:
        data = codec.loads(row[5])
    except (ValueError, TypeError) as exc:  # text a damaged page or a hand edit left
        raise damaged_history(
            str(row[1]), row[2], str(row[4]), f"its data is not JSON ({exc})"
        ) from None
    return event_from_row(row, data)


def _outbox(row: Any, **extra: Any) -> OutboxItem:
    return outbox_from_row(row, codec.loads(row[3]), **extra)


def lost_ledger(path: Path, state_dir: Path) -> str:
    """What every command says of a ledger file that is gone from beside the runs it held."""
    return (
        f"no ledger at {path}, but {state_dir} holds run folders (runs/ or archive/): the "
        "ledger was moved or deleted (or the folders are another store's, such as a "
        "PostgreSQL --store given this state directory), and is not taken as a new, empty "
        "one. Put a copy of it back (`interlock doctor` says what the state directory "
        "holds); to start afresh, move runs/ and archive/ away or use another --home"
    )


def ledger_lost(path: Path, state_dir: Path) -> bool:
    """Whether the ledger file is gone from beside the runs it held. A process creating its
    first run makes the ledger before any run folder: a folder seen before the file
    appeared (between the two looks) is that run's, so the file is looked for again after."""
    return not path.exists() and holds_runs(state_dir) and not path.exists()


def holds_runs(state_dir: Path) -> bool:
    """Whether a state directory holds run directories (live or archived)."""
    for name in ("runs", "archive"):
        try:
            with os.scandir(state_dir / name) as entries:
                if any(entry.is_dir() and not entry.name.startswith(".") for entry in entries):
                    return True
        except OSError:
            continue
    return False


def no_space(folder: Path) -> bool:
    """Whether the file system holding `folder` has (next to) no space left for us."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < 64 * 1024 or stats.f_favail == 0


# Up to this size the check before the first write is the full `integrity_check`, which also
# finds an index that no longer matches its table (a flipped bit `quick_check` passes):
# measured with the file in the page cache, 0.69 s for 64 MB (12,000 runs, 180,000 events),
# against 0.30 s for `quick_check`; 3.4 s against 1.1 s for 320 MB. Past it, `quick_check`
# keeps a large ledger's first write quick, and `interlock doctor` runs the full check.
FULL_CHECK_BYTES = 64 * 1024 * 1024


def ledger_check(db: sqlite3.Connection, path: Path) -> list[str]:
    """SQLite's check of `db` before the first write: `integrity_check` for a ledger up to
    `FULL_CHECK_BYTES`, `quick_check` past it; ["ok"], or up to five problems (or the
    error that stopped it)."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    pragma = "integrity_check" if size <= FULL_CHECK_BYTES else "quick_check"
    try:
        return [str(r[0]) for r in db.execute(f"PRAGMA {pragma}(5)").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]


class _CheckAhead:
    """`ledger_check` of a ledger on a thread and a read-only connection of their own.

    A process that exits (or closes the store) without asking for the answer interrupts the
    check and waits for the thread, so that nothing is left reading the file.
    """

    def __init__(self, path: Path) -> None:
        self._rows = ["the check was cancelled"]
        self._path = path
        uri = path.resolve().as_uri() + "?mode=ro"
        self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._thread = threading.Thread(target=self._run, name="interlock-check", daemon=True)
        self._thread.start()
        atexit.register(self.cancel)

    def _run(self) -> None:
        self._rows = ledger_check(self._db, self._path)

    def answer(self) -> list[str]:
        """The check's rows, once it has finished."""
        self._thread.join()
        self._close()
        return self._rows

    def cancel(self) -> None:
        """Stop the check (its answer is no longer wanted)."""
        self._db.interrupt()
        self._thread.join()
        self._close()

    def _close(self) -> None:
        atexit.unregister(self.cancel)
        self._db.close()


def _put_cache(db: sqlite3.Connection, entries: Sequence[CacheEntry]) -> None:
    """Index cache entries (an entry already there is kept)."""
    for e in entries:
        row = (e.fingerprint, e.run_id, e.task_id, e.artifact, e.sha256, e.size)
        db.execute(Q["cache_put"], (*row, codec.dumps(e.values), e.completed_at))
