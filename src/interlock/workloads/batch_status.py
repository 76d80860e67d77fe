"""What a batch's rows are doing, as every way in shows it: `interlock batch status`, `GET
/api/batches/ID`, the MCP tool `batch_status` and the dashboard's batch page.

A row's own status comes from the batch ledger (`core.batches.row_status`); a row in flight
is marked beyond it when its run's lease says more: a run that no live process drives is
`running (not driven)` (its driver stopped: Ctrl-C, kill -9), one whose calls wait on a
daily or team spend cap is `waiting: spend cap` (as the status.json of the orchestrator
driving it says). Under each row is why it stands there (`why`): what it waits for, or why
it did not deliver. One look at the ledger per row in flight (at most `--concurrency` +
`--batch-waiting` of them), none for the rest; and the first event of the first and of the
last row's run, which says whether the models had a configuration (`warnings`: rows that ran
on the offline stand-in produced placeholder text, which metrics and `compare` would score).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from interlock.core.batches import BatchProgress, RowStatus, fold, row_status
from interlock.core.tolerance import allowed_failures
from interlock.errors import InterlockError
from interlock.runtime.leases import driver_of

if TYPE_CHECKING:
    from pathlib import Path

    from interlock.api import Interlock
    from interlock.storage.base import Store
    from interlock.storage.batches import BatchRecord, BatchRow

FLYING = (RowStatus.RUNNING, RowStatus.BATCHED)  # row statuses whose run may be marked
DELIVERED = RowStatus.DELIVERED.value  # a row's `status` under which no `why` is said


class Mark(StrEnum):
    """Why a row in flight is shown other than its plain status."""

    NOT_DRIVEN = "not_driven"  # its run is running and no live process drives it
    SPEND_CAP = "spend_cap"  # its run's calls wait on a daily or team spend cap


@dataclass(frozen=True, kw_only=True)
class RowMark:
    """How a row in flight is shown instead of plain `running`."""

    mark: Mark
    status: str  # the row's status cell: `running (not driven)`, `waiting: spend cap`
    why: str | None = None  # the line under it: what its run waits for

    @property
    def driven(self) -> bool:
        """False: no live process drives its run."""
        return self.mark is not Mark.NOT_DRIVEN


@dataclass(frozen=True, kw_only=True)
class BatchStatus:
    """A batch, its rows, their fold and the marks of its rows in flight: the one read model
    of a batch's status that the CLI, the REST API and the MCP tools show."""

    record: BatchRecord
    rows: tuple[BatchRow, ...]
    progress: BatchProgress
    marks: Mapping[int, RowMark]  # row number -> its mark (rows in flight only)
    # Row number -> whether a live process drives its run, for the rows in flight whose run
    # is running (a waiting run needs no process until its wait ends).
    driven: Mapping[int, bool]
    # Rows wait to start and no live process drives the batch (its driver was killed, or
    # stopped with Ctrl-C): nothing starts them until the batch is resumed.
    stalled: bool = False
    # What a reader of the rows must know before trusting their outputs: rows that ran on
    # the offline stand-in (`offline_warning`).
    warnings: tuple[str, ...] = ()

    @property
    def undriven(self) -> int:
        """Rows in flight that no live process drives."""
        return sum(1 for m in self.marks.values() if not m.driven)

    @property
    def capped(self) -> dict[int, str]:
        """Rows in flight whose calls wait on a spend cap: row -> what it waits for."""
        return {n: m.why for n, m in sorted(self.marks.items()) if m.why}

    def undriven_line(self) -> str | None:
        """What to do about the rows that no live process drives: rows in flight, or rows
        waiting to start in a batch nothing drives (None: none)."""
        resume = f"'interlock batch resume {self.record.batch_id}'"
        if self.undriven:
            return (
                f"{self.undriven} row(s) in flight with no process driving them: "
                f"{resume} drives them on"
            )
        if self.stalled:
            return (
                f"{self.progress.waiting} row(s) waiting to start and no process drives the "
                f"batch: {resume} starts them"
            )
        return None

    def shown_status(self, row: BatchRow) -> str:
        """The row's status cell: its mark's, or its own status."""
        mark = self.marks.get(row.view.number)
        return row_status(row.view, self.progress).value if mark is None else mark.status

    def why(self, row: BatchRow) -> str | None:
        """The line under a row: what its run waits for, or why it did not deliver."""
        mark = self.marks.get(row.view.number)
        if mark is not None and mark.why:
            return mark.why
        failure = row.error or (row.result or {}).get("failure")
        if failure and row_status(row.view, self.progress) is not RowStatus.DELIVERED:
            return str(failure)
        return None

    def row_json(self, row: BatchRow) -> dict[str, Any]:
        """One row as JSON: `row_record`'s fields and what it is doing now (`shown_status`
        and `why` as the methods of those names say them, from the row's fields already
        folded: 10,000 rows are read in one request)."""
        shown = row_record(row, self.progress)
        number = row.view.number
        mark = self.marks.get(number)
        failure = shown["failure"]
        shown["shown_status"] = shown["status"] if mark is None else mark.status
        shown["mark"] = None if mark is None else mark.mark.value
        shown["driven"] = self.driven.get(number)
        shown["waiting"] = None if mark is None else mark.why
        if mark is not None and mark.why:
            shown["why"] = mark.why
        elif failure and shown["status"] != DELIVERED:
            shown["why"] = str(failure)
        else:
            shown["why"] = None
        return shown

    def as_json(self) -> dict[str, Any]:
        """The batch and its rows as JSON (`batch status --json`, `GET /api/batches/ID`,
        the MCP tool `batch_status`)."""
        return {
            **batch_summary(self.record, self.progress),
            "undriven": self.undriven,
            "stalled": self.stalled,
            "spend_capped": len(self.capped),
            "undriven_hint": self.undriven_line(),
            "warnings": list(self.warnings),
            "rows": [self.row_json(r) for r in self.rows],
        }


