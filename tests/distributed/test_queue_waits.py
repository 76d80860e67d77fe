"""A task waiting in the PostgreSQL queue for a free worker has not started: its `timeout`
does not count while it waits, only its `start_timeout` does."""

from __future__ import annotations

import time

import psycopg
from tests.distributed.helpers import Processes, statuses, wait_until

from interlock.distributed import submit
from interlock.storage.postgres import PostgresStore

FLOW = """
waits:
  phases:
    - id: one
      workers:
        - role: only
          call: dist_tasks:plan
          timeout: 1
          grace: 0
          final: true
"""


def queued(url: str) -> int:
    """How many entries wait in the queue for a worker."""
    with psycopg.connect(url) as db:
        row = db.execute("SELECT count(*) FROM task_queue WHERE state = 'queued'").fetchone()
    return int(row[0]) if row else 0


def test_a_task_queued_past_its_timeout_runs_once_a_worker_comes(procs: Processes) -> None:
    """A task left 3 s in the queue with no worker (timeout 1 s, no grace) is not timed out:
    the worker that comes later runs it, once, and the run delivers."""
    path = procs.root / "waits.yaml"
    path.write_text(FLOW)
    run_id = submit(procs.url, path, topic="t", home=procs.home / "submitter")
    procs.orchestrator("o")
    wait_until(lambda: queued(procs.url) == 1, 60, "the task to be queued")
    time.sleep(3)
    assert statuses(procs.url) == {"running": 1}
    procs.worker("w")
    wait_until(lambda: "running" not in statuses(procs.url), 60, "the run to end")
    assert statuses(procs.url) == {"delivered": 1}
    store = PostgresStore(procs.url)
    try:
        kinds = [e.kind for e in store.events(run_id)]
    finally:
        store.close()
    assert "task_timed_out" not in kinds
    assert kinds.count("task_started") == 1
    assert len(procs.executions()) == 1
