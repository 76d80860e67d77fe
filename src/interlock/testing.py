"""Test support: an in-memory `Store` that keeps every guarantee of the real ones.

Use it to test code above storage quickly; it passes the same conformance suite as the SQLite
and PostgreSQL backends.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from interlock.core.subpipelines import CHILD_ID
from interlock.errors import LeaseHeld, LeaseLost, RunNotFound, StorageError
from interlock.storage import chain
from interlock.storage.base import (
    ENDED_STATUSES,
    AppendBatch,
    CacheEntry,
    CommandRecord,
    Lease,
    OutboxItem,
    PrunedRun,
    RunRecord,
    RunSummary,
    StoredEvent,
)
from interlock.storage.run_list import RunQuery

__all__ = ["MemoryStore"]


def _cache_order(entry: CacheEntry) -> tuple[float, str, str]:
    return (-entry.completed_at, entry.run_id, entry.task_id)


class MemoryStore:
    """A `Store` held in memory (lost with the process)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._definitions: dict[str, str] = {}
        self._cache: dict[tuple[str, str, str], CacheEntry] = {}
        self._runs: dict[str, RunRecord] = {}
        self._leases: dict[str, tuple[str | None, int, float | None]] = {}
        self._lease_times: dict[str, tuple[float, float]] = {}
        self._artifacts: dict[str, bytes] = {}
        self._heads: dict[str, str] = {}  # run -> its newest chain link
        self._events: list[StoredEvent] = []
        self._by_run: dict[str, list[StoredEvent]] = {}
        self._commands: list[tuple[CommandRecord, float | None]] = []
        self._cursors: dict[str, int] = {}
        # key -> (item, next_at, claimed_by, claimed_until)
        self._outbox: dict[str, tuple[OutboxItem, float, str | None, float]] = {}
        self._slots: dict[str, tuple[str, bool]] = {}  # run -> (concurrency key, holds one)
        # (run, task) -> (attempt, task concurrency key, asked at, holds one)
        self._task_slots: dict[tuple[str, str], tuple[int, str, float, bool]] = {}
        self._pruned: dict[str, PrunedRun] = {}

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
        with self._lock:
            if run_id in self._runs:
                raise StorageError(f"run {run_id} already exists")
            self._definitions.setdefault(definition_hash, definition)
            summary = RunSummary(status="running", phase=None, updated_at=created_at)
            self._runs[run_id] = RunRecord(
                run_id=run_id,
                pipeline=pipeline,
                topic=topic,
                definition_hash=definition_hash,
                created_at=created_at,
                last_seq=0,
                summary=summary,
                source=source,
            )
            self._leases[run_id] = (None, 0, None)
            self._by_run[run_id] = []

    def definition(self, definition_hash: str) -> str:
        """See `Store.definition`."""
        try:
            return self._definitions[definition_hash]
        except KeyError:
            raise StorageError(f"definition {definition_hash[:12]} is missing") from None

    def acquire_lease(
        self, run_id: str, owner: str, ttl: float, now: float, *, take_over_from: str | None = None
    ) -> Lease:
        """See `Store.acquire_lease`."""
        with self._lock:
            if run_id not in self._leases:
                raise RunNotFound(f"no run {run_id!r}")
            holder, token, expires = self._leases[run_id]
            free = holder is None or expires is None or expires <= now
            if not (free or holder in (owner, take_over_from)):
                raise LeaseHeld(f"run {run_id} is being driven by {holder}")
            lease = Lease(run_id=run_id, owner=owner, token=token + 1, expires_at=now + ttl)
            self._leases[run_id] = (owner, lease.token, lease.expires_at)
            self._lease_times[run_id] = (now, now)
            return lease

    def take_slot(self, run_id: str, key: str, limit: int, now: float) -> bool:
        """See `Store.take_slot`."""
        with self._lock:
            if run_id not in self._runs:
                raise RunNotFound(f"no run {run_id!r}")
            held = self._slots.get(run_id, (key, False))[1]
            self._slots[run_id] = (key, held)
            if held:
                return True
            mine = (self._runs[run_id].created_at, run_id)
            running = ahead = 0
            for other, (other_key, held) in self._slots.items():
                record = self._runs[other]
                live = record.summary.status in ("running", "waiting", "paused")
                if other_key != key or not live:
                    continue
                if held:
                    running += 1
                elif (record.created_at, other) < mine and (self._leases[other][2] or 0) > now:
                    ahead += 1
            if running + ahead >= limit:
                return False
            self._slots[run_id] = (key, True)
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
        """See `Store.take_task_slot`."""
        with self._lock:
            row = self._task_slots.get((run_id, task_id))
            if row is None or row[0] != attempt or row[1] != key:
                row = (attempt, key, asked_at, False)
                self._task_slots[(run_id, task_id)] = row
            if row[3]:
                return True
            mine = (row[2], run_id, task_id)
            running = ahead = 0
            for (other, task), (_, other_key, asked, held) in self._task_slots.items():
                record = self._runs.get(other)
                if other_key != key or record is None:
                    continue
                if record.summary.status not in ("running", "waiting", "paused"):
                    continue
                if held:
                    running += 1
                elif (asked, other, task) < mine and (self._leases[other][2] or 0) > now:
                    ahead += 1
            if running + ahead >= limit:
                return False
            self._task_slots[(run_id, task_id)] = (*row[:3], True)
            return True

    def keep_task_slots(self, run_id: str, keep: Mapping[str, int]) -> None:
        """See `Store.keep_task_slots`."""
        with self._lock:
            for run, task in list(self._task_slots):
                if run == run_id and keep.get(task) != self._task_slots[(run, task)][0]:
                    del self._task_slots[(run, task)]

    def _holds(self, lease: Lease, now: float) -> bool:
        holder, token, expires = self._leases.get(lease.run_id, (None, 0, None))
        return holder == lease.owner and token == lease.token and (expires or 0) > now

    def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        """See `Store.renew_lease`."""
        with self._lock:
            if not self._holds(lease, now):
                raise LeaseLost(f"run {lease.run_id}: the lease expired or was taken over")
            self._leases[lease.run_id] = (lease.owner, lease.token, now + ttl)
            self._lease_times[lease.run_id] = (self._lease_times[lease.run_id][0], now)
            return replace(lease, expires_at=now + ttl)

    def artifact(self, sha256: str) -> bytes | None:
        """See `Store.artifact`."""
        return self._artifacts.get(sha256)

    def renew_leases(
        self, leases: Sequence[Lease], ttl: float, now: float
    ) -> list[Lease | LeaseLost]:
        """See `Store.renew_leases`."""
        renewed: list[Lease | LeaseLost] = []
        for lease in leases:
            try:
                renewed.append(self.renew_lease(lease, ttl, now))
            except LeaseLost as lost:
                renewed.append(lost)
        return renewed

    def _register(self, batch: AppendBatch, now: float) -> None:
        reg, lease = batch.register, batch.lease
        assert reg is not None
        self.create_run(
            run_id=reg.run_id,
            pipeline=reg.pipeline,
            topic=reg.topic,
            definition_hash=reg.definition_hash,
            definition=reg.definition,
            source=reg.source,
            created_at=reg.created_at,
        )
        self._leases[reg.run_id] = (lease.owner, lease.token, lease.expires_at)
        self._lease_times[reg.run_id] = (now, now)

    def release_leases(self, leases: Sequence[Lease]) -> None:
        """See `Store.release_leases`."""
        for lease in leases:
            self.release_lease(lease)

    def release_lease(self, lease: Lease) -> None:
        """See `Store.release_lease`."""
        with self._lock:
            holder, token, _ = self._leases.get(lease.run_id, (None, 0, None))
            if holder == lease.owner and token == lease.token:
                self._leases[lease.run_id] = (None, token, None)

    def append(self, batch: AppendBatch, now: float) -> int:
        """See `Store.append`."""
        result = self.append_many([batch], now)[0]
        if isinstance(result, Exception):
            raise result
        return result

    def append_many(
        self, batches: Sequence[AppendBatch], now: float, *, releases: Sequence[Lease] = ()
    ) -> list[int | Exception]:
        """See `Store.append_many`."""
        results: list[int | Exception] = []
        with self._lock:
            for batch in batches:
                run_id = batch.lease.run_id
                if batch.register is not None:
                    self._register(batch, now)
                if not self._holds(batch.lease, now):
                    results.append(LeaseLost(f"run {run_id}: the lease expired or was taken over"))
                    continue
                run = self._runs[run_id]
                seq = run.last_seq
                records = [new.stamped() for new in batch.events]  # a failure writes nothing
                head = self._heads.get(run_id)
                for new, (kind, data, content) in zip(batch.events, records, strict=True):
                    seq += 1
                    head = chain.link(head or chain.GENESIS, seq, content)
                    self._heads[run_id] = head
                    stored = StoredEvent(
                        id=len(self._events) + 1,
                        run_id=run_id,
                        seq=seq,
                        at=new.event.at,
                        kind=kind,
                        data=json.loads(data),
                        rule=new.rule,
                        why=new.why,
                        hash=head,
                    )
                    self._events.append(stored)
                    self._by_run[run_id].append(stored)
                self._runs[run_id] = replace(run, last_seq=seq, summary=batch.summary)
                consumed = set(batch.consumed)
                self._commands = [
                    (c, now if c.id in consumed and at is None else at) for c, at in self._commands
                ]
                for sha, body in batch.artifacts:
                    self._artifacts.setdefault(sha, bytes(body))
                for entry in batch.cache:
                    self._cache.setdefault((entry.fingerprint, run_id, entry.task_id), entry)
                results.append(seq)
            for lease in releases:
                holder, token, _ = self._leases.get(lease.run_id, (None, 0, None))
                if holder == lease.owner and token == lease.token:
                    self._leases[lease.run_id] = (None, token, None)
        return results

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> list[StoredEvent]:
        """See `Store.events`."""
        with self._lock:
            found = self._by_run.get(run_id, [])[since:]
            return found if limit is None else found[:limit]

    def all_events(self, after_id: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """See `Store.all_events`."""
        with self._lock:
            return self._events[after_id : after_id + limit]

    def get_run(self, run_id: str) -> RunRecord:
        """See `Store.get_run`."""
        with self._lock:
            try:
                run = self._runs[run_id]
            except KeyError:
                raise RunNotFound(f"no run {run_id!r} (see 'interlock runs')") from None
            holder, _, expires = self._leases[run_id]
            acquired, renewed = self._lease_times.get(run_id, (None, None))
            return replace(
                run,
                lease_owner=holder,
                lease_expires=expires,
                lease_acquired_at=acquired,
                lease_renewed_at=renewed,
            )

    def find_runs(self, prefix: str) -> list[str]:
        """See `Store.find_runs`."""
        with self._lock:
            return sorted(r for r in self._runs if r.startswith(prefix))[:10]

    def list_runs(
        self, *, status: str | None = None, pipeline: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """See `Store.list_runs`."""
        with self._lock:
            runs = [
                self.get_run(r.run_id)
                for r in self._runs.values()
                if (status is None or r.summary.status == status)
                and (pipeline is None or r.pipeline == pipeline)
            ]
            runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
            return runs[:limit]

    def search_runs(self, query: RunQuery) -> list[RunRecord]:
        """See `Store.search_runs`."""
        text = (query.text or "").lower()
        with self._lock:
            found = []
            for r in self._runs.values():
                created = r.created_at
                if (
                    (query.status and r.summary.status != query.status)
                    or (query.pipeline and r.pipeline != query.pipeline)
                    or (not query.children and CHILD_ID.search(r.run_id))
                    or (query.created_from is not None and created < query.created_from)
                    or (query.created_to is not None and created >= query.created_to)
                ):
                    continue
                if text:
                    first = self._by_run.get(r.run_id, [])[:1]
                    inputs = json.dumps(first[0].data.get("inputs", {})) if first else ""
                    if not any(text in part.lower() for part in (r.run_id, r.topic, inputs)):
                        continue
                found.append(self.get_run(r.run_id))

        def key(record: RunRecord) -> tuple[float, str]:
            value = record.created_at if query.sort == "created_at" else record.summary.cost_usd
            return (value, record.run_id)

        found.sort(key=key, reverse=query.descending)
        if query.after is not None:
            after = query.after
            found = [r for r in found if (key(r) < after if query.descending else key(r) > after)]
        return found[: query.limit]

    def count_runs(self) -> dict[str, int]:
        """See `Store.count_runs`."""
        with self._lock:
            return dict(Counter(self.get_run(r).summary.status for r in self._runs))

    def _prunable(self, run_id: str, before: float, statuses: Sequence[str], now: float) -> bool:
        record = self.get_run(run_id)
        owner, _, expires = self._leases[run_id]
        return (
            record.summary.status in ENDED_STATUSES
            and record.summary.status in statuses
            and record.summary.updated_at < before
            and (owner is None or (expires or 0.0) <= now)
        )

    def prunable_runs(
        self, before: float, statuses: Sequence[str], now: float, limit: int
    ) -> list[str]:
        """See `Store.prunable_runs`."""
        with self._lock:
            found = [r for r in self._runs if self._prunable(r, before, statuses, now)]
            found.sort(key=lambda r: (self.get_run(r).summary.updated_at, r))
            return found[:limit]

    def prune_runs(self, run_ids: Sequence[str], now: float) -> tuple[list[PrunedRun], set[str]]:
        """See `Store.prune_runs`."""
        receipts, shas = [], set()
        with self._lock:
            for run_id in run_ids:
                if run_id not in self._runs or not self._prunable(
                    run_id, float("inf"), ENDED_STATUSES, now
                ):
                    continue
                record = self.get_run(run_id)
                events = self._by_run.pop(run_id, [])
                shas |= {
                    str(e.data["sha256"])
                    for e in events
                    if e.kind in ("task_completed", "task_reused", "output_edited")
                    and e.data.get("sha256")
                }
                receipt = PrunedRun(
                    run_id=run_id,
                    pipeline=record.pipeline,
                    status=record.summary.status,
                    created_at=record.created_at,
                    ended_at=record.summary.updated_at,
                    last_seq=record.last_seq,
                    chain_head=self._heads.pop(run_id, None),
                    pruned_at=now,
                )
                self._pruned[run_id] = receipt
                receipts.append(receipt)
                del self._runs[run_id], self._leases[run_id]
                self._lease_times.pop(run_id, None)
                self._slots.pop(run_id, None)
            gone = {r.run_id for r in receipts}
            self._events = [e for e in self._events if e.run_id not in gone]
            self._commands = [c for c in self._commands if c[0].run_id not in gone]
            self._outbox = {k: v for k, v in self._outbox.items() if v[0].run_id not in gone}
            self._cache = {k: e for k, e in self._cache.items() if e.run_id not in gone}
        return receipts, shas

    def drop_artifacts(self, candidates: set[str]) -> int:
        """See `Store.drop_artifacts`."""
        with self._lock:
            named = {
                str(e.data.get("sha256"))
                for e in self._events
                if e.kind in ("task_completed", "task_reused", "output_edited")
            }
            gone = [sha for sha in candidates if sha in self._artifacts and sha not in named]
            for sha in gone:
                del self._artifacts[sha]
            return len(gone)

    def pruned_run(self, run_id: str) -> PrunedRun | None:
        """See `Store.pruned_run`."""
        return self._pruned.get(run_id)

    def post_command(self, run_id: str, kind: str, message: str, by: str, now: float) -> int:
        """See `Store.post_command`."""
        with self._lock:
            self.get_run(run_id)
            command = CommandRecord(
                id=len(self._commands) + 1,
                run_id=run_id,
                kind=kind,
                message=message,
                by=by,
                created_at=now,
            )
            self._commands.append((command, None))
            return command.id

    def pending_commands(self, run_id: str | None = None) -> list[CommandRecord]:
        """See `Store.pending_commands`."""
        with self._lock:
            return [c for c, at in self._commands if run_id in (None, c.run_id) and at is None]

    def close(self) -> None:
        """See `Store.close`."""

    def event_cursor(self, name: str) -> int:
        """See `Store.event_cursor`."""
        with self._lock:
            return self._cursors.get(name, 0)

    def outbox_enqueue(
        self, cursor: str, position: int, items: Sequence[OutboxItem], now: float
    ) -> None:
        """See `Store.outbox_enqueue`."""
        with self._lock:
            for item in items:
                if item.key not in self._outbox:
                    stored = replace(item, created_at=now, attempts=0)
                    self._outbox[item.key] = (stored, now, None, 0.0)
            self._cursors[cursor] = max(self._cursors.get(cursor, 0), position)

    def outbox_claim(
        self, owner: str, now: float, hold: float, limit: int = 20
    ) -> list[OutboxItem]:
        """See `Store.outbox_claim`."""
        with self._lock:
            claimed: list[OutboxItem] = []
            for key, (item, next_at, _, until) in sorted(
                self._outbox.items(), key=lambda kv: (kv[1][0].created_at, kv[0])
            ):
                if len(claimed) >= limit:
                    break
                if item.delivered_at is None and next_at <= now and until <= now:
                    item = replace(item, attempts=item.attempts + 1)
                    self._outbox[key] = (item, next_at, owner, now + hold)
                    claimed.append(item)
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
        with self._lock:
            entry = self._outbox.get(key)
            if entry is None or entry[2] != owner:
                return
            delivered = now if error is None else None
            item = replace(entry[0], delivered_at=delivered, last_error=error)
            self._outbox[key] = (item, 1e300 if retry_at is None else retry_at, None, 0.0)

    def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        """See `Store.cache_put`."""
        with self._lock:
            for e in entries:
                self._cache.setdefault((e.fingerprint, e.run_id, e.task_id), e)

    def cache_find(self, fingerprint: str, since: float, limit: int = 5) -> list[CacheEntry]:
        """See `Store.cache_find`."""
        with self._lock:
            found = [
                e
                for e in self._cache.values()
                if e.fingerprint == fingerprint and e.completed_at >= since
            ]
        return sorted(found, key=_cache_order)[:limit]

    def cache_list(self, limit: int = 100) -> list[CacheEntry]:
        """See `Store.cache_list`."""
        with self._lock:
            return sorted(self._cache.values(), key=_cache_order)[:limit]

    def cache_clear(self, before: float | None = None) -> int:
        """See `Store.cache_clear`."""
        with self._lock:
            gone = [k for k, e in self._cache.items() if before is None or e.completed_at < before]
            for key in gone:
                del self._cache[key]
            return len(gone)

    def outbox_items(self, run_id: str) -> list[OutboxItem]:
        """See `Store.outbox_items`."""
        with self._lock:
            items = [e[0] for e in self._outbox.values() if e[0].run_id == run_id]
            return sorted(items, key=lambda i: (i.created_at, i.key))