def row_record(row: BatchRow, progress: BatchProgress) -> dict[str, Any]:
    """One row as JSON (`batch status --json`, export, `GET /api/batches/ID`)."""
    view = row.view
    result = row.result or {}
    return {
        "row": view.number,
        "topic": row.topic,
        "inputs": row.inputs,
        "status": row_status(view, progress).value,
        "try": view.tries,
        "run_id": view.run_id,
        "cost_usd": round(view.cost_usd, 6),
        "tokens": view.tokens,
        "estimated": view.estimated,  # some try's tokens, so its cost, were estimated
        "values": result.get("values") or {},
        "failure": row.error or result.get("failure"),
    }


def batch_summary(record: BatchRecord, progress: BatchProgress) -> dict[str, Any]:
    """A batch's own fields, counts and spend as JSON (a line of `GET /api/batches`)."""
    breach = progress.breach
    return {
        "batch_id": record.batch_id,
        "pipeline": record.pipeline,
        "inputs_file": record.inputs_file,
        "created_at": record.created_at,
        "concurrency": record.concurrency,
        "max_cost_usd": record.max_cost_usd,
        "row_count": record.rows,
        "counts": {k.value: v for k, v in sorted(progress.counts.items())},
        "done": progress.done,  # delivered, failed or cancelled
        "running": progress.running,  # in flight, or about to be
        # Of those, waiting only for provider-batch answers: up to `batch_waiting` of them do
        # not count against `concurrency`.
        "in_provider_batch": progress.parked,
        "batch_waiting": record.batch_waiting,
        "waiting": progress.waiting,  # not started (for lack of room, or the budget)
        "cost_usd": round(progress.cost_usd, 6),
        "tokens": progress.tokens,
        "estimated": progress.estimated,  # the cost includes some row's estimated cost
        "cancelled": record.cancelled_at is not None,
        "settled": progress.settled,
        "tolerate": record.tolerate,  # failed rows allowed: a count, "P%" or None (no limit)
        "allowed_failures": (
            None if record.tolerate is None else allowed_failures(record.tolerate, record.rows)
        ),
        "failed": breach is not None,  # more rows failed than it tolerates: none start
        "failure": None if breach is None else f"batch {record.batch_id} failed: {breach.reason}",
        "experiment": record.experiment,  # its experiment's id (None: a batch of its own)
        "variant": record.variant,
    }


def batch_status(
    store: Store,
    live_dir: Callable[[str], Path],
    record: BatchRecord,
    rows: list[BatchRow],
    now: float,
) -> BatchStatus:
    """The batch's status: its rows folded, and each row in flight marked when its run is
    not driven (by `now`) or waits on a spend cap; `live_dir` gives a run's directory, where
    the orchestrator driving it writes its status.json."""
    progress = fold(
        [r.view for r in rows], max_cost_usd=record.max_cost_usd, tolerate=record.tolerate
    )
    marks, driven = _marks(store, live_dir, rows, progress, now)
    return BatchStatus(
        record=record,
        rows=tuple(rows),
        progress=progress,
        marks=marks,
        driven=driven,
        stalled=_stalled(record, progress, now),
        warnings=tuple(w for w in [offline_warning(store, rows)] if w is not None),
    )


