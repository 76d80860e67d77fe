"""Reruns and the cache on a PostgreSQL ledger: in one process, and driven by a fleet of
orchestrator and worker processes (a missing server fails these tests, never skips them)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.distributed.helpers import PG_ADMIN, WORKFLOW, Processes, admin, wait_until

from interlock import Interlock, RunStatus
from interlock.runtime.orchestrator import Settings
from interlock.storage.postgres import PostgresStore

from .test_rerun import PIPELINE, calls


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"il_rr_{uuid.uuid4().hex[:12]}"
    admin(f"CREATE DATABASE {name}")
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    PostgresStore(url).close()
    yield url
    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_rerun_and_cache_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    """`rerun --from synth` runs only the synthesis; a cached pipeline's second run calls
    nothing; the plan and the diff read the same ledger."""
    workflow = tmp_path / "demo.yaml"
    workflow.write_text(PIPELINE.replace("demo:\n", "demo:\n  cache: {ttl: 1h}\n", 1))
    app = Interlock(tmp_path / "home", store=pg_url, settings=Settings(heartbeat=0.05))
    try:
        first = app.run(workflow, "demo", topic="t")
        assert first.status is RunStatus.DELIVERED and calls(workflow) == ["a", "b", "s"]
        plan = app.plan_rerun(first.run_id, from_phase="synth")
        assert [t.reuse for t in plan.tasks] == [True, True, False]
        second = app.drive(app.rerun(first.run_id, from_phase="synth"))
        assert second.status is RunStatus.DELIVERED and calls(workflow) == ["s"]
        third = app.run(workflow, "demo", topic="t")
        assert third.status is RunStatus.DELIVERED and calls(workflow) == []
        assert all(t.reused_from for t in third.tasks.values())
        diff = app.diff(first.run_id, second.run_id)
        assert [t.b for t in diff.tasks] == ["reused", "reused", "ran"]
    finally:
        app.close()


def test_a_fleet_drives_a_rerun_without_running_what_it_reuses(pg_url: str, tmp_path: Path) -> None:
    """Orchestrator and worker processes on one database: a rerun from the last phase of a
    fan-out is picked up by the fleet, reuses the planner and every writer (item by item), and
    only the editor runs on a worker."""
    procs = Processes(pg_url, tmp_path)
    try:
        procs.orchestrator("orch")
        procs.worker("worker")
        app = Interlock(procs.home / "submitter", store=pg_url)
        try:
            source = app.start(WORKFLOW, topic="fleet")
            app.orchestrator.release(app.orchestrator.drivers[source])

            def delivered(run_id: str) -> bool:
                return app.state(run_id).status is RunStatus.DELIVERED

            wait_until(lambda: delivered(source), 60, "the source run to be delivered")
            rerun = app.rerun(source, from_phase="merge")
            app.orchestrator.release(app.orchestrator.drivers[rerun])
            wait_until(lambda: delivered(rerun), 60, "the rerun to be delivered")
            state = app.state(rerun)
        finally:
            app.close()
    finally:
        procs.stop_all()
    reused = sorted(t.task_id for t in state.tasks.values() if t.reused_from)
    assert reused == ["planner@1", "writer@1.0", "writer@1.1", "writer@1.2"]
    ran = sorted(task for run, task, _ in procs.executions() if run == rerun)
    assert ran == ["editor@1"]
