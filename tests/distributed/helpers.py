"""Helpers of the distributed tests: real PostgreSQL, real Redis, real processes.

A missing service makes these tests fail, never skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from interlock.core.state import fold
from interlock.storage.postgres import PostgresStore

HERE = Path(__file__).parent
WORKFLOW = HERE / "fanout.yaml"
PG_ADMIN = os.environ.get("INTERLOCK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def redis_url() -> str:
    """The Redis database of this test process. The tests empty theirs, so each xdist worker
    (gw0, gw1, ...) has its own: 7, 8, ... 15 (Redis's default last), then 7 again."""
    base = os.environ.get("INTERLOCK_TEST_REDIS", "redis://127.0.0.1:6379/7")
    server, _, database = base.rpartition("/")
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    first = int(database or 0)
    return f"{server}/{first + worker % (16 - first)}"


REDIS = redis_url()


def admin(statement: str) -> None:
    """One statement on the admin database, outside a transaction."""
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as db:
        db.execute(statement)


class Processes:
    """Starts `interlock` processes and makes sure none outlives the test."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        self.home = root / "home"
        self.started: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "INTERLOCK_STORE": url,
            "INTERLOCK_HOME": str(self.home),
            "DIST_TASKS_LOG": str(root / "executions.log"),
        }

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """`interlock ARGS` with its output in `<root>/<name>.log`."""
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [sys.executable, "-m", "interlock", *args],
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )
        log.close()
        self.started.append(process)
        return process

    def orchestrator(
        self, name: str, *extra: str, ttl: float = 3.0, **env: str
    ) -> subprocess.Popen[bytes]:
        """An `interlock orchestrate` process."""
        return self.start(name, "orchestrate", "--lease-ttl", str(ttl), *extra, **env)

    def worker(
        self, name: str, *extra: str, ttl: float = 3.0, **env: str
    ) -> subprocess.Popen[bytes]:
        """An `interlock worker` process."""
        return self.start(name, "worker", "--lease-ttl", str(ttl), "--grace", "5", *extra, **env)

    def log(self, name: str) -> str:
        """What a process printed so far."""
        return (self.root / f"{name}.log").read_text(errors="replace")

    def executions(self) -> list[tuple[str, str, str]]:
        """(run id, task id, idempotency key) of every call the workers made."""
        path = self.root / "executions.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(a, b, c) for a, b, c in (line.split() for line in lines)]

    def stop_all(self) -> None:
        """SIGTERM everything still running, then SIGKILL stragglers."""
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        deadline = time.monotonic() + 10
        for process in self.started:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def submit_runs(url: str, count: int, home: Path, prefix: str = "t") -> list[str]:
    """Record `count` runs of the fan-out pipeline for the fleet."""
    from interlock.distributed import submit

    return [
        submit(url, WORKFLOW, topic=f"{prefix}{i}", home=home / "submitter") for i in range(count)
    ]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `check` until it holds; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def statuses(url: str) -> dict[str, int]:
    """How many runs are in each status."""
    with psycopg.connect(url) as db:
        rows = db.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
    return {str(s): int(n) for s, n in rows}


def check_histories(url: str, run_ids: list[str], items: int = 3) -> None:
    """Every run delivered, its seq gapless, every task completed exactly once, and every
    completed attempt recorded as started by a named worker before it completed."""
    store = PostgresStore(url)
    try:
        for run_id in run_ids:
            events = store.events(run_id)
            assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
            completed = [e.data["task_id"] for e in events if e.kind == "task_completed"]
            assert len(completed) == len(set(completed)) == items + 2, (run_id, completed)
            started: dict[tuple[str, int], str] = {}
            for e in events:
                attempt = (e.data.get("task_id", ""), e.data.get("attempt", 0))
                if e.kind == "task_started":
                    started[attempt] = e.data["worker"]
                elif e.kind == "task_completed":
                    assert started.get(attempt), (run_id, attempt, "completed, never started")
            state = fold([e.event for e in events])
            assert state.status.value == "delivered", (run_id, state.failure)
    finally:
        store.close()
