"""Orchestrator and worker processes sharing one PostgreSQL ledger, under failures."""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
from tests.distributed.helpers import WORKFLOW, Processes, check_histories, statuses, wait_until

from interlock.api import Interlock

pytestmark = pytest.mark.slow


def submit_many(url: str, home: Path, count: int, prefix: str = "t") -> list[str]:
    """Record `count` fan-out runs and hand their leases back for the fleet."""
    app = Interlock(home, store=url)
    try:
        run_ids = []
        for i in range(count):
            run_id = app.start(WORKFLOW, topic=f"{prefix}{i}")
            app.orchestrator.release(app.orchestrator.drivers[run_id])
            run_ids.append(run_id)
        return run_ids
    finally:
        app.close()


def listening(url: str) -> int:
    """Orchestrators listening for runs handed back and commands (the last channel their
    listener asks for is the commands')."""
    with psycopg.connect(url) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = 'LISTEN \"interlock_commands\"'"
        ).fetchone()
    return int(row[0]) if row else 0


def lease_owners(url: str) -> set[str]:
    """Owners of currently valid run leases."""
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT DISTINCT lease_owner FROM runs WHERE lease_expires > extract(epoch FROM now())"
        ).fetchall()
    return {r[0] for r in rows if r[0]}


def pid_of(owner: str) -> int:
    """The process id inside a lease owner name (host:pid:nonce)."""
    return int(owner.split(":")[1])


def test_fleet_delivers_every_run_through_kill_nine(procs: Processes) -> None:
    """104 runs over 2 orchestrators and 4 workers survive SIGKILL of one of each, exactly."""
    orchestrators = [procs.orchestrator(f"o{i}") for i in range(2)]
    # Both up before any run is handed back: a look takes eight runs in one statement, so the
    # first to start could take all 104 before the other had looked once.
    wait_until(lambda: listening(procs.url) == 2, 30, "both orchestrators to listen")
    workers = [procs.worker(f"w{i}", "--concurrency", "4") for i in range(4)]
    run_ids = submit_many(procs.url, procs.root / "submit", 104)
    wait_until(lambda: len(lease_owners(procs.url)) == 2, 30, "both orchestrators to drive runs")
    wait_until(lambda: statuses(procs.url).get("delivered", 0) >= 25, 60, "a quarter delivered")
    orchestrators[0].send_signal(signal.SIGKILL)
    workers[0].send_signal(signal.SIGKILL)
    wait_until(lambda: statuses(procs.url).get("delivered", 0) == 104, 150, "every run delivered")
    check_histories(procs.url, run_ids)
    finals = [procs.home / "archive" / run_id / "final.md" for run_id in run_ids]
    wait_until(lambda: all(f.exists() for f in finals), 60, "every run archived")
    assert all(f.read_text().count("About ") == 3 for f in finals)
    with psycopg.connect(procs.url) as db:
        states: dict[str, int] = dict(
            db.execute("SELECT state, count(*) FROM task_queue GROUP BY 1").fetchall()
        )
    assert states == {"done": 104 * 5}
    executions = collections.Counter((run, task) for run, task, _ in procs.executions())
    assert len(executions) == 104 * 5
    repeated = sum(n - 1 for n in executions.values())
    assert repeated <= 4, f"{repeated} re-executions; only the killed worker's 4 may repeat"
    assert orchestrators[1].poll() is None and all(w.poll() is None for w in workers[1:])


def test_stalled_orchestrator_cannot_append(procs: Processes) -> None:
    """An orchestrator frozen past its lease is replaced, and on waking writes nothing."""
    first = procs.orchestrator("first")
    for i in range(2):
        procs.worker(f"w{i}", "--concurrency", "4", DIST_TASKS_DELAY="1.5")
    run_ids = submit_many(procs.url, procs.root / "submit", 4)
    wait_until(lambda: {pid_of(o) for o in lease_owners(procs.url)} == {first.pid}, 20, "lease")
    time.sleep(1.0)
    first.send_signal(signal.SIGSTOP)
    time.sleep(4.0)  # past the 3 s lease
    second = procs.orchestrator("second")
    wait_until(
        lambda: {pid_of(o) for o in lease_owners(procs.url)} == {second.pid}, 20, "take-over"
    )
    first.send_signal(signal.SIGCONT)
    wait_until(lambda: statuses(procs.url).get("delivered", 0) == 4, 60, "every run delivered")
    check_histories(procs.url, run_ids)
    wait_until(lambda: "expired or was taken over" in procs.log("first"), 10, "lease lost")


