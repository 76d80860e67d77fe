"""`BatchLedger` in memory, beside a `MemoryStore` (whose runs its rows are joined with)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from interlock.core.batches import RowState, RowView
from interlock.errors import LeaseHeld, RunNotFound
from interlock.storage.batches import (
    BatchExists,
    BatchNotFound,
    BatchRecord,
    BatchRow,
    NewBatch,
    exists_message,
    held_message,
    not_found_message,
)

if TYPE_CHECKING:
    from interlock.testing import MemoryStore


class _Row:
    """A row's columns, as the SQL backends keep them."""

    def __init__(self, number: int, topic: str, inputs: dict[str, Any]) -> None:
        self.number, self.topic, self.inputs = number, topic, inputs
        self.state = RowState.PENDING
        self.tries = 1
        self.run_id: str | None = None
        self.started_at: float | None = None
        self.error: str | None = None
        self.result: dict[str, Any] | None = None
        self.spent_before = 0.0
        self.tokens_before = 0
        self.estimated_before = False


class MemoryBatches:
    """The batches of one `MemoryStore` (lost with it)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._lock = threading.RLock()
        self._batches: dict[str, BatchRecord] = {}
        self._rows: dict[str, dict[int, _Row]] = {}

    @classmethod
    def of(cls, store: MemoryStore) -> MemoryBatches:
        """The batches kept beside `store` (made on first use, then shared)."""
        found = getattr(store, "_interlock_batches", None)
        if found is None:
            found = cls(store)
            store._interlock_batches = found  # type: ignore[attr-defined]
        assert isinstance(found, MemoryBatches)
        return found

    def create_batch(
        self,
        batch: NewBatch,
        rows: Sequence[tuple[int, str, dict[str, Any]]],
        also: Sequence[NewBatch] = (),
    ) -> None:
        """See `BatchLedger.create_batch`."""
        with self._lock:
            for one in (batch, *also):
                if one.batch_id in self._batches:
                    raise BatchExists(exists_message(one.batch_id))
            for one in (batch, *also):
                self._store._definitions.setdefault(one.definition_hash, one.definition)
                self._batches[one.batch_id] = BatchRecord(
                    batch_id=one.batch_id,
                    pipeline=one.pipeline,
                    definition_hash=one.definition_hash,
                    source=one.source,
                    inputs_file=one.inputs_file,
                    concurrency=one.concurrency,
                    max_cost_usd=one.max_cost_usd,
                    rows=len(rows),
                    created_at=one.created_at,
                    experiment=one.experiment,
                    variant=one.variant,
                    tolerate=one.tolerate,
                    batch_waiting=one.batch_waiting,
                )
                self._rows[one.batch_id] = {
                    n: _Row(n, topic, copy.deepcopy(inputs)) for n, topic, inputs in rows
                }

    def experiment_batches(self, experiment: str) -> list[BatchRecord]:
        """See `BatchLedger.experiment_batches`."""
        with self._lock:
            found = [b for b in self._batches.values() if b.experiment == experiment]
        return sorted(found, key=lambda b: (b.variant != "base", b.variant or ""))

    def get_batch(self, batch_id: str) -> BatchRecord:
        """See `BatchLedger.get_batch`."""
        with self._lock:
            try:
                return self._batches[batch_id]
            except KeyError:
                raise BatchNotFound(not_found_message(batch_id)) from None

    def list_batches(self, limit: int = 100) -> list[BatchRecord]:
        """See `BatchLedger.list_batches`."""
        with self._lock:
            ordered = sorted(self._batches.values(), key=lambda b: (b.created_at, b.batch_id))
            return ordered[::-1][:limit]

    def rows(self, batch_id: str) -> list[BatchRow]:
        """See `BatchLedger.rows`."""
        with self._lock:
            return [self._view(r) for _, r in sorted(self._rows.get(batch_id, {}).items())]

    def views(self, batch_id: str) -> list[RowView]:
        """See `BatchLedger.views`."""
        return [row.view for row in self.rows(batch_id)]

    def views_of(self, batch_id: str, numbers: Sequence[int]) -> list[RowView]:
        """See `BatchLedger.views_of`."""
        with self._lock:
            rows = self._rows.get(batch_id, {})
            return [self._view(rows[n]).view for n in sorted(set(numbers)) if n in rows]

    def _view(self, row: _Row) -> BatchRow:
        status, cost, tokens, parked, estimated = None, 0.0, 0, False, False
        if row.run_id is not None:
            try:
                summary = self._store.get_run(row.run_id).summary
                status, cost, tokens = summary.status, summary.cost_usd, summary.tokens
                parked = summary.batch_parked
                estimated = summary.estimated
            except RunNotFound:  # pruned: its receipt keeps its status, not its cost
                receipt = self._store.pruned_run(row.run_id)
                status = receipt.status if receipt is not None else None
        view = RowView(
            number=row.number,
            state=row.state,
            tries=row.tries,
            run_id=row.run_id,
            run_status=status,
            cost_usd=row.spent_before + cost,
            tokens=row.tokens_before + tokens,
            kept=row.result is not None,
            parked=parked,
            estimated=row.estimated_before or estimated,
        )
        return BatchRow(
            view=view,
            topic=row.topic,
            inputs=copy.deepcopy(row.inputs),
            started_at=row.started_at,
            error=row.error,
            result=copy.deepcopy(row.result),
        )

    def claim_rows(
        self, batch_id: str, claims: Sequence[tuple[int, int, str]], now: float
    ) -> list[int]:
        """See `BatchLedger.claim_rows`."""
        claimed = []
        with self._lock:
            rows = self._rows.get(batch_id, {})
            for number, attempt, run_id in claims:
                row = rows.get(number)
                if row is None or row.state is not RowState.PENDING or row.tries != attempt:
                    continue
                row.state, row.run_id, row.started_at = RowState.STARTED, run_id, now
                claimed.append(number)
        return claimed

    def refuse_row(self, batch_id: str, row: int, run_id: str, error: str) -> None:
        """See `BatchLedger.refuse_row`."""
        with self._lock:
            found = self._rows.get(batch_id, {}).get(row)
            if found is not None and found.run_id == run_id:
                found.state, found.error = RowState.REFUSED, error

    def set_results(
        self, batch_id: str, results: Sequence[tuple[int, str, dict[str, Any]]]
    ) -> None:
        """See `BatchLedger.set_results`."""
        with self._lock:
            rows = self._rows.get(batch_id, {})
            for number, run_id, result in results:
                row = rows.get(number)
                if row is not None and row.run_id == run_id:
                    row.result = copy.deepcopy(result)

    def retry_rows(self, batch_id: str, views: Sequence[RowView]) -> int:
        """See `BatchLedger.retry_rows`."""
        with self._lock:
            given = self._retry(batch_id, views)
            if given:
                self._count_change(batch_id)
        return given

    def _retry(self, batch_id: str, views: Sequence[RowView]) -> int:
        given = 0
        rows = self._rows.get(batch_id, {})
        for view in views:
            row = rows.get(view.number)
            movable = (RowState.STARTED, RowState.REFUSED)
            if row is None or row.tries != view.tries or row.state not in movable:
                continue
            row.state, row.tries, row.run_id = RowState.PENDING, row.tries + 1, None
            row.started_at = row.error = row.result = None
            row.spent_before, row.tokens_before = view.cost_usd, view.tokens
            row.estimated_before = view.estimated
            given += 1
        return given

    def reopen_batch(self, batch_id: str, views: Sequence[RowView]) -> int:
        """See `BatchLedger.reopen_batch`."""
        with self._lock:
            record = self.get_batch(batch_id)
            self._batches[batch_id] = replace(record, cancelled_at=None)
            cancelled = [r for r in self._rows[batch_id].values() if r.state is RowState.CANCELLED]
            for row in cancelled:
                row.state = RowState.PENDING
            given = len(cancelled) + self._retry(batch_id, views)
            self._count_change(batch_id)
            return given

    def _count_change(self, batch_id: str) -> None:
        record = self._batches[batch_id]
        self._batches[batch_id] = replace(record, changes=record.changes + 1)

    def cancel_batch(self, batch_id: str, now: float) -> int:
        """See `BatchLedger.cancel_batch`."""
        with self._lock:
            record = self.get_batch(batch_id)
            if record.cancelled_at is None:
                self._batches[batch_id] = replace(record, cancelled_at=now)
            pending = [r for r in self._rows[batch_id].values() if r.state is RowState.PENDING]
            for row in pending:
                row.state = RowState.CANCELLED
            self._count_change(batch_id)
            return len(pending)

    def set_limits(
        self, batch_id: str, concurrency: int, max_cost_usd: float | None, batch_waiting: int
    ) -> None:
        """See `BatchLedger.set_limits`."""
        with self._lock:
            record = self.get_batch(batch_id)
            self._batches[batch_id] = replace(
                record,
                concurrency=concurrency,
                max_cost_usd=max_cost_usd,
                batch_waiting=batch_waiting,
            )

    def hold_batch(
        self,
        batch_id: str,
        owner: str,
        ttl: float,
        now: float,
        *,
        take_over_from: str | None = None,
    ) -> None:
        """See `BatchLedger.hold_batch`."""
        with self._lock:
            record = self.get_batch(batch_id)
            holder, expires = record.driver, record.driver_expires
            free = holder is None or expires is None or expires <= now
            if not (free or holder in (owner, take_over_from)):
                raise LeaseHeld(held_message(batch_id, holder or "?", expires or now, now))
            self._batches[batch_id] = replace(record, driver=owner, driver_expires=now + ttl)

    def release_batch(self, batch_id: str, owner: str) -> None:
        """See `BatchLedger.release_batch`."""
        with self._lock:
            record = self.get_batch(batch_id)
            if record.driver == owner:
                self._batches[batch_id] = replace(record, driver=None, driver_expires=None)
