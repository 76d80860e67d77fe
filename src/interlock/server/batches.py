"""The REST API of batches: start one from rows posted as JSON, resume, retry or cancel one,
list them, show one, export its rows, compare batches.

A batch started here is driven by this server's orchestrator, beside its other runs: a feeder
task (`interlock.workloads.feeders`) starts its rows as `interlock batch` does, until nothing
more runs or the server stops. A server that stops leaves the batch resumable: `POST
/api/batches/{id}/resume` here, or `interlock batch resume ID`, goes on with it. Every route
does what its `interlock batch` command does, through the same `interlock.workloads`
functions.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, Field

from interlock.core.batches import MAX_CONCURRENCY
from interlock.server.auth import Principal
from interlock.server.deps import operator, reader, service
from interlock.server.service import Service
from interlock.workloads.commands import MAX_ROWS

router = APIRouter(prefix="/api")
log = logging.getLogger("interlock.server")
Svc = Annotated[Service, Depends(service)]
Reader = Annotated[Principal, Depends(reader)]
Starter = Annotated[Principal, Depends(operator("start"))]
Canceller = Annotated[Principal, Depends(operator("cancel"))]
Format = Literal["jsonl", "csv"]


class StartBatch(BaseModel):
    """A batch to start: a registered pipeline and its rows (objects of input -> value)."""

    pipeline: str = Field(min_length=1, max_length=200)
    rows: list[Any] = Field(min_length=1, max_length=MAX_ROWS)
    topic_field: str | None = Field(default=None, min_length=1, max_length=200)
    # Fields left out of every row (an id, notes), as --ignore-column.
    ignore_columns: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=1000
    )
    concurrency: int = Field(default=4, ge=1, le=MAX_CONCURRENCY)
    max_cost_usd: float | None = Field(default=None, gt=0, le=1e12)
    batch_id: str | None = Field(default=None, min_length=1, max_length=48)
    # Failed rows allowed before no more start: a count (5) or a percentage ("10%").
    tolerate: int | str | None = Field(default=None)


@router.post("/batches", status_code=201)
async def start_batch(svc: Svc, _: Starter, body: StartBatch) -> dict[str, Any]:
    """Check every row against the pipeline's inputs (a bad row refuses the whole batch,
    naming the rows, before anything is recorded), record the batch, and drive it here."""
    from interlock.core.batches import fold
    from interlock.storage.batches import batch_ledger
    from interlock.workloads.batch_status import batch_summary
    from interlock.workloads.commands import start_rows

    record = start_rows(
        svc.api,
        svc.workflows.get(body.pipeline),
        body.rows,
        source="POST /api/batches",
        topic_field=body.topic_field,
        concurrency=body.concurrency,
        max_cost_usd=body.max_cost_usd,
        batch_id=body.batch_id,
        now=time.time(),
        tolerate=body.tolerate,
        ignore_columns=body.ignore_columns,
    )
    feed(svc, record.batch_id)
    progress = fold(batch_ledger(svc.store).views(record.batch_id), max_cost_usd=None)
    return batch_summary(record, progress)


@router.post("/batches/{batch_id}/resume", status_code=202)
async def resume_batch(svc: Svc, _: Starter, batch_id: str) -> dict[str, Any]:
    """Drive a batch here again (after this server, or the process that drove it, stopped);
    an experiment's every variant with it."""
    driven = feed(svc, batch_id)
    return {"batch_id": batch_id, "driven": True, "batch_ids": driven}


@router.post("/batches/{batch_id}/retry", status_code=202)
async def retry_batch(svc: Svc, _: Starter, batch_id: str) -> dict[str, Any]:
    """Give every failed row its next try (a new run each) and drive the batch here."""
    from interlock.workloads.commands import retry_failed

    given = retry_failed(svc.store, batch_id)
    driven = feed(svc, batch_id)
    return {"batch_id": batch_id, "retried": given, "driven": True, "batch_ids": driven}


@router.post("/batches/{batch_id}/cancel")
async def cancel_batch(svc: Svc, who: Canceller, batch_id: str) -> dict[str, Any]:
    """Cancel a batch (an experiment's id: every variant): rows not started are marked
    cancelled, runs in flight are stopped."""
    from interlock.workloads.commands import cancel_batch as cancel
    from interlock.workloads.feeders import take_undriven

    done = cancel(svc.api, batch_id, time.time(), by=who.subject)
    take_undriven(svc.api, done.undriven)  # nobody drives them: this server records it
    svc.orchestrator.look_now()
    return {"batch_id": batch_id, **done.as_json()}


def feed(svc: Service, batch_id: str) -> list[str]:
    """Drive the batch (and an experiment's variants) with this server's orchestrator until
    nothing more runs, or the server stops; the batch ids driven. Another live process
    driving one is refused (409 busy)."""
    from interlock.workloads.feeders import feed_group

    return feed_group(svc.api, batch_id, svc.stop)


@router.get("/batches")
async def list_batches(
    svc: Svc, _: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    """Batches, newest first, each with its counts by row status and its spend."""
    from interlock.workloads.commands import batch_summaries

    return await svc.reads.off_loop(lambda: batch_summaries(svc.store, limit))


@router.get("/batches/{batch_id}")
async def batch_status(svc: Svc, _: Reader, batch_id: str) -> dict[str, Any]:
    """A batch and every row: inputs, status, try, run id, cost, tokens, extracted values,
    and what its rows in flight are doing (not driven, waiting on a spend cap) with the line
    under each row (`why`), as `interlock batch status` shows them."""

    def read() -> dict[str, Any]:
        from interlock.workloads.batch_status import read_status

        return read_status(svc.api, batch_id, time.time()).as_json()

    return await svc.reads.off_loop(read)


@router.get("/batches/{batch_id}/export", response_model=None)
async def export_batch(
    svc: Svc, _: Reader, batch_id: str, format: Annotated[Format, Query()] = "jsonl"
) -> Response:
    """Every row as `interlock batch export` writes it (inputs, status, try, final output,
    extracted values, metrics, cost, tokens, run), as a JSONL or CSV download."""

    def read() -> str:
        from interlock.workloads.commands import export_records, export_text, read_batch

        record, rows = read_batch(svc.store, batch_id, lambda: svc.api)
        return export_text(format, export_records(svc.api, record, rows))

    text = await svc.reads.off_loop(read)
    media = "application/x-ndjson" if format == "jsonl" else "text/csv"
    disposition = f'attachment; filename="{batch_id}.{format}"'
    return Response(
        text.encode("utf-8"),
        media_type=f"{media}; charset=utf-8",
        headers={"Content-Disposition": disposition},
    )


@router.get("/compare")
async def compare(
    svc: Svc,
    _: Reader,
    batch: Annotated[list[str], Query()],
    by: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
) -> dict[str, Any]:
    """An experiment's variants (`?batch=ID`) or two batches of the same rows
    (`?batch=B1&batch=B2`) side by side, as `interlock compare --json` gives them."""
    from interlock.workloads.commands import compare_batches

    return await svc.reads.off_loop(lambda: compare_batches(svc.api, batch, by=by, limit=limit))
