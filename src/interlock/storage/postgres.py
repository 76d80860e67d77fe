"""The shared ledger: PostgreSQL, for many orchestrators and workers on many machines.

Writes run in READ COMMITTED transactions that lock what they check (`SELECT ... FOR UPDATE`),
so the lease fence and the append it guards are one atomic step. Appends also take one
transaction-level advisory lock: event ids are then handed out in commit order, which is what
lets a live feed read `id > last seen` without ever skipping a late-committing event. Group
commit keeps that serialisation cheap (one transaction carries every run of a tick).

Every append sends `NOTIFY interlock_events, '<run id>'` (delivered at commit), so other
processes can wake at once instead of polling hard; a lease handed back by `release_lease`
(a run submitted for the fleet, or let go) sends `NOTIFY interlock_runs, '<run id>'`, which
is what fleet orchestrators wait for to take runs.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg_pool import ConnectionPool

from interlock.errors import (
    LeaseHeld,
    LeaseLost,
    RunNotFound,
    StorageError,
    StorageUnavailable,
)
from interlock.storage import codec, run_list
from interlock.storage.base import (
    AppendBatch,
    CacheEntry,
    CommandRecord,
    Lease,
    OutboxItem,
    PrunedRun,
    RunRecord,
    StoredEvent,
    receipt_from_row,
)
from interlock.storage.outage import Outage
from interlock.storage.queries import migrations, queries
from interlock.storage.rows import event_from_row, outbox_from_row, registration_row, run_from_row
from interlock.storage.run_list import RunQuery

log = logging.getLogger("interlock.storage")
Q = queries("postgres")
MIGRATION_LOCK = 4849675  # advisory lock key held while the schema is brought up to date
CHECK_AFTER_IDLE = 1.0  # seconds a pooled connection may rest before it is pinged again
STALLED_TRANSACTION = 5.0  # seconds a transaction of ours may sit idle before the server ends it
RECONNECT_FOR = 4.0  # seconds the pool tries to reconnect before starting over (see `__init__`)
NEVER = 1e300  # `next_at` of a notification given up on: never due again
STARTING_UP = "57P03"  # cannot_connect_now: the server is starting up or shutting down
T = TypeVar("T")


class PostgresStore:
    """A `Store` on a PostgreSQL database (thread-safe: a pool of connections)."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        retries: int = 3,
        stalled_transaction: float = STALLED_TRANSACTION,
    ) -> None:
        self.url = url
        self._retries = retries
        self._stalled_ms = max(1, int(stalled_transaction * 1000))
        self._used = {}
        self._where = _redact(url)
        # Shared with this process's listeners on the same database (`where`).
        self.outage = Outage.of(outage_name(url), log)
        self._probe(connect_timeout)
        self.pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            timeout=connect_timeout,
            # A connection killed by the server (restart, pg_terminate_backend) is found
            # and replaced before it is handed out, not in the middle of a transaction.
            check=self._check,
            configure=self._configure,
            kwargs={"autocommit": False, "connect_timeout": int(connect_timeout)},
            # The pool doubles its wait between attempts to reconnect (1, 2, 4 ... 64 s) for
            # `reconnect_timeout`: after an outage of a minute it could wait another minute
            # before noticing that the server is back. Given up after a few seconds, the
            # attempt starts over, from a short wait, as soon as a statement asks again.
            reconnect_timeout=RECONNECT_FOR,
            name="interlock-ledger",
            open=True,
        )
        try:
            self.pool.wait(timeout=connect_timeout)
            self._migrate()
        except StorageError:
            self.close()
            raise
        except Exception as exc:  # bad URL, server down, auth: one message naming the place
            with contextlib.suppress(Exception):
                self.close()
            raise StorageError(f"{self._where}: cannot open the ledger: {exc}") from None

    def _probe(self, timeout: float) -> None:
        """One connection before the pool's: a server that is down, a database that does not
        exist or a refused login is then said at once, in the server's words, instead of
        after the pool's timeout with a warning per try. A server that says it is starting
        up (or shutting down), and a host name the resolver cannot look up *for now* (a
        container network's DNS while its containers start), are given until `timeout`, as
        the pool would."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=max(1, int(timeout))).close()
                return
            except psycopg.Error as exc:
                passing = exc.sqlstate == STARTING_UP or _lookup_fails_for_now(self.url, exc)
                if passing and time.monotonic() < deadline:
                    time.sleep(0.25)
                    continue
                said = " ".join(str(exc).split())
                raise StorageError(
                    f"{self._where}: cannot open the ledger: {said} (check the URL given "
                    "with --store or INTERLOCK_STORE, and that PostgreSQL runs there)"
                ) from None

    # -- plumbing ---------------------------------------------------------------------------

    _used: dict[int, float]  # id of a pooled connection -> when it was last handed back

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection, noting when it goes back (see `_check`). Not the pool's
        `reset` hook: that hands every returned connection to a pool thread."""
        with self.pool.connection() as db:
            try:
                yield db
            finally:
                self._used[id(db)] = time.monotonic()

    def _configure(self, db: psycopg.Connection[Any]) -> None:
        """A new connection: a transaction of ours left open by a frozen process (SIGSTOP, a
        VM pause) is ended by the server after `stalled_transaction` seconds, so the row and
        advisory locks it holds cannot stall every other orchestrator until it wakes. No JIT
        compilation: the ledger's statements are short, and one whose estimate passed the
        server's threshold (the look for runs to take, over a history of 100,000 runs) spent
        a quarter of a second compiling itself on every execution. JSON goes through the
        ledger's codec (`interlock.storage.codec`) both ways."""
        db.execute(f"SET idle_in_transaction_session_timeout = {self._stalled_ms}")
        db.execute("SET jit = off")
        db.commit()
        set_json_loads(codec.loads, db)
        set_json_dumps(codec.dumps, db)

    def _recover(self, attempt: int) -> None:
        """Before trying again after a lost connection: drop every pooled connection that is
        broken too (a restarted server broke them all at once), then back off."""
        with contextlib.suppress(Exception):
            self.pool.check()
        time.sleep(min(2.0, 0.1 * 2**attempt))

    def _check(self, db: psycopg.Connection[Any]) -> None:
        """Ping a connection before handing it out, unless it was in use a moment ago: a
        busy orchestrator then pays no extra round trip per transaction, and one that was
        idle (when a server restart is likeliest to have gone unnoticed) still checks."""
        if db.broken or db.closed:
            raise psycopg.OperationalError("the connection is closed")
        if time.monotonic() - self._used.get(id(db), 0.0) > CHECK_AFTER_IDLE:
            ConnectionPool.check_connection(db)

    def _migrate(self) -> None:
        with self._connection() as db, db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            db.execute(
                "CREATE TABLE IF NOT EXISTS interlock_schema "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            row = db.execute("SELECT coalesce(max(version), 0) FROM interlock_schema").fetchone()
            current = int(row[0]) if row else 0
            scripts = migrations("postgres")
            newest = scripts[-1][0] if scripts else 0
            if current > newest:
                raise StorageError(
                    f"{self._where}: ledger schema version {current} is newer than this "
                    f"interlock supports ({newest}); upgrade interlock"
                )
            for version, script in scripts:
                if version > current:
                    db.execute(script.encode())
                    db.execute("INSERT INTO interlock_schema (version) VALUES (%s)", (version,))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on a pooled connection (committed on success)."""
        try:
            with self._connection() as db, db.transaction():
                yield db
        except psycopg.Error as exc:
            raise StorageError(f"{self._where}: ledger error: {exc}") from None

    def retrying(self, action: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run an idempotent `action` in a transaction, again on a fresh connection if the
        connection broke (server restart, terminated backend, network blip)."""
        for attempt in range(self._retries + 1):
            began = time.monotonic()
            try:
                with self._connection() as db, db.transaction():
                    result = action(db)
                self.outage.answered(began)
                return result
            except psycopg.OperationalError as exc:
                self.outage.failed(exc)
                if attempt == self._retries:
                    raise StorageUnavailable(f"{self._where}: ledger unreachable: {exc}") from None
                self._recover(attempt)
            except psycopg.Error as exc:
                raise StorageError(f"{self._where}: ledger error: {exc}") from None
        raise AssertionError("unreachable")

    def single(self, action: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Like `retrying`, for an `action` that runs one statement: in autocommit mode, so
        it costs one round trip instead of three (BEGIN, the statement, COMMIT)."""
        for attempt in range(self._retries + 1):
            began = time.monotonic()
            try:
                with self._connection() as db:
                    db.autocommit = True
                    try:
                        result = action(db)
                    finally:
                        db.autocommit = False
                self.outage.answered(began)
                return result
            except psycopg.OperationalError as exc:
                self.outage.failed(exc)
                if attempt == self._retries:
                    raise StorageUnavailable(f"{self._where}: ledger unreachable: {exc}") from None
                self._recover(attempt)
            except psycopg.Error as exc:
                raise StorageError(f"{self._where}: ledger error: {exc}") from None
        raise AssertionError("unreachable")

    def _read(self, query: str, *args: Any) -> list[Any]:
        return self.single(lambda db: db.execute(query, args).fetchall())

    # -- the Store protocol -----------------------------------------------------------------

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
        with self.transaction() as db:
            db.execute(Q["insert_definition"], (definition_hash, definition))
            db.execute(
                Q["insert_run"],
                (run_id, pipeline, topic, definition_hash, source, created_at, created_at),
            )

    def definition(self, definition_hash: str) -> str:
        """See `Store.definition`."""
        rows = self._read(Q["get_definition"], definition_hash)
        if not rows:
            raise StorageError(f"{self._where}: definition {definition_hash[:12]} is missing")
        return str(rows[0][0])

    def acquire_lease(
        self, run_id: str, owner: str, ttl: float, now: float, *, take_over_from: str | None = None
    ) -> Lease:
        """See `Store.acquire_lease`. Safe to retry: a repeat by the same owner re-takes it."""

        def acquire(db: psycopg.Connection[Any]) -> Lease:
            row = db.execute(Q["lock_lease"], (run_id,)).fetchone()
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

        return self.retrying(acquire)

    def take_leases(
        self, run_ids: Sequence[str], owner: str, ttl: float, now: float
    ) -> list[tuple[Lease, RunRecord, list[StoredEvent]]]:
        """The leases of those of `run_ids` that are free, expired or already `owner`'s,
        with each taken run's record and history: one transaction of two statements for all
        of them, where `acquire_lease`, `get_run` and `events` cost a run five round trips.
        A run whose lease another owner holds, or whose row another transaction holds, is
        left out. The caller passes no run it is driving: its lease would be taken again."""
        if not run_ids:
            return []
        args = {"runs": list(run_ids), "owner": owner, "now": now, "expires": now + ttl}

        def take(db: psycopg.Connection[Any]) -> list[Any]:
            rows = db.execute(Q["take_leases"], args).fetchall()
            if not rows:
                return []
            taken = [row[0] for row in rows]
            return [rows, db.execute(Q["events_of_runs"], (taken,)).fetchall()]

        found = self.retrying(take)
        if not found:
            return []
        rows, event_rows = found
        histories: dict[str, list[StoredEvent]] = {row[0]: [] for row in rows}
        for event_row in event_rows:
            histories[event_row[1]].append(_event(event_row))
        expires = now + ttl
        return [
            (
                Lease(run_id=row[0], owner=owner, token=int(row[19]), expires_at=expires),
                run_from_row(row),
                histories[row[0]],
            )
            for row in sorted(rows, key=lambda row: row[0])
        ]

    def take_slot(self, run_id: str, key: str, limit: int, now: float) -> bool:
        """See `Store.take_slot`: orchestrators taking slots of one key queue on a lock of
        the key, so two never both see the last free slot."""

        def take(db: psycopg.Connection[Any]) -> bool:
            db.execute(Q["slot_lock"], (key,))
            row = db.execute(Q["slot_claim"], (key, limit, run_id)).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id!r}")
            held, created = row
            if held:
                return True
            args = {"key": key, "now": now, "created": created, "run": run_id}
            counted = db.execute(Q["slot_count"], args).fetchone()
            assert counted is not None
            if counted[0] + counted[1] >= limit:
                return False
            db.execute(Q["slot_hold"], (run_id,))
            return True

        return self.retrying(take)

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
        """See `Store.take_task_slot`: orchestrators taking slots of one key queue on a lock
        of the key, so two never both see the last free slot."""

        def take(db: psycopg.Connection[Any]) -> bool:
            db.execute(Q["slot_lock"], (f"task\x1f{key}",))
            db.execute(Q["task_slot_ask"], (run_id, task_id, attempt, key, asked_at))
            row = db.execute(Q["task_slot_row"], (run_id, task_id)).fetchone()
            assert row is not None
            held, asked = row
            if held:
                return True
            args = {"key": key, "now": now, "asked": asked, "run": run_id, "task": task_id}
            counted = db.execute(Q["task_slot_count"], args).fetchone()
            assert counted is not None
            if counted[0] + counted[1] >= limit:
                return False
            db.execute(Q["task_slot_hold"], (run_id, task_id))
            return True

        return self.retrying(take)

    def keep_task_slots(self, run_id: str, keep: Mapping[str, int]) -> None:
        """See `Store.keep_task_slots`."""

        def prune(db: psycopg.Connection[Any]) -> None:
            for task_id, attempt in db.execute(Q["task_slots_of_run"], (run_id,)).fetchall():
                if keep.get(task_id) != attempt:
                    db.execute(Q["task_slot_drop"], (run_id, task_id))

        self.retrying(prune)

    def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        """See `Store.renew_lease`."""
        expires = now + ttl
        args = (expires, now, lease.run_id, lease.owner, lease.token, now)
        if self.retrying(lambda db: db.execute(Q["renew_lease"], args).rowcount) != 1:
            raise LeaseLost(f"run {lease.run_id}: the lease expired or was taken over")
        return Lease(run_id=lease.run_id, owner=lease.owner, token=lease.token, expires_at=expires)

    def artifact(self, sha256: str) -> bytes | None:
        """See `Store.artifact`."""
        rows = self._read(Q["get_artifact"], sha256)
        return bytes(rows[0][0]) if rows else None

    def renew_leases(
        self, leases: Sequence[Lease], ttl: float, now: float
    ) -> list[Lease | LeaseLost]:
        """See `Store.renew_leases`."""

        def renew(db: psycopg.Connection[Any]) -> list[Lease | LeaseLost]:
            renewed: dict[int, Lease | LeaseLost] = {}
            for index in _in_row_order(leases):
                lease = leases[index]
                args = (now + ttl, now, lease.run_id, lease.owner, lease.token, now)
                if db.execute(Q["renew_lease"], args).rowcount == 1:
                    renewed[index] = replace(lease, expires_at=now + ttl)
                else:
                    lost = f"run {lease.run_id}: the lease expired or was taken over"
                    renewed[index] = LeaseLost(lost)
            return [renewed[index] for index in range(len(leases))]

        return self.retrying(renew)

    def release_leases(self, leases: Sequence[Lease]) -> None:
        """See `Store.release_leases`."""

        def release(db: psycopg.Connection[Any]) -> None:
            for index in _in_row_order(leases):
                lease = leases[index]
                db.execute(Q["release_lease"], (lease.run_id, lease.owner, lease.token))

        self.retrying(release)

    def release_lease(self, lease: Lease) -> None:
        """See `Store.release_lease`."""
        args = (lease.run_id, lease.owner, lease.token)
        self.retrying(lambda db: db.execute(Q["release_live_lease"], args))

    def append(self, batch: AppendBatch, now: float) -> int:
        """See `Store.append`."""
        result = self.append_many([batch], now)[0]
        if isinstance(result, Exception):
            raise result
        return result

    def append_many(
        self, batches: Sequence[AppendBatch], now: float, *, releases: Sequence[Lease] = ()
    ) -> list[int | Exception]:
        """See `Store.append_many`. Never retried here: after a broken commit the caller
        cannot know whether it landed, and re-reads the history instead."""
        results: list[int | Exception] = []
        cursors = []
        try:
            # BEGIN, every statement and COMMIT are sent at once: one wait for the lot.
            with self._connection() as db, db.pipeline(), db.transaction():
                db.execute(Q["commit_order"])
                for index in _in_row_order([batch.lease for batch in batches]):
                    batch = batches[index]
                    if batch.register is not None:
                        _register(db, batch, now)
                    cursors.append((index, db.execute(Q["append_run"], _append_args(batch, now))))
                for index in _in_row_order(releases):
                    lease = releases[index]
                    db.execute(Q["release_lease"], (lease.run_id, lease.owner, lease.token))
        except psycopg.Error as exc:
            raise StorageError(f"{self._where}: ledger error: {exc}") from None
        for batch, (_, cursor) in zip(batches, sorted(cursors, key=lambda c: c[0]), strict=True):
            row = cursor.fetchone()
            if row is None:
                run_id = batch.lease.run_id
                results.append(LeaseLost(f"run {run_id}: the lease expired or was taken over"))
            else:
                results.append(int(row[0]))
        return results

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> list[StoredEvent]:
        """See `Store.events`."""
        return [_event(r) for r in self._read(Q["events_since"], run_id, since, limit)]

    def all_events(self, after_id: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """See `Store.all_events`."""
        return [_event(r) for r in self._read(Q["all_events_after"], after_id, limit)]

    def get_run(self, run_id: str) -> RunRecord:
        """See `Store.get_run`."""
        rows = self._read(Q["select_runs"] + " WHERE run_id = %s", run_id)
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
            where.append("status = %s")
            args.append(status)
        if pipeline:
            where.append("pipeline = %s")
            args.append(pipeline)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        query = f"{Q['select_runs']}{clause} ORDER BY created_at DESC, run_id DESC LIMIT %s"
        return [run_from_row(r) for r in self._read(query, *args, limit)]

    def search_runs(self, query: RunQuery) -> list[RunRecord]:
        """See `Store.search_runs`."""
        clause, args = run_list.where(query, "postgres")
        return [run_from_row(r) for r in self._read(f"{Q['select_runs']}{clause}", *args)]

    def count_runs(self) -> dict[str, int]:
        """See `Store.count_runs`."""
        return {str(status): int(n) for status, n in self._read(Q["count_runs"])}

    def prunable_runs(
        self, before: float, statuses: Sequence[str], now: float, limit: int
    ) -> list[str]:
        """See `Store.prunable_runs`."""
        args = {"before": before, "statuses": list(statuses), "now": now, "limit": limit}
        rows = self.single(lambda db: db.execute(Q["prunable_runs"], args).fetchall())
        return [str(row[0]) for row in rows]

    def prune_runs(self, run_ids: Sequence[str], now: float) -> tuple[list[PrunedRun], set[str]]:
        """See `Store.prune_runs`."""

        def prune(db: psycopg.Connection[Any]) -> tuple[list[PrunedRun], set[str]]:
            rows = db.execute(Q["prune_receipts"], {"runs": list(run_ids), "now": now})
            receipts = [receipt_from_row(row) for row in rows.fetchall()]
            gone = {"runs": [r.run_id for r in receipts]}
            found = db.execute(Q["prune_artifact_refs"], gone).fetchall()
            for statement in Q["prune_rows"].split(";\n"):
                db.execute(statement, gone)
            return receipts, {str(r[0]) for r in found if r[0]}

        return self.retrying(prune)

    def drop_artifacts(self, candidates: set[str]) -> int:
        """See `Store.drop_artifacts`."""
        if not candidates:
            return 0
        with self.transaction() as db:
            return int(db.execute(Q["drop_artifacts"], {"shas": sorted(candidates)}).rowcount)

    def pruned_run(self, run_id: str) -> PrunedRun | None:
        """See `Store.pruned_run`."""
        rows = self._read(Q["pruned_run"], run_id)
        return receipt_from_row(rows[0]) if rows else None

    def post_command(self, run_id: str, kind: str, message: str, by: str, now: float) -> int:
        """See `Store.post_command`."""
        self.get_run(run_id)
        with self.transaction() as db:
            row = db.execute(Q["insert_command"], (run_id, kind, message, by, now)).fetchone()
            return int(row[0]) if row else 0

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
        """See `Store.outbox_enqueue` (safe to retry: keys and the cursor are idempotent)."""

        def enqueue(db: psycopg.Connection[Any]) -> None:
            for item in items:
                payload = codec.dumps(item.payload)
                db.execute(
                    Q["insert_outbox"], (item.key, item.sink, item.run_id, payload, now, now)
                )
            db.execute(Q["set_cursor"], (cursor, position))

        self.retrying(enqueue)

    def outbox_claim(
        self, owner: str, now: float, hold: float, limit: int = 20
    ) -> list[OutboxItem]:
        """See `Store.outbox_claim`: senders skip each other's rows instead of waiting."""
        args = (owner, now + hold, now, now, limit)
        with self.transaction() as db:
            rows = db.execute(Q["claim_outbox"], args).fetchall()
        rows.sort(key=lambda r: (r[4], r[0]))
        return [_outbox(r, attempts=r[5]) for r in rows]

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
        args = (delivered, error, next_at, key, owner)
        self.retrying(lambda db: db.execute(Q["settle_outbox"], args))

    def outbox_items(self, run_id: str) -> list[OutboxItem]:
        """See `Store.outbox_items`."""
        rows = self._read(Q["list_outbox"], run_id)
        return [_outbox(r, attempts=r[5], delivered_at=r[6], last_error=r[7]) for r in rows]

    def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        """See `Store.cache_put`."""

        def put(db: psycopg.Connection[Any]) -> None:
            for e in entries:
                row = (e.fingerprint, e.run_id, e.task_id, e.artifact, e.sha256, e.size)
                db.execute(Q["cache_put"], (*row, codec.dumps(e.values), e.completed_at))

        self.retrying(put)

    def cache_find(self, fingerprint: str, since: float, limit: int = 5) -> list[CacheEntry]:
        """See `Store.cache_find`."""
        return [_cache(r) for r in self._read(Q["cache_find"], fingerprint, since, limit)]

    def cache_list(self, limit: int = 100) -> list[CacheEntry]:
        """See `Store.cache_list`."""
        return [_cache(r) for r in self._read(Q["cache_list"], limit)]

    def cache_clear(self, before: float | None = None) -> int:
        """See `Store.cache_clear`."""
        cutoff = NEVER if before is None else before
        return self.retrying(lambda db: int(db.execute(Q["cache_clear"], (cutoff,)).rowcount))

    # -- beyond the protocol: what a fleet of orchestrators needs ---------------------------

    def unowned_runs(self, now: float, limit: int = 10) -> list[str]:
        """Live runs (running, waiting or paused) nobody holds a valid lease on: round-robin
        between concurrency keys (each key's oldest first), and at random within a turn, so
        that orchestrators looking at once spread over different runs."""
        return [r[0] for r in self._read(Q["unowned_runs"], now, limit)]

    def close(self) -> None:
        """See `Store.close`."""
        self.pool.close()


def _in_row_order(leases: Sequence[Lease]) -> list[int]:
    """Indexes of `leases` by run id. Transactions that lock several runs' rows (appends,
    renewals, releases) lock them in this one order, so that two of them never wait for
    each other in a cycle (PostgreSQL would end one as a deadlock)."""
    return sorted(range(len(leases)), key=lambda index: leases[index].run_id)


def outage_name(url: str) -> str:
    """How outage messages name the database at `url` (without its password)."""
    return f"PostgreSQL at {_redact(url)}"


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        credentials, _, host = rest.rpartition("@")
        rest = f"{credentials.partition(':')[0]}@{host}"
    return f"{scheme}{sep}{rest}"


def _event(row: Any) -> StoredEvent:
    return event_from_row(row, row[5])


def _outbox(row: Any, **extra: Any) -> OutboxItem:
    return outbox_from_row(row, row[3], **extra)


def _register(db: psycopg.Connection[Any], batch: AppendBatch, now: float) -> None:
    """Record a new run (and its definition) holding the batch's lease."""
    reg = batch.register
    assert reg is not None
    db.execute(Q["insert_definition"], (reg.definition_hash, reg.definition))
    db.execute(Q["insert_run_leased"], registration_row(batch, now))


def _append_args(batch: AppendBatch, now: float) -> dict[str, Any]:
    """The parameters of `append_run` for one run's batch."""
    lease, summary = batch.lease, batch.summary
    events = [
        {"at": n.event.at, "kind": kind, "data": data, "rule": n.rule, "why": n.why, "digest": d}
        for n in batch.events
        for kind, data, d in (n.stamped(),)
    ]
    return {
        "run": lease.run_id,
        "owner": lease.owner,
        "token": lease.token,
        "now": now,
        "n": len(batch.events),
        "status": summary.status,
        "phase": summary.phase,
        "cost": summary.cost_usd,
        "tokens": summary.tokens,
        "warnings": summary.warnings,
        "updated": summary.updated_at,
        "parked": summary.batch_parked,
        "estimated": summary.estimated,
        "events": codec.dumps(events),
        "consumed": list(batch.consumed),
        "shas": [sha for sha, _ in batch.artifacts],
        "bodies": [bytes(body) for _, body in batch.artifacts],
        "cache": codec.dumps([_cache_row(e) for e in batch.cache]),
    }


def _cache_row(entry: CacheEntry) -> dict[str, Any]:
    """One cache entry as `append_run` reads it."""
    return {
        "fingerprint": entry.fingerprint,
        "task_id": entry.task_id,
        "artifact": entry.artifact,
        "sha256": entry.sha256,
        "size": entry.size,
        "value_json": codec.dumps(entry.values),
        "completed_at": entry.completed_at,
    }


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


def _lookup_fails_for_now(url: str, exc: psycopg.Error) -> bool:
    """Whether `exc` is a host name lookup that failed with "try again" (EAI_AGAIN), not
    with "no such name": psycopg keeps only the resolver's words, so the lookup is asked
    again here, and only when psycopg said it could not resolve a host."""
    if "failed to resolve host" not in str(exc):
        return False
    try:
        hosts = conninfo_to_dict(url).get("host") or ""
    except psycopg.Error:
        return False
    for host in str(hosts).split(","):
        if not host or host.startswith("/"):
            continue
        try:
            socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except socket.gaierror as lookup:
            if lookup.errno == socket.EAI_AGAIN:
                return True
        except OSError:
            continue
    return False
