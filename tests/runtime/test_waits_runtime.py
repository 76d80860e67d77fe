"""Signals and durable sleep end to end: the Python API, the SQLite ledger, real commands."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from interlock import Interlock, RunStatus
from interlock.errors import InvalidSignal, UsageError
from interlock.runtime.orchestrator import Settings

from .conftest import WriteWorkflow

WRITE_ARG = "import os, sys; open(os.environ['INTERLOCK_OUTPUT'], 'w').write(sys.argv[1])"
PY = sys.executable

SIGNALLED = f"""
shipping:
  phases:
    - id: prepare
      workers:
        - {{role: packer, command: ['{PY}', '-c', "{WRITE_ARG}", 'packed']}}
    - id: ship
      wait_for:
        signal: payment
        timeout: 1h
        schema:
          type: object
          required: [amount]
          properties: {{amount: {{type: number}}}}
      next:
        - {{if: "signals.payment == null", goto: cancelled}}
      workers:
        - role: shipper
          command: ['{PY}', '-c', "{WRITE_ARG}", 'paid {{{{ signals.payment.amount }}}}']
    - id: cancelled
      workers:
        - {{role: closer, final: true, command: ['{PY}', '-c', "{WRITE_ARG}", 'closed']}}
"""


def signalled(app: Interlock, write_workflow: WriteWorkflow) -> str:
    """A new run of the shipping pipeline (not yet driven)."""
    return app.start(write_workflow(SIGNALLED), "shipping", topic="order 7")


def test_signal_sent_before_the_wait_is_kept_and_its_data_reaches_the_task(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A signal sent before the run waits is recorded, taken by the wait, and templated in."""
    run_id = signalled(app, write_workflow)
    receipt = app.signal(run_id, "payment", {"amount": 12}, key="pay-7")
    assert not receipt.duplicate and "sent to run" in receipt.note
    state = app.drive(run_id)
    assert state.status is RunStatus.DELIVERED
    assert (app.run_dir(run_id) / "shipper.md").read_text() == "paid 12"
    kinds = [e.kind for e in app.events(run_id)]
    assert kinds.index("signal_received") < kinds.index("wait_started") < kinds.index("wait_ended")
    again = app.signal
    with pytest.raises(UsageError, match="can be sent to a run that is running, waiting or paused"):
        again(run_id, "payment", {"amount": 12}, key="pay-8")


def test_a_waiting_run_holds_nothing_and_wakes_when_the_signal_is_posted(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """The driving loop waits without a task; a signal posted meanwhile is recorded at once."""
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=5.0, lease_ttl=15))
    try:
        run_id = signalled(app, write_workflow)
        seen: dict[str, float] = {}

        async def send_when_waiting() -> None:
            while app.store.get_run(run_id).summary.status != "waiting":
                await asyncio.sleep(0.02)
            driver = app.orchestrator.drivers[run_id]
            assert driver.state.in_flight() == [] and driver.workers.handles == {}
            view = app.status(run_id)
            assert view["status"] == "waiting" and view["waiting"]["signal"] == "payment"
            seen["sent"] = time.monotonic()
            app.signal(run_id, "payment", {"amount": 3})
            while not any(e.kind == "wait_ended" for e in app.events(run_id)):
                await asyncio.sleep(0.01)
            seen["recorded"] = time.monotonic()

        async def both() -> None:
            sender = asyncio.create_task(send_when_waiting())
            await app.drive_async(run_id)
            await sender

        asyncio.run(both())
        assert app.state(run_id).status is RunStatus.DELIVERED
        # The heartbeat is 5 s: only the post's nudge explains a prompt recording.
        assert seen["recorded"] - seen["sent"] < 2.0
    finally:
        app.close()


def test_the_signal_types_are_public() -> None:
    """`SignalReceipt` and `InvalidSignal` are part of the package's public surface."""
    import interlock

    assert {"SignalReceipt", "InvalidSignal"} <= set(interlock.__all__)
    assert interlock.InvalidSignal is InvalidSignal


def test_bad_signals_are_refused_with_the_fix(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Unknown names, data off the schema and repeated keys are refused or ignored, saying so."""
    run_id = signalled(app, write_workflow)
    with pytest.raises(UsageError, match="waits for no signal 'paid'; it waits for: payment"):
        app.signal(run_id, "paid", {"amount": 1})
    with pytest.raises(InvalidSignal, match=r"schema of phase 'ship'.*amount"):
        app.signal(run_id, "payment", {"amount": "lots"})
    assert not app.signal(run_id, "payment", {"amount": 1}, key="k").duplicate
    second = app.signal(run_id, "payment", {"amount": 2}, key="k")
    assert second.duplicate and "key 'k'" in second.note and "ignored" in second.note
    assert app.drive(run_id).signals == {"payment": {"amount": 1}}


def test_timeout_takes_the_next_rules_with_the_signal_null(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A signal that never comes ends the wait at its timeout, and `next` sends it elsewhere."""
    run_id = app.start(
        write_workflow(SIGNALLED.replace("timeout: 1h", "timeout: 0.3")), "shipping", topic="t"
    )
    state = app.drive(run_id)
    assert state.status is RunStatus.DELIVERED and state.signals == {"payment": None}
    assert "shipper@1" not in state.tasks and (app.run_dir(run_id) / "closer.md").exists()


DELAYED = f"""
later:
  phases:
    - id: a
      delay: 1.5
      workers:
        - {{role: w, final: true, command: ['{PY}', '-c', "{WRITE_ARG}", 'done']}}
"""


def test_a_restart_neither_shortens_nor_lengthens_a_delay(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """The due time recorded at the start holds across a restart of the orchestrator."""
    settings = Settings(heartbeat=0.05, lease_ttl=5)
    first = Interlock(tmp_path / "home", settings=settings)
    run_id = first.start(write_workflow(DELAYED), "later", topic="t")
    assert first.store.get_run(run_id).summary.status == "waiting"
    first.orchestrator.release(first.orchestrator.drivers[run_id])
    first.close()  # the orchestrator goes away while the run sleeps
    time.sleep(0.5)
    second = Interlock(tmp_path / "home", settings=settings)
    try:
        state = second.drive(run_id)
        assert state.status is RunStatus.DELIVERED
        events = second.events(run_id)
        started = next(e for e in events if e.kind == "wait_started")
        ended = next(e for e in events if e.kind == "wait_ended")
        assert started.data["until"] == pytest.approx(started.at + 1.5)
        assert 1.5 <= ended.at - started.at < 1.5 + 0.5
    finally:
        second.close()
