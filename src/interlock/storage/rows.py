"""Rows as both SQL backends select and insert them, to and from the contract's records.

The queries of every dialect return the same columns in the same order; only how JSON comes
back differs (text in SQLite, already decoded by psycopg), so callers pass `data` decoded.
"""

from __future__ import annotations

from typing import Any

from interlock.storage.base import AppendBatch, OutboxItem, RunRecord, RunSummary, StoredEvent


def registration_row(batch: AppendBatch, now: float) -> tuple[Any, ...]:
    """The parameters of `insert_run_leased`: a new run holding the batch's lease."""
    reg, lease = batch.register, batch.lease
    assert reg is not None
    return (
        reg.run_id,
        reg.pipeline,
        reg.topic,
        reg.definition_hash,
        reg.source,
        reg.created_at,
        reg.created_at,
        lease.owner,
        lease.token,
        lease.expires_at,
        now,
        now,
    )


def event_from_row(row: Any, data: Any) -> StoredEvent:
    """`id, run_id, seq, at, kind, data, rule, why[, hash]` (with `data` already decoded)."""
    return StoredEvent(
        id=row[0],
        run_id=row[1],
        seq=row[2],
        at=row[3],
        kind=row[4],
        data=data,
        rule=row[6],
        why=row[7],
        hash=row[8] if len(row) > 8 else None,
    )


def run_from_row(row: Any) -> RunRecord:
    """The columns of the `get_run`/`select_runs` queries."""
    summary = RunSummary(
        status=row[7],
        phase=row[8],
        cost_usd=row[9],
        tokens=row[10],
        warnings=row[11],
        updated_at=row[12],
        batch_parked=bool(row[17]),
        estimated=bool(row[18]),
    )
    return RunRecord(
        run_id=row[0],
        pipeline=row[1],
        topic=row[2],
        definition_hash=row[3],
        source=row[4],
        created_at=row[5],
        last_seq=row[6],
        summary=summary,
        lease_owner=row[13],
        lease_expires=row[14],
        lease_acquired_at=row[15],
        lease_renewed_at=row[16],
    )


def outbox_from_row(row: Any, payload: Any, **extra: Any) -> OutboxItem:
    """`key, sink, run_id, payload, created_at` (with `payload` already decoded)."""
    return OutboxItem(
        key=row[0], sink=row[1], run_id=row[2], payload=payload, created_at=row[4], **extra
    )