def offline_warning(store: Store, rows: list[BatchRow]) -> str | None:
    """Said when the first or the last row that has a run ran with no model configuration
    at all: every model alias answered with the offline stand-in. Two rows are looked at,
    not every row, for a batch of 10,000: its rows start in the process that started or
    resumed it, and the first and the last started row stand for both."""
    started = [r for r in rows if r.view.run_id is not None]
    looked = {id(r): r for r in (started[:1] + started[-1:])}.values()
    offline = [r for r in looked if _unconfigured(_config_of(store, str(r.view.run_id)))]
    if not offline:
        return None
    which = ", ".join(f"row {r.view.number} ({r.view.run_id})" for r in offline)
    return (
        f"rows ran on the offline stand-in: no interlock.toml or model variable was found "
        f"when their runs started ({which}), so their outputs are placeholder text, and "
        "metrics, export and 'interlock compare' score that; configure the models in "
        "interlock.toml (or pass --config FILE) and run the batch again"
    )


def _config_of(store: Store, run_id: str) -> dict[str, Any] | None:
    """The configuration a row's run recorded (None: its run is pruned or not made yet)."""
    from interlock.runtime.run_config import recorded_config

    try:
        return recorded_config(store, run_id)
    except InterlockError:
        return None


def _unconfigured(config: dict[str, Any] | None) -> bool:
    """A run's recorded configuration names no file and no variable (an empty one: its
    pipeline calls no model)."""
    return config is not None and bool(config) and not config.get("files") and not config.get("env")


def _stalled(record: BatchRecord, progress: BatchProgress, now: float) -> bool:
    """Whether rows wait to start that only a driver of the batch would start, and none
    holds it. A cancelled batch, one over its budget or past its failures starts no more
    rows anyway (its own lines say so)."""
    if not progress.waiting or record.cancelled_at is not None:
        return False
    if progress.over_budget or progress.breach is not None:
        return False
    return record.driver is None or (record.driver_expires or 0.0) <= now


def read_status(app: Interlock, batch_id: str, now: float) -> BatchStatus:
    """The status of a recorded batch (`GET /api/batches/ID`, the MCP tool `batch_status`);
    an ended run's result not kept yet is folded from its history.

    Raises:
        BatchNotFound: no batch has that id.
    """
    from interlock.workloads.commands import read_batch

    record, rows = read_batch(app.store, batch_id, lambda: app)
    return batch_status(app.store, app.home.live_dir, record, rows, now)


def _marks(
    store: Store,
    live_dir: Callable[[str], Path],
    rows: list[BatchRow],
    progress: BatchProgress,
    now: float,
) -> tuple[dict[int, RowMark], dict[int, bool]]:
    # A row's own status is its folded status unless it waits (`row_status`): no need to
    # fold it with the batch's for the rows in flight.
    flying = [r for r in rows if r.view.run_id is not None and r.view.status in FLYING]
    marks: dict[int, RowMark] = {}
    driven: dict[int, bool] = {}
    if not flying:
        return marks, driven
    from interlock.runtime.projection import live_spend_wait, waiting_text

    for row in flying:
        number, run_id = row.view.number, str(row.view.run_id)
        try:
            run = store.get_run(run_id)
        except InterlockError:  # pruned, or not made yet: the row says what it knows
            continue
        if run.summary.status not in ("running", "waiting"):
            continue
        owner = driver_of(run, now)
        if owner is None:
            if run.summary.status == "running":  # its driver stopped (Ctrl-C, kill -9)
                status = row_status(row.view, progress).value
                marks[number] = RowMark(mark=Mark.NOT_DRIVEN, status=f"{status} (not driven)")
                driven[number] = False
            continue
        driven[number] = True
        found = live_spend_wait(live_dir(run_id), owner)
        if found is not None:
            marks[number] = RowMark(
                mark=Mark.SPEND_CAP,
                status="waiting: spend cap",
                why=waiting_text(found["waiting"]),
            )
    return marks, driven
