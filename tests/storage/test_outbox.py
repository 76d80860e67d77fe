"""The event cursor and notification outbox guarantees, checked on every backend."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg

from interlock.storage.base import OutboxItem, Store
from interlock.storage.postgres import PostgresStore

T0 = 1000.0


def item(key: str, run_id: str = "r1") -> OutboxItem:
    """A notification for the webhook sink."""
    return OutboxItem(key=key, sink="webhook", run_id=run_id, payload={"key": key, "n": [1, 2]})


def make_run(store: Store, run_id: str = "r1") -> None:
    """A run to attach notifications to."""
    store.create_run(
        run_id=run_id,
        pipeline="p",
        topic="t",
        definition_hash="h",
        definition="{}",
        source="",
        created_at=T0,
    )


def test_cursor_starts_at_zero_and_never_moves_back(store: Store) -> None:
    """A new cursor reads 0; enqueueing moves it forward only."""
    make_run(store)
    assert store.event_cursor("feed") == 0
    store.outbox_enqueue("feed", 7, [], T0)
    store.outbox_enqueue("feed", 3, [], T0)
    assert store.event_cursor("feed") == 7 and store.event_cursor("other") == 0


def test_enqueue_keeps_the_first_item_of_a_key(store: Store) -> None:
    """Enqueueing a key twice keeps one item with the first payload."""
    make_run(store)
    store.outbox_enqueue("feed", 1, [item("a"), item("b")], T0)
    store.outbox_enqueue("feed", 2, [OutboxItem(key="a", sink="x", run_id="r1", payload={})], T0)
    items = store.outbox_items("r1")
    assert [(i.key, i.sink, i.payload["key"]) for i in items] == [
        ("a", "webhook", "a"),
        ("b", "webhook", "b"),
    ]
    assert all(i.delivered_at is None and i.attempts == 0 for i in items)


def test_a_claim_excludes_other_senders_until_it_lapses(opener: Callable[[], Store]) -> None:
    """Two senders never hold one item at once; an unsettled claim is due again after `hold`."""
    one, two = opener(), opener()
    make_run(one)
    one.outbox_enqueue("feed", 1, [item("a"), item("b")], T0)
    first = one.outbox_claim("s1", T0, hold=30)
    assert [(i.key, i.attempts) for i in first] == [("a", 1), ("b", 1)]
    assert two.outbox_claim("s2", T0 + 1, hold=30) == []
    again = two.outbox_claim("s2", T0 + 31, hold=30, limit=1)
    assert [(i.key, i.attempts) for i in again] == [("a", 2)]


def test_settle_delivers_retries_or_gives_up(store: Store) -> None:
    """Settling records delivery, a retry time, or a final error, only for the claim holder."""
    make_run(store)
    store.outbox_enqueue("feed", 1, [item("a"), item("b"), item("c")], T0)
    store.outbox_claim("s1", T0, hold=30)
    store.outbox_settle("a", "intruder", T0)
    store.outbox_settle("a", "s1", T0 + 1)
    store.outbox_settle("b", "s1", T0 + 1, error="503", retry_at=T0 + 60)
    store.outbox_settle("c", "s1", T0 + 1, error="410 gone")
    by_key = {i.key: i for i in store.outbox_items("r1")}
    assert by_key["a"].delivered_at == T0 + 1 and by_key["a"].last_error is None
    assert by_key["b"].delivered_at is None and by_key["b"].last_error == "503"
    assert by_key["c"].last_error == "410 gone"
    assert store.outbox_claim("s2", T0 + 59, hold=30) == []
    assert [i.key for i in store.outbox_claim("s2", T0 + 60, hold=30)] == ["b"]
    assert [i.key for i in store.outbox_claim("s3", T0 + 10_000, hold=30)] == ["b"]


def test_a_postgres_sender_skips_a_row_another_holds_without_waiting(pg_database: str) -> None:
    """While another sender's transaction holds item a's row, a claim takes b at once."""
    store = PostgresStore(pg_database)
    try:
        make_run(store)
        store.outbox_enqueue("feed", 1, [item("a"), item("b")], T0)
        claimed: list[list[str]] = []
        with psycopg.connect(pg_database) as other:
            other.execute("SELECT 1 FROM outbox WHERE key = 'a' FOR UPDATE")
            claim = threading.Thread(
                target=lambda: claimed.append(
                    [i.key for i in store.outbox_claim("s2", T0, hold=30)]
                )
            )
            claim.start()
            claim.join(5)
            waited = claim.is_alive()
        claim.join(30)  # the other transaction has ended: a waiting claim gets through now
        assert not waited, "the claim waited for the row another sender held"
        assert claimed == [["b"]]
    finally:
        store.close()
