"""What every way in (`interlock batch`, the REST API, the MCP tools) does to a recorded
batch: read it, give its failed rows a new try, cancel it, export its rows, compare batches.

Each function records or reads through the batch ledger and says what it did; driving what
follows (the rows retried, the runs left with no driver) is the caller's: the CLI drives
them in its own process, a server with its orchestrator.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interlock.core.batches import MAX_CONCURRENCY
from interlock.errors import UsageError

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.core.batches import RowView
    from interlock.core.loader import Definition
    from interlock.runtime.home import Home
    from interlock.storage.base import Store
    from interlock.storage.batches import BatchRecord, BatchRow

MAX_ROWS = 100_000  # rows one start may post
FIXED = ("row", "status", "run_id", "try", "cost_usd", "tokens", "topic")  # CSV's first columns
FORMATS = ("jsonl", "csv")


def read_batch(
    store: Store, batch_id: str, app: Callable[[], Interlock]
) -> tuple[BatchRecord, list[BatchRow]]:
    """A batch and its rows; `app` (the engine) is opened only when an ended run's result
    was not kept yet, to fold it from the run's history.

    Raises:
        BatchNotFound: no batch has that id.
    """
    from interlock.core.batches import RUN_ENDED
    from interlock.storage.batches import batch_ledger

    ledger = batch_ledger(store)
    record = ledger.get_batch(batch_id)
    rows = ledger.rows(batch_id)
    if any(not r.view.kept and r.view.run_status in RUN_ENDED for r in rows):
        from interlock.workloads.batches import batch_definition, row_results

        engine = app()
        rows = row_results(engine, batch_definition(engine, record), rows)
    return record, rows


def batch_summaries(store: Store, limit: int) -> list[dict[str, Any]]:
    """Batches, newest first, each with its counts by row status and its spend."""
    from interlock.core.batches import fold
    from interlock.storage.batches import batch_ledger
    from interlock.workloads.batch_status import batch_summary

    ledger = batch_ledger(store)
    return [
        batch_summary(
            b, fold(ledger.views(b.batch_id), max_cost_usd=b.max_cost_usd, tolerate=b.tolerate)
        )
        for b in ledger.list_batches(limit)
    ]


def check_start(rows: int, concurrency: int, max_cost_usd: float | None) -> None:
    """Refuse limits a batch cannot start with (the API's body model checks the same)."""
    if not 1 <= rows <= MAX_ROWS:
        raise UsageError(f"rows: give 1 to {MAX_ROWS:,} rows (got {rows:,})")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise UsageError(f"concurrency: give 1 to {MAX_CONCURRENCY:,} (got {concurrency})")
    if max_cost_usd is not None and not 0 < max_cost_usd <= 1e12:
        raise UsageError(f"max_cost_usd: give a budget above 0 (got {max_cost_usd})")


def start_rows(
    app: Interlock,
    definition: Definition,
    values: list[Any],
    *,
    source: str,
    topic_field: str | None,
    concurrency: int,
    max_cost_usd: float | None,
    batch_id: str | None,
    now: float,
    tolerate: object = None,
    ignore_columns: Sequence[str] = (),
) -> BatchRecord:
    """Check rows posted as JSON (each an object of input -> value) against the pipeline's
    inputs, then record the batch (the API's and the MCP tool's start; `source` names where
    the rows came from). A bad row refuses the whole batch, naming the rows, before anything
    is recorded. `tolerate`: failed rows allowed, as posted (a count, or "P%" of the rows);
    `ignore_columns`: fields left out of every row (an id, notes).

    Raises:
        BatchInputError: a row cannot run the pipeline, or `tolerate` is not a tolerance.
        BatchExists: `batch_id` is taken.
    """
    from interlock.core.batches import Row, batch_tolerance, check_rows
    from interlock.core.waits import start_time_problems
    from interlock.workloads.batches import new_batch_id, record_batch

    tolerance = batch_tolerance(tolerate, "tolerate")
    rows = [Row(number=n, line=n, values=v) for n, v in enumerate(values, start=1)]
    pipeline = definition.pipeline
    checked = check_rows(
        "rows",
        definition.name,
        pipeline.inputs,
        rows,
        topic_field=topic_field,
        also=lambda topic, inputs: start_time_problems(pipeline, topic, inputs),
        ignored=ignore_columns,
    )
    return record_batch(
        app,
        definition,
        checked,
        batch_id=batch_id or new_batch_id(definition.name, now),
        inputs_file=source,
        concurrency=concurrency,
        max_cost_usd=max_cost_usd,
        now=now,
        tolerate=tolerance,
    )


def retry_failed(store: Store, batch_id: str) -> int:
    """Give every failed row of the batch its next try (a new run each, made by whoever
    drives the batch next); how many were given one.

    Raises:
        BatchNotFound: no batch has that id.
    """
    from interlock.core.batches import RowStatus
    from interlock.storage.batches import batch_ledger

    ledger = batch_ledger(store)
    ledger.get_batch(batch_id)
    failing = [r.view for r in ledger.rows(batch_id) if r.view.status is RowStatus.FAILED]
    return ledger.retry_rows(batch_id, failing)


def retry_cancelled(store: Store, batch_id: str) -> int:
    """Undo the cancel of a batch (an experiment's id: every variant's): its rows cancelled
    before they started wait again, and each row whose run was cancelled gets its next try
    (a new run, made by whoever drives the batch next); how many rows.

    Raises:
        BatchNotFound: no batch has that id.
        UsageError: the batch was not cancelled (nothing to undo).
    """
    from interlock.core.batches import RowStatus
    from interlock.storage.batches import batch_ledger

    ledger = batch_ledger(store)
    record = ledger.get_batch(batch_id)
    if record.cancelled_at is None:
        raise UsageError(
            f"batch {batch_id} was not cancelled: --cancelled gives a cancelled batch's rows "
            f"their runs again; 'interlock batch resume {batch_id}' goes on with this one"
        )
    group = [batch_id]
    if record.experiment == batch_id:
        group = [b.batch_id for b in ledger.experiment_batches(batch_id)]
    given = 0
    for one in group:
        stopped = [
            r.view
            for r in ledger.rows(one)
            if r.view.status is RowStatus.CANCELLED and r.view.run_id is not None
        ]
        given += ledger.reopen_batch(one, stopped)
    return given


def cancelled_message(record: BatchRecord, command: str) -> str:
    """Why `command` (resume, retry --failed) does not go on with a cancelled batch, and
    what does."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.cancelled_at or 0.0))
    return (
        f"batch {record.batch_id} was cancelled ({when}): '{command}' does not start its rows "
        f"again. 'interlock batch retry {record.batch_id} --cancelled' gives its cancelled rows "
        "their runs again and goes on; a new batch ('interlock batch FILE PIPELINE --inputs "
        "FILE') runs every row afresh"
    )


class BatchCancelled(UsageError):
    """A command that would go on with a batch that was cancelled (exit 2, wrong state)."""


@dataclass(frozen=True, kw_only=True)
class Cancelled:
    """What cancelling a batch did."""

    batch_ids: tuple[str, ...]  # the batch, or an experiment's every variant
    unstarted: int  # rows marked cancelled before they started
    stopped: tuple[str, ...]  # runs in flight asked to cancel
    undriven: tuple[str, ...]  # of those, the runs no live process drives: the caller drives them
    # Every row had ended: nothing was cancelled, nothing recorded (the batch is not marked).
    finished: bool = False

    def as_json(self) -> dict[str, Any]:
        """The answer of the API and the MCP tool."""
        return {
            "batch_ids": list(self.batch_ids),
            "unstarted": self.unstarted,
            "stopped": list(self.stopped),
            "finished": self.finished,
        }


def cancel_batch(app: Interlock, batch_id: str, now: float, by: str | None = None) -> Cancelled:
    """Cancel a batch: rows not started are marked cancelled, runs in flight are asked to
    cancel (an experiment's id: every variant's). A batch whose every row has ended is left
    as it is (`finished`): there is nothing to cancel.

    Raises:
        BatchNotFound: no batch has that id.
    """
    from interlock.core.batches import RUN_ENDED
    from interlock.errors import InterlockError
    from interlock.runtime.processes import holder_is_dead
    from interlock.storage.batches import batch_ledger

    ledger = batch_ledger(app.store)
    record = ledger.get_batch(batch_id)
    # The experiment's id (its base batch's) cancels every variant with it.
    group = [batch_id]
    if record.experiment == batch_id:
        group = [b.batch_id for b in ledger.experiment_batches(batch_id)]
    if record.cancelled_at is None and all(_ended(ledger.views(b)) for b in group):
        return Cancelled(
            batch_ids=tuple(group), unstarted=0, stopped=(), undriven=(), finished=True
        )
    unstarted = sum(ledger.cancel_batch(b, now) for b in group)
    flying = [
        r.view.run_id
        for b in group
        for r in ledger.rows(b)
        if r.view.run_id is not None and r.view.run_status not in (*RUN_ENDED, None)
    ]
    stopped, undriven = [], []
    for run_id in flying:
        try:
            app.cancel(run_id, f"batch {batch_id} cancelled", by=by)
        except InterlockError:  # it ended meanwhile
            continue
        stopped.append(run_id)
        run = app.store.get_run(run_id)
        owner = run.lease_owner
        if not owner or (run.lease_expires or 0) <= now or holder_is_dead(owner):
            undriven.append(run_id)
    return Cancelled(
        batch_ids=tuple(group),
        unstarted=unstarted,
        stopped=tuple(stopped),
        undriven=tuple(undriven),
    )


def _ended(views: list[RowView]) -> bool:
    """Every row's run ended (delivered, failed or cancelled): nothing waits or runs."""
    from interlock.core.batches import RowStatus

    ended = (RowStatus.DELIVERED, RowStatus.FAILED, RowStatus.CANCELLED)
    return all(v.status in ended for v in views)


def export_records(
    app: Interlock, record: BatchRecord, rows: list[BatchRow]
) -> list[dict[str, Any]]:
    """Every row as `batch export` writes it: inputs, status, try, the text of its final.md,
    extracted values, metrics (when the pipeline declares `metrics:`), cost, tokens, run."""
    from interlock.core.batches import fold
    from interlock.workloads.batch_status import row_record
    from interlock.workloads.batches import batch_definition
    from interlock.workloads.experiments import outcomes

    progress = fold(
        [r.view for r in rows], max_cost_usd=record.max_cost_usd, tolerate=record.tolerate
    )
    definition = batch_definition(app, record)
    metrics = None
    if definition.pipeline.metrics:  # a row not delivered has none
        metrics = {o.number: dict(o.metrics) for o in outcomes(definition, rows)}
    records = []
    for row in rows:
        body = row_record(row, progress)
        body["output"] = final_text(app.home, row)
        if metrics is not None:
            body["metrics"] = metrics[row.view.number]
        records.append(body)
    return records


def final_text(home: Home, row: BatchRow) -> str | None:
    """The text of the final.md a row's run delivered (None: none, or not on this disk)."""
    run_id = row.view.run_id
    if run_id is None or row.view.run_status != "delivered":
        return None
    for folder in (home.archive_dir(run_id), home.live_dir(run_id)):
        path = folder / "final.md"
        if path.is_file():
            return path.read_text(encoding="utf-8", errors="replace")
    return None


def export_format(name: str) -> str | None:
    """`jsonl` or `csv` by a file name's ending (None: neither)."""
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    return "csv" if lower.endswith(".csv") else None


def export_text(kind: str, records: list[dict[str, Any]]) -> str:
    """The records as JSON lines (`jsonl`) or CSV (`csv`)."""
    if kind == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records)
    if kind == "csv":
        return csv_text(records)
    raise UsageError(f"export format {kind!r}: give jsonl or csv")


