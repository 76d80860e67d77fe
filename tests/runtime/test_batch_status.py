"""The read model of a batch's status (`workloads.batch_status`) that `batch status`, the
REST API and the MCP tool share: a row in flight whose lease holder is gone is marked not
driven, one a live process holds is driven, the others are neither."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.runtime.conftest import WriteWorkflow
from tests.runtime.test_batches import WORKFLOW

from interlock import Interlock
from interlock.core.batches import RowInputs
from interlock.core.loader import Definition, load_workflow
from interlock.storage.batches import BatchRecord, batch_ledger
from interlock.workloads.batch_status import Mark, batch_status
from interlock.workloads.batches import record_batch


def gone_holder() -> str:
    """A lease holder (`host:pid:nonce`) of this host whose process has exited."""
    done = subprocess.Popen(["true"])
    done.wait()
    return f"{socket.gethostname()}:{done.pid}:gone"


def three_rows(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> tuple[Definition, BatchRecord, float]:
    """Batch `b` of three rows (topics t1-t3, two at once), recorded and not started."""
    path = write_workflow(WORKFLOW.replace("COUNT", str(tmp_path / "count.txt")))
    definition = load_workflow(path).get("p")
    given = [RowInputs(number=n, topic=f"t{n}", inputs={"n": n}) for n in (1, 2, 3)]
    now = time.time()
    record = record_batch(
        app, definition, given, batch_id="b", inputs_file="rows.csv", concurrency=2,
        max_cost_usd=None, now=now,
    )  # fmt: skip
    return definition, record, now


def test_rows_in_flight_are_marked_by_who_holds_their_runs(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """Of three rows, one whose run's lease is held by a process that exited is `running
    (not driven)` (mark `not_driven`, `driven` false, counted in `undriven` with the resume
    line), one whose run this process holds is `running` and driven, and one not started
    is neither; each row's JSON says so."""
    definition, record, now = three_rows(app, write_workflow, tmp_path)
    ledger = batch_ledger(app.store)
    assert ledger.claim_rows("b", [(1, 1, "b-r1"), (2, 1, "b-r2")], now) == [1, 2]
    for n in (1, 2):  # recorded and leased by this process, not driven yet
        app.start(definition, topic=f"t{n}", inputs={"n": n}, run_id=f"b-r{n}")
    held = app.store.get_run("b-r1").lease_owner
    app.store.acquire_lease("b-r1", gone_holder(), 60, now, take_over_from=held)

    shown = batch_status(app.store, app.home.live_dir, record, ledger.rows("b"), time.time())
    assert [m.mark for m in shown.marks.values()] == [Mark.NOT_DRIVEN]
    assert (shown.undriven, shown.capped) == (1, {})
    assert shown.undriven_line() == (
        "1 row(s) in flight with no process driving them: 'interlock batch resume b' drives them on"
    )
    body = shown.as_json()
    assert [(r["status"], r["shown_status"], r["mark"], r["driven"]) for r in body["rows"]] == [
        ("running", "running (not driven)", "not_driven", False),
        ("running", "running", None, True),
        ("waiting", "waiting", None, None),
    ]
    assert [r["why"] for r in body["rows"]] == [None, None, None]
    assert (body["undriven"], body["spend_capped"]) == (1, 0)


def test_rows_waiting_in_a_batch_no_process_drives_say_how_to_go_on(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """The batch's driver was killed after its rows in flight were taken over and delivered
    (by a server on the same ledger): the rows left wait with nothing to start them. The
    status says so with the resume command, and stops saying it while a driver holds the
    batch, or once the batch is cancelled."""
    _, record, now = three_rows(app, write_workflow, tmp_path)
    ledger = batch_ledger(app.store)
    ledger.hold_batch("b", gone_holder(), 30, now - 60)  # its lease ran out 30 s ago

    shown = batch_status(app.store, app.home.live_dir, ledger.get_batch("b"), ledger.rows("b"), now)
    assert shown.stalled and shown.undriven == 0
    assert shown.undriven_line() == (
        "3 row(s) waiting to start and no process drives the batch: "
        "'interlock batch resume b' starts them"
    )
    assert shown.as_json()["stalled"] is True

    ledger.hold_batch("b", "this-host:1:live", 30, now, take_over_from=ledger.get_batch("b").driver)
    held = batch_status(app.store, app.home.live_dir, ledger.get_batch("b"), ledger.rows("b"), now)
    assert not held.stalled and held.undriven_line() is None
    assert record.batch_id == "b"
