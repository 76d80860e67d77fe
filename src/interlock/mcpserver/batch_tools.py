"""The MCP tools of batches: list them, show one, start one from rows, retry its failed rows,
cancel it, compare batches.

Each does what its REST route (`interlock.server.batches`) and its `interlock batch` command
do, through the same `interlock.workloads` functions, with the route's scope and rate-limit
bucket; bad input is an error result carrying `{"error": {"code", "message"}}`. A batch
started or retried here is driven by the loop that drives runs here (the server's, or that of
`interlock mcp` while its client stays connected), and stays resumable after.
"""

from __future__ import annotations

import time
from typing import Any

from mcp.server.mcpserver import Context

from interlock.mcpserver.backend import Backend
from interlock.mcpserver.tools import Result, tool

MAX_SHOWN = 1000  # rows one batch_status call returns


class BatchTools:
    """The batch tools of one backend (registered beside `Tools` by `server.build`)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.api = backend.api

    @tool("read")
    async def list_batches(self, limit: int = 50, *, ctx: Context) -> Result:
        """Batches, newest first: pipeline, rows, counts by row status (delivered, failed,
        running, waiting...), spend, whether it is settled, and its experiment and variant."""
        from interlock.workloads.commands import batch_summaries

        limit = max(1, min(limit, 1000))
        found = await self.backend.reader().off_loop(lambda: batch_summaries(self.api.store, limit))
        return {"batches": found}

    @tool("read")
    async def batch_status(
        self,
        batch_id: str,
        status: str | None = None,
        offset: int = 0,
        limit: int = 100,
        *,
        ctx: Context,
    ) -> Result:
        """A batch's counts and spend, and its rows (inputs, status, try, run id, cost,
        tokens, extracted values, failure): those of `status` (delivered, failed, running,
        waiting, paused, cancelled) when given, `limit` of them (at most 1000) from
        `offset`. `rows_matching` counts them all. A row in flight says what it is doing:
        `shown_status` `running (not driven)` (no live process drives its run: `undriven`
        counts them, `undriven_hint` says how to go on) or `waiting: spend cap` (`waiting`
        names the cap), and `why` is the line under it (what it waits for, or its failure)."""
        from interlock.workloads.batch_status import read_status

        def read() -> Result:
            found = read_status(self.api, batch_id, time.time()).as_json()
            rows = [r for r in found["rows"] if status is None or r["status"] == status]
            start = max(0, offset)
            shown = rows[start : start + max(1, min(limit, MAX_SHOWN))]
            return {**found, "rows": shown, "rows_matching": len(rows), "offset": start}

        return await self.backend.reader().off_loop(read)

    @tool("operate", "start")
    async def start_batch(
        self,
        pipeline: str,
        rows: list[dict[str, Any]],
        topic_field: str | None = None,
        concurrency: int = 4,
        max_cost_usd: float | None = None,
        batch_id: str | None = None,
        tolerate: int | str | None = None,
        ignore_columns: list[str] | None = None,
        *,
        ctx: Context,
    ) -> Result:
        """Start a batch: one run of `pipeline` per row (an object of input -> value; the
        `topic` field, or `topic_field`, is its run's topic; fields in `ignore_columns` are
        left out), `concurrency` at a time, no row
        started once the spend reaches `max_cost_usd`, nor once more rows failed than
        `tolerate` allows (a count, or a percentage such as "10%"; the batch is then failed).
        Every row is checked first: a bad row refuses the whole batch, naming it. Follow it
        with batch_status."""
        from interlock.core.batches import fold
        from interlock.storage.batches import batch_ledger
        from interlock.workloads.batch_status import batch_summary
        from interlock.workloads.commands import check_start, start_rows
        from interlock.workloads.feeders import feed

        check_start(len(rows), concurrency, max_cost_usd)
        record = start_rows(
            self.api,
            self.backend.pipelines.get(pipeline),
            list(rows),
            source="MCP start_batch",
            topic_field=topic_field,
            concurrency=concurrency,
            max_cost_usd=max_cost_usd,
            batch_id=batch_id,
            now=time.time(),
            tolerate=tolerate,
            ignore_columns=ignore_columns or (),
        )
        feed(self.api, record.batch_id, self.backend.stop())
        progress = fold(batch_ledger(self.api.store).views(record.batch_id), max_cost_usd=None)
        return batch_summary(record, progress)

    @tool("operate", "start")
    async def retry_batch(self, batch_id: str, *, ctx: Context) -> Result:
        """Give every failed row of a batch its next try (a new run each), and drive the
        batch here (an experiment's variants with it)."""
        from interlock.workloads.commands import retry_failed
        from interlock.workloads.feeders import feed_group

        given = retry_failed(self.api.store, batch_id)
        driven = feed_group(self.api, batch_id, self.backend.stop())
        return {"batch_id": batch_id, "retried": given, "driven": True, "batch_ids": driven}

    @tool("operate", "cancel")
    async def cancel_batch(self, batch_id: str, *, ctx: Context) -> Result:
        """Cancel a batch (an experiment's id: every variant): rows not started are marked
        cancelled and never start, runs in flight are stopped."""
        from interlock.workloads.commands import cancel_batch
        from interlock.workloads.feeders import take_undriven

        by = self.backend.caller(ctx.request_context.request).subject
        done = cancel_batch(self.api, batch_id, time.time(), by=by)
        take_undriven(self.api, done.undriven)
        return {"batch_id": batch_id, **done.as_json()}

    @tool("read")
    async def compare_batches(
        self, batch_ids: list[str], by: str | None = None, limit: int = 10, *, ctx: Context
    ) -> Result:
        """Compare an experiment's variants (one id: its batch id) or two batches of the same
        rows: per variant rows delivered and failed, cost, tokens, p50/p95 seconds and each
        metric's mean, median or pass rate; then the `limit` rows where they differ most by
        metric `by` (default: the first numeric one), with the two runs to diff."""
        from interlock.workloads.commands import compare_batches

        limit = max(1, min(limit, 1000))
        return await self.backend.reader().off_loop(
            lambda: compare_batches(self.api, list(batch_ids), by=by, limit=limit)
        )
