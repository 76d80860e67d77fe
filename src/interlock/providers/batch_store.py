"""Where batch-mode calls and the provider batches holding them are recorded.

The contract `BatchStore` is implemented by the ledger's backends
(`interlock.storage.provider_batches_sqlite`, `..._pg`) and by `MemoryBatches` here (a
process of its own, and tests). The process's store is chosen like the spend caps' store:
`use_batch_store`, from the ledger the runs are driven on.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Protocol

from interlock.core.provider_batches import (
    TERMINAL,
    BatchRequest,
    BatchState,
    ProviderBatch,
    RequestState,
)


class BatchStore(Protocol):
    """The operations the batch collector needs; each one is atomic."""

    where: str

    def add_request(self, request: BatchRequest) -> BatchRequest:
        """Record `request` unless its key is recorded; the recorded one either way."""
        ...

    def request(self, key: str) -> BatchRequest | None:
        """The request recorded under `key`."""
        ...

    def gathered(self, provider: str, alias: str, limit: int) -> list[BatchRequest]:
        """Up to `limit` requests of `alias` waiting for a batch, oldest first."""
        ...

    def requests_in(self, tag: str) -> list[BatchRequest]:
        """The requests of batch `tag`, by key."""
        ...

    def requests_of_run(self, run_id: str) -> list[BatchRequest]:
        """The requests of run `run_id`, by key."""
        ...

    def open_batch(self, batch: ProviderBatch, keys: Sequence[str]) -> list[BatchRequest]:
        """Record `batch` (submitting) with those of `keys` still gathered; returns them."""
        ...

    def mark_submitted(self, tag: str, provider_batch_id: str, status: str, at: float) -> None:
        """The provider holds batch `tag` as `provider_batch_id`."""
        ...

    def set_status(self, tag: str, status: str) -> None:
        """What the provider said of batch `tag` last."""
        ...

    def finish(self, results: Sequence[BatchRequest]) -> None:
        """Record each request's end (state, answer, error), unless it ended already."""
        ...

    def end_batch(self, tag: str, state: BatchState, status: str, at: float) -> None:
        """Batch `tag` is over."""
        ...

    def batches(self) -> list[ProviderBatch]:
        """Every batch recorded, oldest first."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


class MemoryBatches:
    """A `BatchStore` in this process's memory."""

    where = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, BatchRequest] = {}
        self._batches: dict[str, ProviderBatch] = {}

    def add_request(self, request: BatchRequest) -> BatchRequest:
        with self._lock:
            return self._requests.setdefault(request.key, request)

    def request(self, key: str) -> BatchRequest | None:
        with self._lock:
            return self._requests.get(key)

    def gathered(self, provider: str, alias: str, limit: int) -> list[BatchRequest]:
        with self._lock:
            found = [r for r in self._requests.values() if r.provider == provider
                     and r.alias == alias and r.state == RequestState.GATHERED]  # fmt: skip
        return sorted(found, key=lambda r: (r.created_at, r.key))[:limit]

    def requests_in(self, tag: str) -> list[BatchRequest]:
        with self._lock:
            return sorted((r for r in self._requests.values() if r.tag == tag), key=_key)

    def requests_of_run(self, run_id: str) -> list[BatchRequest]:
        with self._lock:
            return sorted((r for r in self._requests.values() if r.run_id == run_id), key=_key)

    def open_batch(self, batch: ProviderBatch, keys: Sequence[str]) -> list[BatchRequest]:
        with self._lock:
            self._batches[batch.tag] = dataclasses.replace(batch, state=BatchState.SUBMITTING)
            for key in keys:
                found = self._requests.get(key)
                if found is not None and found.state == RequestState.GATHERED:
                    self._requests[key] = dataclasses.replace(
                        found, state=RequestState.BATCHED, tag=batch.tag
                    )
        return self.requests_in(batch.tag)

    def mark_submitted(self, tag: str, provider_batch_id: str, status: str, at: float) -> None:
        with self._lock:
            self._batches[tag] = dataclasses.replace(
                self._batches[tag], state=BatchState.SUBMITTED, provider_batch_id=provider_batch_id,
                provider_status=status, submitted_at=at)  # fmt: skip

    def set_status(self, tag: str, status: str) -> None:
        with self._lock:
            self._batches[tag] = dataclasses.replace(self._batches[tag], provider_status=status)

    def finish(self, results: Sequence[BatchRequest]) -> None:
        with self._lock:
            for result in results:
                found = self._requests.get(result.key)
                if found is not None and found.state not in TERMINAL:
                    self._requests[result.key] = dataclasses.replace(
                        found, state=result.state, answer=result.answer, error=result.error,
                        retryable=result.retryable)  # fmt: skip

    def end_batch(self, tag: str, state: BatchState, status: str, at: float) -> None:
        with self._lock:
            self._batches[tag] = dataclasses.replace(
                self._batches[tag], state=state, provider_status=status, ended_at=at
            )

    def batches(self) -> list[ProviderBatch]:
        with self._lock:
            counts: dict[str, int] = {}
            for r in self._requests.values():
                counts[r.tag] = counts.get(r.tag, 0) + 1
            return sorted(
                (dataclasses.replace(b, requests=counts.get(b.tag, 0))
                 for b in self._batches.values()),
                key=lambda b: (b.created_at, b.tag),
            )  # fmt: skip

    def close(self) -> None:
        pass


def _key(request: BatchRequest) -> str:
    return request.key


_store: BatchStore = MemoryBatches()


def use_batch_store(store: BatchStore) -> BatchStore:
    """Record this process's batch-mode calls in `store` from now on; returns the store used
    until now (the caller closes it or puts it back)."""
    global _store
    previous, _store = _store, store
    return previous


def batch_store() -> BatchStore:
    """The store this process's batch-mode calls are recorded in."""
    return _store
