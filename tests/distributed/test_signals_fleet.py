"""Signals across processes on PostgreSQL: one process sends, another orchestrator drives."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.distributed.helpers import Processes, wait_until

from interlock.api import Interlock
from interlock.core.state import RunStatus

pytestmark = pytest.mark.slow

WRITE_ARG = "import os, sys; open(os.environ['INTERLOCK_OUTPUT'], 'w').write(sys.argv[1])"
PY = sys.executable
FLOW = f"""
shipping:
  phases:
    - id: ship
      wait_for: {{signal: payment, schema: {{type: object, required: [amount]}}}}
      workers:
        - role: shipper
          final: true
          command: ['{PY}', '-c', "{WRITE_ARG}", 'paid {{{{ signals.payment.amount }}}}']
"""


def _events(app: Interlock, run_id: str) -> dict[str, float]:
    """When each kind of event was first recorded."""
    first: dict[str, float] = {}
    for stored in app.store.events(run_id):
        first.setdefault(stored.kind, stored.at)
    return first


def test_signals_cross_orchestrators_and_wake_the_driver_at_once(
    procs: Processes, tmp_path: Path
) -> None:
    """Runs driven by a fleet orchestrator take signals sent by this process (woken through
    NOTIFY, well inside its 30 s heartbeat); a run driven here takes one sent by a CLI process."""
    flow = tmp_path / "shipping.yaml"
    flow.write_text(FLOW)
    # A look at the inbox every 30 s: a signal recorded within 2 s was heard through NOTIFY.
    procs.orchestrator("o1", "--heartbeat", "30", ttl=120)
    procs.worker("w1", "--concurrency", "4")
    app = Interlock(tmp_path / "here", store=procs.url)
    try:
        fleet_runs = []
        for i in range(3):
            run_id = app.start(flow, "shipping", topic=f"order {i}")
            app.orchestrator.release(app.orchestrator.drivers[run_id])
            fleet_runs.append(run_id)

        def all_waiting_elsewhere() -> bool:
            records = [app.store.get_run(r) for r in fleet_runs]
            return all(
                r.summary.status == "waiting"
                and r.lease_owner
                and r.lease_owner != app.orchestrator.owner
                for r in records
            )

        wait_until(all_waiting_elsewhere, 60, "the fleet orchestrator to hold the waiting runs")
        sent = {}
        for number, run_id in enumerate(fleet_runs):
            sent[run_id] = time.time()
            app.signal(run_id, "payment", {"amount": number}, key=f"pay-{number}")
        wait_until(
            lambda: all(app.state(r).status is RunStatus.DELIVERED for r in fleet_runs),
            60,
            "every fleet run delivered",
        )
        for number, run_id in enumerate(fleet_runs):
            recorded = _events(app, run_id)["signal_received"]
            assert recorded - sent[run_id] < 2.0, (run_id, recorded - sent[run_id])
            state = app.state(run_id)
            assert state.signals == {"payment": {"amount": number}}
            assert app.store.get_run(run_id).lease_owner != app.orchestrator.owner

        driver_app = Interlock(tmp_path / "driver", store=procs.url)
        try:
            here = driver_app.start(flow, "shipping", topic="order here")  # its lease is held
            sender = subprocess.Popen(
                [sys.executable, "-m", "interlock", "signal", here, "payment", "--data",
                 '{"amount": 7}'],
                env={**procs.env, "INTERLOCK_HOME": str(tmp_path / "cli")},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            state = driver_app.drive(here)
            out, err = sender.communicate(timeout=60)
            assert sender.returncode == 0, out + err
            assert "the orchestrator driving it records it" in out
            assert state.status is RunStatus.DELIVERED
            assert state.signals == {"payment": {"amount": 7}}
        finally:
            driver_app.close()
    finally:
        app.close()
