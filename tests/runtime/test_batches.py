"""The batch runner: rows start within the concurrency, claimed rows are made under their
recorded ids, a cancelled batch starts nothing more, results are kept for each row."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest
from tests.runtime.conftest import WriteWorkflow

from interlock import Interlock
from interlock.core.batches import RowInputs, RowState, RowStatus
from interlock.core.loader import load_workflow
from interlock.storage.batches import batch_ledger
from interlock.workloads.batches import BatchRunner, Snapshot, record_batch

WORKFLOW = """\
p:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: work
      workers:
        - role: w
          final: true
          command:
            [sh, -c, 'echo "$1" >> "$2"; echo "Score: $1" > "$3"', sh, "{{ n }}", COUNT, "{output}"]
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def start(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path, rows: int, **limits: object
) -> str:
    """Record a batch of `rows` rows of WORKFLOW (each appends its number to a file)."""
    path = write_workflow(WORKFLOW.replace("COUNT", str(tmp_path / "count.txt")))
    definition = load_workflow(path).get("p")
    given = [RowInputs(number=n, topic=f"t{n}", inputs={"n": n}) for n in range(1, rows + 1)]
    record_batch(
        app,
        definition,
        given,
        batch_id="b",
        inputs_file="rows.csv",
        concurrency=int(limits.get("concurrency", 2)),  # type: ignore[call-overload]
        max_cost_usd=None,
        now=time.time(),
    )
    return "b"


def executions(tmp_path: Path) -> list[int]:
    """The rows whose command ran, one entry per execution, sorted."""
    path = tmp_path / "count.txt"
    return sorted(int(line) for line in path.read_text().split()) if path.exists() else []


def test_every_row_runs_once_within_the_concurrency(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """Six rows, two at a time: each runs once, never more than two in flight, values kept."""
    batch_id = start(app, write_workflow, tmp_path, 6, concurrency=2)
    seen: list[Snapshot] = []
    last = asyncio.run(BatchRunner(app, batch_id, on_progress=seen.append, poll=0.05).run())
    assert last.progress.counts == {RowStatus.DELIVERED: 6}
    assert max(s.progress.running for s in seen) == 2
    assert executions(tmp_path) == [1, 2, 3, 4, 5, 6]
    rows = batch_ledger(app.store).rows(batch_id)
    assert [r.result and r.result["values"] for r in rows] == [
        {"score": float(n)} for n in range(1, 7)
    ]
    assert [r.view.run_id for r in rows] == [f"b-r{n}" for n in range(1, 7)]
    assert batch_ledger(app.store).get_batch(batch_id).driver is None  # handed back


def test_a_row_claimed_before_a_crash_is_made_under_its_recorded_id(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """A row whose run id was recorded but whose run was never made (the driver died in
    between) gets exactly that run from the next runner, and runs once."""
    batch_id = start(app, write_workflow, tmp_path, 3)
    ledger = batch_ledger(app.store)
    assert ledger.claim_rows(batch_id, [(2, 1, "b-r2")], time.time()) == [2]
    assert ledger.rows(batch_id)[1].view.status is RowStatus.STARTING
    last = asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    assert last.progress.counts == {RowStatus.DELIVERED: 3}
    assert executions(tmp_path) == [1, 2, 3]
    assert app.store.get_run("b-r2").summary.status == "delivered"


def test_a_cancelled_batch_starts_no_more_rows(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """After `cancel_batch` no row starts; the rows not started say cancelled."""
    batch_id = start(app, write_workflow, tmp_path, 4)
    ledger = batch_ledger(app.store)
    assert ledger.cancel_batch(batch_id, time.time()) == 4
    last = asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    assert last.progress.counts == {RowStatus.CANCELLED: 4}
    assert executions(tmp_path) == []
    assert {r.view.state for r in ledger.rows(batch_id)} == {RowState.CANCELLED}


def test_a_failed_row_runs_again_as_its_next_try(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """A row retried after its run failed gets a new run (`-t2`); the first stays as it was."""
    batch_id = start(app, write_workflow, tmp_path, 2)
    ledger = batch_ledger(app.store)
    asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    first = ledger.rows(batch_id)[0].view
    # A delivered row is not failed: retry only moves rows whose try ended, as asked.
    assert ledger.retry_rows(batch_id, [first]) == 1
    last = asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    assert last.progress.counts == {RowStatus.DELIVERED: 2}
    row = ledger.rows(batch_id)[0].view
    assert (row.tries, row.run_id) == (2, "b-r1-t2")
    assert app.store.get_run("b-r1").summary.status == "delivered"
    assert executions(tmp_path) == [1, 1, 2]


def test_the_budget_holds_rows_until_it_is_raised(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """A batch whose spend reached its budget starts no row ('paused: batch budget'); raised,
    the rows start. The spend is that of every try (here a first try that cost $1)."""
    batch_id = start(app, write_workflow, tmp_path, 3)
    ledger = batch_ledger(app.store)
    ledger.set_limits(batch_id, 2, 0.5, 0)
    spent = replace(ledger.rows(batch_id)[0].view, state=RowState.STARTED, cost_usd=1.0)
    ledger.claim_rows(batch_id, [(1, 1, "b-r1")], time.time())
    assert ledger.retry_rows(batch_id, [spent]) == 1  # row 1's first try spent $1
    held = asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    assert held.progress.counts == {RowStatus.BUDGET: 3}
    assert executions(tmp_path) == []
    ledger.set_limits(batch_id, 2, 5.0, 0)
    done = asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    assert done.progress.counts == {RowStatus.DELIVERED: 3}
    assert executions(tmp_path) == [1, 2, 3]
    assert ledger.rows(batch_id)[0].view.run_id == "b-r1-t2"


def test_a_batch_driven_by_a_live_process_is_not_driven_twice(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """While another live process holds the batch, a second runner is refused (exit 4)."""
    import os
    import socket

    from interlock.errors import LeaseHeld

    batch_id = start(app, write_workflow, tmp_path, 2)
    alive = f"{socket.gethostname()}:{os.getpid()}:other"  # this very process: alive
    batch_ledger(app.store).hold_batch(batch_id, alive, 60.0, time.time())
    with pytest.raises(LeaseHeld, match="being driven by"):
        asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    assert executions(tmp_path) == []
