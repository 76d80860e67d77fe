"""The REST API of batches (read-only): `GET /api/batches` and `GET /api/batches/{id}`.

Batches are started and driven by `interlock batch` (see docs/batches.md); the server shows
them, as `interlock batches` and `interlock batch status --json` do.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from interlock.server.auth import Principal
from interlock.server.deps import reader, service
from interlock.server.errors import ApiError
from interlock.server.service import Service

router = APIRouter(prefix="/api")
Svc = Annotated[Service, Depends(service)]
Reader = Annotated[Principal, Depends(reader)]


@router.get("/batches")
async def list_batches(
    svc: Svc, _: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    """Batches, newest first, each with its counts by row status and its spend."""

    def read() -> list[dict[str, Any]]:
        from interlock.core.batches import fold
        from interlock.runtime.batches import batch_summary
        from interlock.storage.batches import batch_ledger

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
        from interlock.runtime.batches import batch_definition, batch_record, row_results
        from interlock.storage.batches import BatchNotFound, batch_ledger

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