def test_dropped_connections_are_survived(procs: Processes) -> None:
    """Terminating every server connection mid-run only delays the runs."""
    for i in range(2):
        procs.orchestrator(f"o{i}")
        procs.worker(f"w{i}", "--concurrency", "4", DIST_TASKS_DELAY="0.05")
    run_ids = submit_many(procs.url, procs.root / "submit", 30)
    wait_until(lambda: statuses(procs.url).get("delivered", 0) >= 3, 60, "some delivered")
    database = procs.url.rsplit("/", 1)[1]
    for _ in range(3):
        with psycopg.connect(procs.url, autocommit=True) as db:
            killed = db.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
        assert killed is not None and killed[0] > 0
        time.sleep(1.0)
    wait_until(lambda: statuses(procs.url).get("delivered", 0) == 30, 90, "every run delivered")
    check_histories(procs.url, run_ids)
    assert all(p.poll() is None for p in procs.started), "a process died of the disconnects"
    assert os.path.exists(procs.root / "executions.log")


def test_submit_leaves_no_empty_run_directory(procs: Processes) -> None:
    """`submit` (API and CLI) records the run without leaving an empty folder behind."""
    from interlock.distributed import submit

    home = procs.root / "submitter"
    run_id = submit(procs.url, WORKFLOW, topic="api", home=home)
    assert not (home / "runs" / run_id).exists()
    cli = procs.start("submit-cli", "submit", str(WORKFLOW), "--topic", "cli")
    assert cli.wait(60) == 0, procs.log("submit-cli")
    assert statuses(procs.url) == {"running": 2}
    assert not (procs.home / "runs").exists() or not any((procs.home / "runs").iterdir())


def test_orchestrator_that_lost_its_runs_marks_their_status_superseded(procs: Processes) -> None:
    """An orchestrator frozen past its leases, on waking, marks the status.json files of its
    own home superseded (naming who took over), while the new owner's stay true."""
    first_home, second_home = procs.root / "first-home", procs.root / "second-home"
    first = procs.orchestrator("first", INTERLOCK_HOME=str(first_home))
    procs.worker("w", "--concurrency", "8", DIST_TASKS_DELAY="3")
    run_ids = submit_many(procs.url, procs.root / "submit", 3)
    wait_until(lambda: {pid_of(o) for o in lease_owners(procs.url)} == {first.pid}, 20, "lease")
    stale = [first_home / "runs" / run_id / "status.json" for run_id in run_ids]
    wait_until(lambda: all(p.exists() for p in stale), 20, "the first's status files")
    first.send_signal(signal.SIGSTOP)
    time.sleep(4.0)  # past the 3 s lease
    second = procs.orchestrator("second", INTERLOCK_HOME=str(second_home))
    wait_until(
        lambda: {pid_of(o) for o in lease_owners(procs.url)} == {second.pid}, 20, "take-over"
    )
    first.send_signal(signal.SIGCONT)
    wait_until(lambda: "expired or was taken over" in procs.log("first"), 10, "lease lost")
    wait_until(lambda: statuses(procs.url).get("delivered", 0) == 3, 60, "every run delivered")
    check_histories(procs.url, run_ids)

    def superseded() -> bool:
        views = [json.loads(p.read_text()) for p in stale]
        return all(v["status"] == "superseded" for v in views)

    wait_until(superseded, 10, "the first's copies marked superseded")
    for path in stale:
        mark = json.loads(path.read_text())["superseded"]
        assert mark["by"] is not None and pid_of(mark["by"]) == second.pid, mark
        assert mark["last_status"] == "running" and mark["at"].endswith("Z")
    finals = [second_home / "archive" / run_id / "status.json" for run_id in run_ids]
    wait_until(lambda: all(f.exists() for f in finals), 20, "the new owner's archive")
    assert {json.loads(f.read_text())["status"] for f in finals} == {"delivered"}


