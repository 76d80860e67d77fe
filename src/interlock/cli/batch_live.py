"""What a batch's rows in flight are doing, as `interlock runs` tells it of their runs: a
run no live process drives is `running (not driven)`, one whose calls wait on a spend cap is
`waiting: spend cap` (the status.json of the orchestrator driving it says so)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interlock.core.batches import BatchProgress
    from interlock.storage.base import Store
    from interlock.storage.batches import BatchRow


@dataclass(frozen=True, kw_only=True)
class LiveMark:
    """How a row in flight is shown instead of plain `running`."""

    status: str  # the row's status cell: `running (not driven)`, `waiting: spend cap`
    why: str | None = None  # the line under it: what its run waits for
    driven: bool = True  # False: no live process drives its run


def live_marks(
    store: Store, home: str | None, rows: list[BatchRow], progress: BatchProgress
) -> dict[int, LiveMark]:
    """Row number -> its mark, for the rows in flight whose run is not driven or waits on
    a spend cap; the others are as their row says. One look at the ledger per row in
    flight (at most `--concurrency` + `--batch-waiting` of them), none for the rest."""
    from interlock.cli.base import driver_of
    from interlock.core.batches import RowStatus, row_status
    from interlock.errors import InterlockError

    flying = [
        r
        for r in rows
        if r.view.run_id is not None
        and row_status(r.view, progress) in (RowStatus.RUNNING, RowStatus.BATCHED)
    ]
    if not flying:
        return {}
    from interlock.runtime.home import Home
    from interlock.runtime.projection import live_spend_wait, waiting_text

    live = Home.at(home)
    marks: dict[int, LiveMark] = {}
    for row in flying:
        run_id = str(row.view.run_id)
        try:
            record = store.get_run(run_id)
        except InterlockError:  # pruned, or not made yet: the row says what it knows
            continue
        if record.summary.status not in ("running", "waiting"):
            continue
        owner = driver_of(record)
        if owner is None:
            if record.summary.status == "running":  # its driver stopped (Ctrl-C, kill -9)
                status = row_status(row.view, progress).value
                marks[row.view.number] = LiveMark(status=f"{status} (not driven)", driven=False)
            continue
        found = live_spend_wait(live.live_dir(run_id), owner)
        if found is not None:
            marks[row.view.number] = LiveMark(
                status="waiting: spend cap", why=waiting_text(found["waiting"])
            )
    return marks


def undriven_line(batch_id: str, marks: dict[int, LiveMark]) -> str | None:
    """The line under the table for rows in flight that no live process drives."""
    undriven = sum(1 for m in marks.values() if not m.driven)
    if not undriven:
        return None
    return (
        f"{undriven} row(s) in flight with no process driving them: "
        f"'interlock batch resume {batch_id}' drives them on"
    )
