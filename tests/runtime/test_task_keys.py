"""Task concurrency keys on one SQLite ledger: attempts of a keyed worker never run more at
once per key than its limit, across runs and processes (real start and end times written by
command workers); a slot held by an orchestrator killed with SIGKILL is not lost; and when
this process's capacity is the bottleneck, keys take turns."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from interlock import Interlock
from interlock.errors import InterlockError
from interlock.runtime.orchestrator import Settings

# Writes "<start> <end>" (wall-clock seconds) to spans/<topic>; the "hold" topic works until
# the file `release` exists, any other for 0.4 s.
WORK = (
    "import os, sys, time\n"
    "start = time.time()\n"
    "while sys.argv[1] == 'hold' and not os.path.exists(sys.argv[2] + '/release'):\n"
    "    time.sleep(0.05)\n"
    "time.sleep(0.4)\n"
    "os.makedirs(sys.argv[2] + '/spans', exist_ok=True)\n"
    "open(sys.argv[2] + '/spans/' + sys.argv[1], 'w').write('%f %f' % (start, time.time()))\n"
    "print('done')"
)
FLOW = f"""
p:
  inputs:
    customer: {{required: true}}
  phases:
  - id: work
    workers:
    - role: w
      final: true
      concurrency: {{key: inputs.customer, limit: 1}}
      command: ["{{python}}", "-c", {json.dumps(WORK)}, "{{topic}}", "{{workflow_dir}}"]
"""


PLAN = 'print(\'{"i": ["a", "a", "a", "b", "b"]}\')'
NOTE = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n'); print('ok')"
FAIR = f"""
fair:
  phases:
  - id: plan
    workers:
    - role: p
      command: ["{{python}}", "-c", {json.dumps(PLAN)}]
      extract: {{items: {{json: i, type: list}}}}
  - id: fan
    for_each: p.items
    workers:
    - role: w
      concurrency: {{key: item, limit: 3}}
      command: ["{{python}}", "-c", {json.dumps(NOTE)}, "{{workflow_dir}}/order", "{{item}}"]
  - id: merge
    workers:
    - role: m
      final: true
      command: ["{{python}}", "-c", "print('merged')"]