def test_status_left_running_by_a_killed_orchestrator_is_marked_at_the_next_start(
    procs: Processes,
) -> None:
    """An orchestrator killed outright leaves `running` status files; the next orchestrator
    started in that state directory marks them superseded once another finished the runs."""
    first_home, second_home = procs.root / "first-home", procs.root / "second-home"
    first = procs.orchestrator("first", INTERLOCK_HOME=str(first_home))
    procs.worker("w", "--concurrency", "8", DIST_TASKS_DELAY="2")
    run_ids = submit_many(procs.url, procs.root / "submit", 2)
    stale = [first_home / "runs" / run_id / "status.json" for run_id in run_ids]
    wait_until(lambda: all(p.exists() for p in stale), 20, "the first's status files")
    first.send_signal(signal.SIGKILL)
    first.wait()
    procs.orchestrator("second", INTERLOCK_HOME=str(second_home))
    wait_until(lambda: statuses(procs.url).get("delivered", 0) == 2, 60, "every run delivered")
    assert {json.loads(p.read_text())["status"] for p in stale} == {"running"}
    procs.orchestrator("third", INTERLOCK_HOME=str(first_home))

    def marked() -> bool:
        return {json.loads(p.read_text())["status"] for p in stale} == {"superseded"}

    wait_until(marked, 20, "the stale copies marked superseded")
    mark = json.loads(stale[0].read_text())["superseded"]
    assert mark["last_status"] == "running" and "delivered" in mark["why"]
    assert "Traceback" not in procs.log("third")


GIVING_UP = """
fails:
  phases:
    - id: ask
      workers:
        - role: broken
          command: ["sh", "-c", "sleep 0.5; exit 1"]
        - role: long
          command: ["sh", "-c", "sleep 4; echo kept > {output}"]
QUEUED
    - id: end
      workers:
        - role: last
          final: true
          command: ["sh", "-c", "echo done > {output}"]
"""


def test_a_failing_run_withdraws_what_no_worker_has_begun(procs: Processes) -> None:
    """A task fails for good while a sibling runs and eight more wait in the queue behind
    them (the worker runs two commands at once, taking entries in the order of their task
    ids, which the roles' names set here): the queued ones are withdrawn, so that at
    most the one a worker took as the failure was being recorded begins (without the
    withdrawal all eight would, one after another, while the run waited for its sibling).
    The run then fails with the sibling's output kept."""
    from interlock.distributed import submit
    from interlock.storage.postgres import PostgresStore

    queued = "\n".join(
        f'        - role: q{n}\n          command: ["sh", "-c", "sleep 0.3; echo {n} > {{output}}"]'
        for n in range(8)
    )
    flow = procs.root / "fails.yaml"
    flow.write_text(GIVING_UP.replace("QUEUED", queued))
    procs.orchestrator("o")
    procs.worker("w", "--concurrency", "command=2")
    run_id = submit(procs.url, flow, topic="x", home=procs.root / "submitter")
    wait_until(lambda: statuses(procs.url).get("failed", 0) == 1, 60, "the run to fail")
    store = PostgresStore(procs.url)
    try:
        events = store.events(run_id)
    finally:
        store.close()
    begun = {e.data["task_id"] for e in events if e.kind == "task_started"}
    late = sorted(t for t in begun if t.startswith("q"))
    assert len(late) <= 2, late
    completed = {e.data["task_id"] for e in events if e.kind == "task_completed"}
    assert "long@1" in completed
    with psycopg.connect(procs.url) as db:
        rows = db.execute("SELECT task_id, state FROM task_queue WHERE run_id = %s", (run_id,))
        states: dict[str, int] = dict(rows.fetchall())
    assert sum(states[f"q{n}@1"] == "cancelled" for n in range(8)) >= 6, states
