"""Concurrency keys across processes on one SQLite ledger: of two `interlock run`s for one
customer under `limit: 1`, the second starts only when the first has ended, while a run for
another customer starts at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from interlock import Interlock

FLOW = """
p:
  inputs:
    customer: {required: true}
  concurrency: {key: inputs.customer, limit: 1}
  phases:
  - id: work
    workers:
    - role: w
      final: true
      command: ["{python}", "-c", "import time; time.sleep(1.0); print('done')"]
"""


def test_at_most_limit_runs_per_key_at_once_across_processes(tmp_path: Path) -> None:
    """Each run's slot and end, read from the ledger: the two acme runs never overlap, and
    beta did not wait behind them."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    home = tmp_path / "home"
    Interlock(home).close()  # the ledger exists before the processes open it at once
    customers = ["acme", "acme", "beta"]
    env = {**os.environ, "INTERLOCK_HOME": str(home)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "interlock",
                "run",
                str(flow),
                "--topic",
                f"t{n}",
                "--input",
                f"customer={customer}",
                "--run-id",
                f"run-{n}",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, customer in enumerate(customers)
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
    app = Interlock(home)
    spans: dict[str, tuple[float, float]] = {}
    awaited = {}
    for n, customer in enumerate(customers):
        events = app.events(f"run-{n}")
        awaited[f"run-{n}"] = events
        slot = next(e for e in events if e.kind == "slot_taken")
        assert slot.data["key"] == customer
        assert slot.why == f"a slot of inputs.customer = {customer} (at most 1 at once)"
        ended = next(e for e in events if e.kind == "delivered")
        spans[f"run-{n}"] = (slot.at, ended.at)
    app.close()
    first, second = sorted([spans["run-0"], spans["run-1"]])
    assert second[0] >= first[1]  # the second acme run got its slot once the first ended
    waited = next(n for n in range(2) if spans[f"run-{n}"] == second)
    kinds = [e.kind for e in awaited[f"run-{waited}"]]
    assert kinds[:3] == ["run_created", "slot_awaited", "slot_taken"]
    assert awaited[f"run-{waited}"][1].why == "inputs.customer = acme has no free slot"
    assert spans["run-2"][0] < second[0]  # beta did not wait behind acme


def test_a_run_waiting_for_a_slot_is_listed_as_waiting_and_says_for_what() -> None:
    """Folded from its history, a run past its key's limit is `waiting`, for a slot of its
    key; once it has one it is running again."""
    from interlock.core import events as ev
    from interlock.core.state import fold, listed_status
    from interlock.runtime.projection import waiting_text, waiting_view

    created = ev.RunCreated(at=1.0, run_id="r", pipeline="p", definition_hash="h", topic="t")
    state = fold([created, ev.SlotAwaited(at=2.0, key="acme", limit=1)])
    assert listed_status(state) == "waiting"
    assert waiting_text(waiting_view(state)) == "waiting for a slot of 'acme' (1 at once)"
    state = fold(
        [created, ev.SlotAwaited(at=2.0, key="acme", limit=1), ev.SlotTaken(at=3.0, key="acme")]
    )
    assert listed_status(state) == "running" and waiting_view(state) is None


def test_many_waiting_runs_ask_for_slots_less_often() -> None:
    """Half a second between asks, stretched so that one orchestrator's waiting runs ask
    about a hundred times a second together, not more."""
    from interlock.runtime.slots import slot_poll

    assert slot_poll(1) == slot_poll(50) == 0.5
    assert slot_poll(1000) == 10.0
