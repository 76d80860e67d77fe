"""The provider batch store, the same on every backend: a request recorded once under its
key, claimed by one batch only, ended once; two handles on one ledger see one state."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interlock.core.provider_batches import BatchRequest, BatchState, ProviderBatch, RequestState
from interlock.providers.batch_store import BatchStore, MemoryBatches
from interlock.storage.provider_batches_pg import PostgresBatches
from interlock.storage.provider_batches_sqlite import SQLiteBatches

Opener = Callable[[], BatchStore]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens handles on one fresh ledger; two handles stand for two processes."""
    opened: list[BatchStore] = []
    shared = MemoryBatches()
    url = request.getfixturevalue("pg_database") if request.param == "postgres" else ""

    def open_one() -> BatchStore:
        if request.param == "memory":
            return shared
        store: BatchStore = (
            SQLiteBatches(tmp_path / "ledger.db")
            if request.param == "sqlite"
            else PostgresBatches(url)
        )
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def req(key: str, at: float = 1.0, run_id: str = "r1") -> BatchRequest:
    """A gathered request of alias `cheap`."""
    return BatchRequest(key=key, provider="oa", alias="cheap", body='{"model": "m"}',
                        state=RequestState.GATHERED, created_at=at, run_id=run_id)  # fmt: skip


def test_a_request_is_recorded_once_under_its_key(opener: Opener) -> None:
    """Adding a key again returns the first record, unchanged."""
    store = opener()
    store.add_request(req("a"))
    again = opener().add_request(BatchRequest(**{**req("a").__dict__, "body": "{}"}))
    assert again.body == '{"model": "m"}'


def test_a_request_is_claimed_by_one_batch_and_ended_once(opener: Opener) -> None:
    """A request in one batch is not gathered for the next; its first end is kept."""
    store, other = opener(), opener()
    for n, key in enumerate(["b", "a", "c"]):
        store.add_request(req(key, at=float(n)))
    assert [r.key for r in other.gathered("oa", "cheap", 2)] == ["b", "a"]
    first = ProviderBatch(tag="t1", provider="oa", kind="openai", alias="cheap",
                          state=BatchState.SUBMITTING, created_at=5.0)  # fmt: skip
    claimed = store.open_batch(first, ["a", "b"])
    second = ProviderBatch(**{**first.__dict__, "tag": "t2"})
    assert [r.key for r in claimed] == ["a", "b"]
    assert [r.key for r in other.open_batch(second, ["a", "c"])] == ["c"]
    store.mark_submitted("t1", "batch_1", "validating", 6.0)
    done = BatchRequest(**{**claimed[0].__dict__, "state": RequestState.DONE, "answer": "{}"})
    store.finish([done])
    failed = BatchRequest(**{**claimed[0].__dict__, "state": RequestState.FAILED, "error": "x"})
    other.finish([failed])
    found = other.request("a")
    assert found is not None and found.state == RequestState.DONE and found.tag == "t1"
    store.end_batch("t1", BatchState.ENDED, "completed", 7.0)
    batches = {b.tag: b for b in other.batches()}
    assert batches["t1"].state == BatchState.ENDED and batches["t1"].requests == 2
    assert batches["t1"].provider_batch_id == "batch_1" and batches["t1"].submitted_at == 6.0
    assert batches["t2"].state == BatchState.SUBMITTING
    assert [r.key for r in other.requests_of_run("r1")] == ["a", "b", "c"]
