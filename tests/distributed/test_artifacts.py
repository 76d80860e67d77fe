"""Artifacts kept in memory: a body comes back from the process that handled it last,
without a round trip, and the memory they take stays within its budget."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from interlock.distributed.artifacts import PostgresArtifacts, RecentBodies
from interlock.storage.postgres import PostgresStore


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_recent_bodies_keep_the_last_ones_within_their_budget() -> None:
    """The least recently used go first once the budget is spent; a body larger than
    `largest` is never kept; a digest is the body's own."""
    recent = RecentBodies(budget=10, largest=6)
    a, b, c, big = b"aaaa", b"bbbb", b"cccc", b"0123456"
    assert [recent.keep(x) for x in (a, b)] == [sha(a), sha(b)]
    assert recent.take([sha(a)]) == {sha(a): a}  # a is now the most recently used
    recent.keep(c)  # 12 bytes: b, the least recently used, goes
    assert recent.take([sha(x) for x in (a, b, c)]) == {sha(a): a, sha(c): c}
    assert recent.keep(big) == sha(big) and recent.take([sha(big)]) == {}


def test_a_worker_reads_back_what_it_handled_without_the_database(pg_url: str) -> None:
    """A body put or read once comes back from memory (here: after its row is gone); one
    never seen is read from the database, then kept; an unknown digest is an error."""
    store = PostgresStore(pg_url, pool_size=2)
    try:
        artifacts = PostgresArtifacts(store)
        mine = artifacts.put(b"made here")
        elsewhere = PostgresArtifacts(store).put(b"made elsewhere")
        assert artifacts.get_many([mine, elsewhere]) == {
            mine: b"made here",
            elsewhere: b"made elsewhere",
        }
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute("DELETE FROM artifacts")
        assert artifacts.get_many([elsewhere, mine]) == {
            mine: b"made here",
            elsewhere: b"made elsewhere",
        }
        with pytest.raises(KeyError, match="is not stored"):
            artifacts.get_many([mine, sha(b"never stored")])
    finally:
        store.close()
