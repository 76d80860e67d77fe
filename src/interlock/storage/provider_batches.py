"""Provider batches and their requests in a ledger: the operations both SQL backends share.

Each backend (`provider_batches_sqlite`, `provider_batches_pg`) opens its transaction its own
way and hands the queries a `Run` function; what the operations mean is said once, here, and
in `interlock.providers.batch_store.BatchStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from interlock.core.provider_batches import (
    BatchRequest,
    BatchState,
    ProviderBatch,
    RequestState,
)

Run = Callable[[str, tuple[Any, ...]], list[Any]]


def request_of(row: Sequence[Any]) -> BatchRequest:
    """A `BatchRequest` from a row of the request queries."""
    return BatchRequest(
        key=row[0],
        provider=row[1],
        alias=row[2],
        body=row[3],
        state=RequestState(row[4]),
        created_at=float(row[5]),
        run_id=row[6],
        task_id=row[7],
        tag=row[8],
        answer=row[9],
        error=row[10],
        retryable=bool(row[11]),
    )


def batch_of(row: Sequence[Any]) -> ProviderBatch:
    """A `ProviderBatch` from a row of the `batches` query."""
    return ProviderBatch(
        tag=row[0],
        provider=row[1],
        kind=row[2],
        alias=row[3],
        state=BatchState(row[4]),
        created_at=float(row[5]),
        provider_batch_id=row[6],
        provider_status=row[7],
        submitted_at=None if row[8] is None else float(row[8]),
        ended_at=None if row[9] is None else float(row[9]),
        requests=int(row[10]),
    )


class SQLBatches:
    """The `BatchStore` operations over `transaction()`, which yields a `Run`."""

    def transaction(self) -> AbstractContextManager[Run]:  # pragma: no cover - abstract
        raise NotImplementedError

    def add_request(self, request: BatchRequest) -> BatchRequest:
        """See `interlock.providers.batch_store.BatchStore.add_request`."""
        with self.transaction() as run:
            run("add_request", (request.key, request.provider, request.alias, request.body,
                                str(request.state), request.created_at, request.run_id,
                                request.task_id))  # fmt: skip
            return request_of(run("request", (request.key,))[0])

    def request(self, key: str) -> BatchRequest | None:
        """See `interlock.providers.batch_store.BatchStore.request`."""
        with self.transaction() as run:
            rows = run("request", (key,))
        return request_of(rows[0]) if rows else None

    def gathered(self, provider: str, alias: str, limit: int) -> list[BatchRequest]:
        """See `interlock.providers.batch_store.BatchStore.gathered`."""
        with self.transaction() as run:
            return [request_of(r) for r in run("gathered", (provider, alias, limit))]

    def requests_in(self, tag: str) -> list[BatchRequest]:
        """See `interlock.providers.batch_store.BatchStore.requests_in`."""
        with self.transaction() as run:
            return [request_of(r) for r in run("in_batch", (tag,))]

    def requests_of_run(self, run_id: str) -> list[BatchRequest]:
        """See `interlock.providers.batch_store.BatchStore.requests_of_run`."""
        with self.transaction() as run:
            return [request_of(r) for r in run("of_run", (run_id,))]

    def open_batch(self, batch: ProviderBatch, keys: Sequence[str]) -> list[BatchRequest]:
        """See `interlock.providers.batch_store.BatchStore.open_batch`."""
        with self.transaction() as run:
            run("add_batch", (batch.tag, batch.provider, batch.kind, batch.alias,
                              batch.created_at))  # fmt: skip
            for key in keys:
                run("claim", (batch.tag, key))
            return [request_of(r) for r in run("in_batch", (batch.tag,))]

    def mark_submitted(self, tag: str, provider_batch_id: str, status: str, at: float) -> None:
        """See `interlock.providers.batch_store.BatchStore.mark_submitted`."""
        with self.transaction() as run:
            run("submitted", (provider_batch_id, status, at, tag))

    def set_status(self, tag: str, status: str) -> None:
        """See `interlock.providers.batch_store.BatchStore.set_status`."""
        with self.transaction() as run:
            run("status", (status, tag))

    def finish(self, results: Sequence[BatchRequest]) -> None:
        """See `interlock.providers.batch_store.BatchStore.finish`."""
        with self.transaction() as run:
            for r in results:
                run("finish", (str(r.state), r.answer, r.error, r.retryable, r.key))

    def end_batch(self, tag: str, state: BatchState, status: str, at: float) -> None:
        """See `interlock.providers.batch_store.BatchStore.end_batch`."""
        with self.transaction() as run:
            run("end", (str(state), status, at, tag))

    def batches(self) -> list[ProviderBatch]:
        """See `interlock.providers.batch_store.BatchStore.batches`."""
        with self.transaction() as run:
            return [batch_of(r) for r in run("batches", ())]
