"""The REST API of batches: start one from rows posted as JSON, resume one, list them, show one.

A batch started here is driven by this server's orchestrator, beside its other runs: a feeder
task (`BatchRunner.feed`) starts its rows as `interlock batch` does, until nothing more runs
or the server stops. A server that stops leaves the batch resumable: `POST
/api/batches/{id}/resume` here, or `interlock batch resume ID`, goes on with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from interlock.server.auth import Principal
from interlock.server.deps import operator, reader, service
from interlock.server.errors import ApiError
from interlock.server.service import Service

router = APIRouter(prefix="/api")
log = logging.getLogger("interlock.server")
Svc = Annotated[Service, Depends(service)]
Reader = Annotated[Principal, Depends(reader)]
Starter = Annotated[Principal, Depends(operator("start"))]
MAX_ROWS = 100_000  # rows one request may post


class StartBatch(BaseModel):
    """A batch to start: a registered pipeline and its rows (objects of input -> value)."""

    pipeline: str = Field(min_length=1, max_length=200)
    rows: list[Any] = Field(min_length=1, max_length=MAX_ROWS)
    topic_field: str | None = Field(default=None, min_length=1, max_length=200)
    concurrency: int = Field(default=4, ge=1, le=10_000)
    max_cost_usd: float | None = Field(default=None, gt=0, le=1e12)
    batch_id: str | None = Field(default=None, min_length=1, max_length=48)


@router.post("/batches", status_code=201)
async def start_batch(svc: Svc, _: Starter, body: StartBatch) -> dict[str, Any]:
    """Check every row against the pipeline's inputs (a bad row refuses the whole batch,
    naming the rows, before anything is recorded), record the batch, and drive it here."""
    from interlock.core.batches import Row, check_rows, fold
    from interlock.storage.batches import BatchExists, batch_ledger
    from interlock.workloads.batches import batch_summary, new_batch_id, record_batch

    definition = svc.workflows.get(body.pipeline)
    rows = [Row(number=n, line=n, values=v) for n, v in enumerate(body.rows, start=1)]
    checked = check_rows(
        "rows", definition.name, definition.pipeline.inputs, rows, topic_field=body.topic_field
    )
    now = time.time()
    try:
        record = record_batch(
            svc.api,
            definition,
            checked,
            batch_id=body.batch_id or new_batch_id(definition.name, now),
            inputs_file="POST /api/batches",
            concurrency=body.concurrency,
            max_cost_usd=body.max_cost_usd,
            now=now,
        )
    except BatchExists as exc:
        raise ApiError(409, "batch_exists", exc.message) from None
    feed(svc, record.batch_id)
    progress = fold(batch_ledger(svc.store).views(record.batch_id), max_cost_usd=None)
    return batch_summary(record, progress)


@router.post("/batches/{batch_id}/resume", status_code=202)
async def resume_batch(svc: Svc, _: Starter, batch_id: str) -> dict[str, Any]:
    """Drive a batch here again (after this server, or the process that drove it, stopped)."""
    from interlock.storage.batches import BatchNotFound, batch_ledger

    try:
        batch_ledger(svc.store).get_batch(batch_id)
    except BatchNotFound as exc:
        raise ApiError(404, "batch_not_found", exc.message) from None
    feed(svc, batch_id)
    return {"batch_id": batch_id, "driven": True}


# Each service's feeders, by batch id (a test process runs several services).
_FEEDERS: weakref.WeakKeyDictionary[Service, dict[str, asyncio.Task[None]]] = (
    weakref.WeakKeyDictionary()
)


def feed(svc: Service, batch_id: str) -> None:
    """Drive the batch with this server's orchestrator until nothing more runs (or the
    server stops): one feeder per batch. Another live process driving it is refused (409)."""
    from interlock.workloads.batches import BatchRunner

    feeders = _FEEDERS.setdefault(svc, {})
    running = feeders.get(batch_id)
    if running is not None and not running.done():
        return
    runner = BatchRunner(svc.api, batch_id)
    runner.hold()  # raises LeaseHeld (409 busy) now, not in the task

    async def drive() -> None:
        try:
            await runner.feed(stop=svc.stop)
        except Exception as exc:  # said in the log; the batch stays resumable
            log.error(
                "batch %s: its driver stopped: %s",
                batch_id,
                exc,
                extra={"action": "batch_feeder_failed"},
            )
        finally:
            feeders.pop(batch_id, None)

    feeders[batch_id] = asyncio.create_task(drive())


@router.get("/batches")
async def list_batches(
    svc: Svc, _: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    """Batches, newest first, each with its counts by row status and its spend."""

    def read() -> list[dict[str, Any]]:
        from interlock.core.batches import fold
        from interlock.storage.batches import batch_ledger
        from interlock.workloads.batches import batch_summary

        ledger = batch_ledger(svc.store)
        return [
            batch_summary(b, fold(ledger.views(b.batch_id), max_cost_usd=b.max_cost_usd))
            for b in ledger.list_batches(limit)
        ]

    return await svc.reads.off_loop(read)


@router.get("/batches/{batch_id}")
async def batch_status(svc: Svc, _: Reader, batch_id: str) -> dict[str, Any]:
    """A batch and every row: inputs, status, try, run id, cost, tokens, extracted values."""

    def read() -> dict[str, Any]:
        from interlock.core.batches import RUN_ENDED
        from interlock.storage.batches import BatchNotFound, batch_ledger
        from interlock.workloads.batches import batch_definition, batch_record, row_results

        ledger = batch_ledger(svc.store)
        try:
            record = ledger.get_batch(batch_id)
        except BatchNotFound as exc:
            raise ApiError(404, "batch_not_found", exc.message) from None
        rows = ledger.rows(batch_id)
        if any(not r.view.kept and r.view.run_status in RUN_ENDED for r in rows):
            rows = row_results(svc.api, batch_definition(svc.api, record), rows)
        return batch_record(record, rows)

    return await svc.reads.off_loop(read)
