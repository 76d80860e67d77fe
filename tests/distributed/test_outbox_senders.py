"""Notification senders on PostgreSQL skip each other's rows instead of waiting for them."""

from __future__ import annotations

import threading
import time

import psycopg

from interlock.storage.base import OutboxItem
from interlock.storage.postgres import PostgresStore


def test_a_sender_skips_a_row_another_holds_without_waiting(pg_url: str) -> None:
    """While another sender's transaction holds item a's row, a claim takes b at once."""
    store = PostgresStore(pg_url)
    try:
        now = time.time()
        store.create_run(
            run_id="r",
            pipeline="p",
            topic="t",
            definition_hash="h",
            definition="{}",
            source="",
            created_at=now,
        )
        items = [OutboxItem(key=k, sink="webhook", run_id="r", payload={}) for k in ("a", "b")]
        store.outbox_enqueue("feed", 1, items, now)
        claimed: list[list[str]] = []
        with psycopg.connect(pg_url) as other:
            other.execute("SELECT 1 FROM outbox WHERE key = 'a' FOR UPDATE")
            claim = threading.Thread(
                target=lambda: claimed.append(
                    [i.key for i in store.outbox_claim("s2", now, hold=30)]
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
