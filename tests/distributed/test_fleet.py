"""Orchestrator and worker processes sharing one PostgreSQL ledger, under failures."""

from __future__ import annotations

import collections
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
        states = dict(db.execute("SELECT state, count(*) FROM task_queue GROUP BY 1").fetchall())
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