def csv_text(records: list[dict[str, Any]]) -> str:
    """One row a record: the fixed columns, then `input.NAME`, `value.NAME` and `metric.NAME`
    columns for every input, extracted value and metric any row has, then `failure` and
    `output`."""
    inputs = list(dict.fromkeys(k for r in records for k in r.get("inputs", {})))
    values = list(dict.fromkeys(k for r in records for k in r.get("values", {})))
    metrics = list(dict.fromkeys(k for r in records for k in r.get("metrics", {})))
    header = [
        *FIXED,
        *(f"input.{k}" for k in inputs),
        *(f"value.{k}" for k in values),
        *(f"metric.{k}" for k in metrics),
        "failure",
        "output",
    ]
    lines: list[list[Any]] = [header]
    for r in records:
        lines.append(
            [
                *(r.get(k) for k in FIXED),
                *(_cell(r["inputs"].get(k)) for k in inputs),
                *(_cell(r["values"].get(k)) for k in values),
                *(_cell(r.get("metrics", {}).get(k)) for k in metrics),
                r.get("failure") or "",
                r.get("output") or "",
            ]
        )
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(lines)
    return buffer.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value


def compare_batches(
    app: Interlock, batch_ids: list[str], *, by: str | None, limit: int
) -> dict[str, Any]:
    """The comparison of an experiment's variants (one id) or of two batches of the same
    rows, as `interlock compare --json` gives it.

    Raises:
        BatchNotFound: an id names no batch.
        UsageError: more than two ids, or one that is no experiment, or `by` no metric.
    """
    from interlock.workloads.batches import batch_definition
    from interlock.workloads.experiments import comparison, experiment_of, outcomes

    if not batch_ids or len(batch_ids) > 2:
        raise UsageError("compare takes one experiment (its batch id) or two batches")
    read = [read_batch(app.store, b, lambda: app) for b in batch_ids]  # an unknown id: named
    if len(batch_ids) == 1:
        group = experiment_of(app, batch_ids[0])
        if len(group) < 2:
            raise UsageError(
                f"batch {batch_ids[0]} is no experiment (it has no variants): compare two "
                f"batches of the same rows ('interlock compare {batch_ids[0]} OTHER'), or start "
                "one with --variant NAME=FILE"
            )
        read = [read_batch(app.store, b.batch_id, lambda: app) for b in group]
    variants = []
    for record, rows in read:
        definition = batch_definition(app, record)
        name = record.variant or record.batch_id
        variants.append((name, record, definition, outcomes(definition, rows)))
    return comparison(variants, by=by, limit=limit)
