"""An exported run imported into another store (SQLite to PostgreSQL) is a rerun source."""

from __future__ import annotations

from pathlib import Path

from interlock import Interlock, RunStatus
from interlock.runtime.bundle import export_run, import_run
from interlock.runtime.orchestrator import Settings

from .conftest import WriteWorkflow
from .test_rerun import PIPELINE, calls
from .test_rerun_postgres import pg_url  # noqa: F401 - a fixture


def test_an_imported_run_is_rerun_from_its_bundle(
    app: Interlock,
    write_workflow: WriteWorkflow,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture imported above
) -> None:
    """A run taken from a SQLite store to a PostgreSQL one (another state directory) is
    rerun there from its last phase: the collectors are carried over from the bundle's
    outputs and only the synthesis runs."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.DELIVERED
    calls(workflow)
    bundle = tmp_path / "run.tar.gz"
    export_run(app.store, app.home, first.run_id, bundle)
    laptop = Interlock(tmp_path / "laptop", store=pg_url, settings=Settings(heartbeat=0.05))
    try:
        imported = import_run(laptop.store, laptop.home, bundle)
        plan = laptop.plan_rerun(imported.run_id, from_phase="synth", workflow=workflow)
        assert [t.reuse for t in plan.tasks] == [True, True, False]
        state = laptop.drive(laptop.rerun(imported.run_id, from_phase="synth", workflow=workflow))
        assert state.status is RunStatus.DELIVERED and calls(workflow) == ["s"]
        assert state.tasks["a@1"].reused_from == f"{first.run_id}/a@1"
        text = (laptop.run_dir(state.run_id) / "a.md").read_text()
        assert text == (app.run_dir(first.run_id) / "a.md").read_text()
    finally:
        laptop.close()