"""


def cli(tmp_path: Path, *args: str, crash_at: str | None = None) -> subprocess.Popen[str]:
    """`interlock ARGS` in its own process, on the test's home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["INTERLOCK_HOME"] = str(tmp_path / "home")
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.Popen(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def run(tmp_path: Path, run_id: str, topic: str, customer: str) -> subprocess.Popen[str]:
    """`interlock run` of flow.yaml for one customer."""
    argv = ["run", "flow.yaml", "--topic", topic, "--input", f"customer={customer}"]
    return cli(tmp_path, *argv, "--run-id", run_id)


def kinds(app: Interlock, run_id: str) -> list[str]:
    """The kinds of a run's events so far ([] before it is recorded)."""
    try:
        return [e.kind for e in app.events(run_id)]
    except InterlockError:
        return []


def wait_for(check: Callable[[], bool], what: str, limit: float = 60) -> None:
    """Poll until `check` holds."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def finish(procs: list[subprocess.Popen[str]]) -> None:
    """Wait for every process to succeed; kill what is left on a failure."""
    try:
        for proc in procs:
            _, stderr = proc.communicate(timeout=90)
            assert proc.returncode == 0, stderr
    finally:
        stop(procs)


def stop(procs: list[subprocess.Popen[str]]) -> None:
    """Kill what is still running (after a failure: leave no process behind)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def spans(tmp_path: Path) -> dict[str, tuple[float, float]]:
    """(start, end) of each task, by topic, as its command measured them."""
    found = {}
    for path in (tmp_path / "spans").iterdir():
        start, end = path.read_text().split()
        found[path.name] = (float(start), float(end))
    return found


def slot_rows(tmp_path: Path) -> int:
    """How many task-slot rows the ledger still has."""
    with sqlite3.connect(tmp_path / "home" / "ledger.db") as db:
        return int(db.execute("SELECT count(*) FROM task_slots").fetchone()[0])


def test_tasks_sharing_a_key_never_overlap_across_processes(tmp_path: Path) -> None:
    """Three `interlock run`s for acme and one for beta under `limit: 1`: while the first
    acme task holds the slot, the other two wait before dispatch (recorded) and the beta
    task runs and delivers; the acme tasks run one after another (their measured spans never
    overlap); afterwards no slot is left behind."""
    (tmp_path / "flow.yaml").write_text(FLOW)
    app = Interlock(tmp_path / "home")
    procs = [run(tmp_path, "acme-0", "hold", "acme")]
    try:
        wait_for(lambda: "task_started" in kinds(app, "acme-0"), "the first acme task")
        procs += [run(tmp_path, f"acme-{n}", f"acme-{n}", "acme") for n in (1, 2)]
        procs.append(run(tmp_path, "beta-0", "beta-0", "beta"))
        wait_for(lambda: "delivered" in kinds(app, "beta-0"), "the beta run")
        for n in (1, 2):

            def waits(run: str = f"acme-{n}") -> bool:
                return "task_slot_awaited" in kinds(app, run)

            wait_for(waits, "acme waits")
            assert "task_slot_taken" not in kinds(app, f"acme-{n}")
        (tmp_path / "release").touch()
        finish(procs)
        events = {r: app.events(r) for r in ("acme-0", "acme-1", "acme-2", "beta-0")}
    finally:
        app.close()
        stop(procs)
    measured = spans(tmp_path)
    acme = sorted(measured[topic] for topic in ("hold", "acme-1", "acme-2"))
    for (_, end), (start, _) in itertools.pairwise(acme):
        assert start >= end, f"two acme tasks ran at once: {acme}"
    for run_id, stored in events.items():
        order = [e.kind for e in stored]
        awaited = order.index("task_slot_awaited")
        assert awaited < order.index("task_slot_taken") < order.index("task_dispatched")
        assert stored[awaited].rule == "task_slot", run_id
    assert slot_rows(tmp_path) == 0


def test_a_slot_held_by_a_killed_orchestrator_is_not_lost(tmp_path: Path) -> None:
    """The orchestrator of a run whose task holds acme's only slot is killed (SIGKILL) right
    after dispatch. Another run of acme waits (the dead run's attempt may still be running,
    so its slot stays held: never more than the limit); resuming the killed run runs its
    task again under the same slot and delivers; then the waiting run gets the slot and
    delivers; the two tasks never overlap and no slot is left behind."""
    (tmp_path / "flow.yaml").write_text(FLOW)
    app = Interlock(tmp_path / "home")
    procs: list[subprocess.Popen[str]] = []
    try:
        crashed = cli(
            tmp_path,
            *("run", "flow.yaml", "--topic", "hold", "--input", "customer=acme"),
            *("--run-id", "crashed"),
            crash_at="after_dispatch",
        )
        _, stderr = crashed.communicate(timeout=60)
        assert crashed.returncode == -signal.SIGKILL, stderr
        assert kinds(app, "crashed")[-2:] == ["task_slot_taken", "task_dispatched"]
        procs.append(run(tmp_path, "next", "next", "acme"))
        wait_for(lambda: "task_slot_awaited" in kinds(app, "next"), "the second run to wait")
        # No watching for a while to see nothing happen: the slot is still the dead run's
        # until its resumed task ends, which the order of the events below proves.
        assert "task_slot_taken" not in kinds(app, "next")
        (tmp_path / "release").touch()
        procs.append(cli(tmp_path, "resume", "crashed"))
        finish(procs)
        assert kinds(app, "crashed")[-2:] == ["delivered", "archived"]
        assert kinds(app, "next")[-2:] == ["delivered", "archived"]
        resumed = app.events("crashed")
        waited = app.events("next")
    finally:
        app.close()
        stop(procs)
    freed = next(e.at for e in resumed if e.kind == "task_completed")
    taken = next(e.at for e in waited if e.kind == "task_slot_taken")
    assert taken >= freed
    hold, later = spans(tmp_path)["hold"], spans(tmp_path)["next"]
    assert later[0] >= hold[1], "the waiting task ran beside the resumed one"
    assert slot_rows(tmp_path) == 0


def test_keys_take_turns_for_this_process_capacity(tmp_path: Path) -> None:
    """One task at a time in this process, five tasks waiting to run, three of key a and two
    of key b (each key under its limit): they start a, a, b, a, b (round-robin between keys
    once the first one runs), not in the order they were dispatched (a, a, a, b, b)."""
    flow = tmp_path / "fair.yaml"
    flow.write_text(FAIR)
    app = Interlock(tmp_path / "home", settings=Settings(max_concurrency=1))
    try:
        state = app.run(flow, topic="fair")
    finally:
        app.close()
    assert state.status.value == "delivered", state.failure
    assert (tmp_path / "order").read_text().split() == ["a", "a", "b", "a", "b"]


def test_a_run_whose_tasks_wait_for_slots_says_for_what() -> None:
    """Folded from its history, a run whose only ready task waits for a slot is listed as
    waiting, for a slot of the key's value, naming the task; status.json lists the task
    under `task_slots`; once the slot is taken the run is running again."""
    from interlock.core import events as ev
    from interlock.core.state import fold, listed_status
    from interlock.runtime.projection import waiting_text, waiting_view

    history: list[ev.Event] = [
        ev.RunCreated(at=1.0, run_id="r", pipeline="p", definition_hash="h", topic="t"),
        ev.PhaseStarted(at=1.0, phase="a", visit=1),
        ev.TaskSlotAwaited(at=2.0, task_id="w@1", role="w", attempt=1, key="acme", limit=2),
    ]
    state = fold(history)
    assert listed_status(state) == "waiting"
    text = waiting_text(waiting_view(state))
    assert text == "waiting for a slot of 'acme' (2 at once) for task w@1"
    state = fold([*history, ev.TaskSlotTaken(at=3.0, task_id="w@1", attempt=1, key="acme")])
    assert listed_status(state) == "running" and waiting_view(state) is None
    assert state.task_slots["w@1"].key == "acme"


def test_a_rerun_plan_sees_through_the_wait_for_a_task_slot(tmp_path: Path) -> None:
    """Planning a rerun of a keyed run lists its keyed task and what follows: waiting for a
    slot only delays a task, so the plan takes it."""
    flow = tmp_path / "fair.yaml"
    flow.write_text(FAIR)
    app = Interlock(tmp_path / "home")
    try:
        state = app.run(flow, topic="fair")
        assert state.status.value == "delivered", state.failure
        plan = app.plan_rerun(state.run_id, from_phase="fan")
    finally:
        app.close()
    assert [t.task_id for t in plan.tasks] == [
        "p@1",
        *(f"w@1.{n}" for n in range(5)),
        "m@1",
    ], plan.as_dict()
    assert [t.reuse for t in plan.tasks] == [True] + [False] * 6


def test_a_keyed_run_replays_to_the_same_decisions(tmp_path: Path) -> None:
    """The recorded history of a run whose tasks waited for and took slots replays through
    the engine to the same decisions: waiting is decided from the ledger alone."""
    from interlock.sim.replay import fixture_of, replay

    flow = tmp_path / "fair.yaml"
    flow.write_text(FAIR)
    app = Interlock(tmp_path / "home", settings=Settings(max_concurrency=1))
    try:
        state = app.run(flow, topic="fair")
        definition = app.definition_of(state.pipeline, state.definition_hash)
        stored = app.events(state.run_id)
    finally:
        app.close()
    assert [e.kind for e in stored].count("task_slot_taken") == 5
    assert replay(fixture_of("keyed", "test", definition, stored)) == []
