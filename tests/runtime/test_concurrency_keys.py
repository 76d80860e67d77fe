"""Concurrency keys across processes on one SQLite ledger: of two `interlock run`s for one
customer under `limit: 1`, the second starts only when the first has ended, while a run for
another customer starts at once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from interlock import Interlock
from interlock.errors import InterlockError

# The run whose topic is "hold" works until the test creates the file `release` beside it.
WORK = (
    "import os, sys, time\n"
    "while sys.argv[1] == 'hold' and not os.path.exists(sys.argv[2]):\n"
    "    time.sleep(0.05)\n"
    "print('done')"
)
FLOW = f"""
p:
  inputs:
    customer: {{required: true}}
  concurrency: {{key: inputs.customer, limit: 1}}
  phases:
  - id: work
    workers:
    - role: w
      final: true
      command: ["{{python}}", "-c", {json.dumps(WORK)}, "{{topic}}", "{{workflow_dir}}/release"]
"""


def kinds(app: Interlock, run_id: str) -> list[str]:
    """The kinds of a run's events so far ([] before it is recorded)."""
    try:
        return [e.kind for e in app.events(run_id)]
    except InterlockError:
        return []


def wait_for(check: Callable[[], bool], what: str) -> None:
    """Poll until `check` holds (60 s at most)."""
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_at_most_limit_runs_per_key_at_once_across_processes(tmp_path: Path) -> None:
    """While one acme run holds the key's only slot, a second acme run started by another
    process waits (recorded, listed as waiting) and a beta run goes through; the second acme
    run starts once the first has ended."""
    (tmp_path / "flow.yaml").write_text(FLOW)
    home = tmp_path / "home"
    app = Interlock(home)
    env = {**os.environ, "INTERLOCK_HOME": str(home)}

    def run(n: int, topic: str, customer: str) -> subprocess.Popen[str]:
        argv = ["run", "flow.yaml", "--topic", topic, "--input", f"customer={customer}"]
        return subprocess.Popen(
            [sys.executable, "-m", "interlock", *argv, "--run-id", f"run-{n}"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(run(0, "hold", "acme"))
        wait_for(lambda: "slot_taken" in kinds(app, "run-0"), "the first acme run's slot")
        procs += [run(1, "next", "acme"), run(2, "other", "beta")]
        wait_for(lambda: "slot_awaited" in kinds(app, "run-1"), "the second acme run to wait")
        wait_for(lambda: "delivered" in kinds(app, "run-2"), "the beta run")
        assert "slot_taken" not in kinds(app, "run-1")
        assert app.store.get_run("run-1").summary.status == "waiting"
        (tmp_path / "release").touch()
        for proc in procs:
            _, stderr = proc.communicate(timeout=60)
            assert proc.returncode == 0, stderr
        events = {n: app.events(f"run-{n}") for n in range(3)}
    finally:
        app.close()
        for proc in procs:  # on a failure: leave no process behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [e.kind for e in events[1]][:3] == ["run_created", "slot_awaited", "slot_taken"]
    assert events[1][1].why == "inputs.customer = acme has no free slot"
    assert events[1][2].why == "a slot of inputs.customer = acme (at most 1 at once)"
    ended = next(e.at for e in events[0] if e.kind == "delivered")
    assert events[1][2].at >= ended


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


def test_an_orchestrator_that_lets_waiting_runs_go_holds_only_runs_with_a_slot(
    tmp_path: Path,
) -> None:
    """With `let_slot_waiters_go` (as a fleet runs), the second run of a key under limit 1
    records that it waits and is handed back at once; the first keeps running here."""
    from interlock.core.loader import load_workflow
    from interlock.runtime.home import Home
    from interlock.runtime.orchestrator import Orchestrator, Settings
    from interlock.testing import MemoryStore

    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    definition = load_workflow(flow).get("p")
    store = MemoryStore()
    settings = Settings(let_slot_waiters_go=True, write_status=False)
    orchestrator = Orchestrator(store, Home.at(tmp_path / "home"), settings=settings)

    async def scenario() -> None:
        first = orchestrator.create_run(definition, topic="a", inputs={"customer": "acme"})
        second = orchestrator.create_run(definition, topic="b", inputs={"customer": "acme"})
        orchestrator.step(orchestrator.clock(), stop_when_paused=True)
        try:
            assert set(orchestrator.drivers) == {first}
            assert [e.kind for e in store.events(second)] == ["run_created", "slot_awaited"]
            assert store.get_run(second).lease_owner is None
            assert "slot_taken" in [e.kind for e in store.events(first)]
        finally:
            await orchestrator.shutdown()

    asyncio.run(scenario())
