"""Child runs on PostgreSQL with a fleet: two orchestrators and a worker drive a parent and
its child; a person approves and cancels from another process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.distributed.helpers import Processes, wait_until

from interlock.api import Interlock
from interlock.core.state import RunStatus
from interlock.core.subpipelines import child_run_id

pytestmark = pytest.mark.slow

WRITE_ARG = "import os, sys; open(os.environ['INTERLOCK_OUTPUT'], 'w').write(sys.argv[1])"
PY = sys.executable
FLOW = f"""
parent:
  phases:
    - id: delegate
      workers:
        - {{role: sub, pipeline: child}}
    - id: finish
      workers:
        - {{role: closer, reads: [sub.md], final: true,
            command: ['{PY}', '-c', "{WRITE_ARG}", 'closed']}}
child:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {{role: drafter, command: ['{PY}', '-c', "{WRITE_ARG}", 'drafted']}}
    - id: write
      workers:
        - {{role: writer, final: true, command: ['{PY}', '-c', "{WRITE_ARG}", 'written']}}
"""


def test_a_fleet_drives_parent_and_child_and_takes_approvals_and_cancels_from_elsewhere(
    procs: Processes, tmp_path: Path
) -> None:
    """Runs submitted to a fleet start their children there; approving a parent from this
    process approves its paused child and both deliver; cancelling another parent cancels
    its child."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    procs.orchestrator("o1", ttl=10)
    procs.orchestrator("o2", ttl=10)
    procs.worker("w1", "--concurrency", "4")
    app = Interlock(tmp_path / "here", store=procs.url)
    try:
        approved, cancelled = (app.submit(flow, "parent", topic=t) for t in ("a", "c"))
        children = {r: child_run_id(r, "sub@1", 1) for r in (approved, cancelled)}

        def paused_by_children() -> bool:
            return all(
                app.store.get_run(r).summary.status == "paused"
                and app.state(r).pause_reason == "child"
                for r in children
            )

        wait_until(paused_by_children, 90, "both parents paused by their children")
        assert all(app.state(c).status is RunStatus.PAUSED for c in children.values())
        app.approve(approved)
        app.cancel(cancelled, "not needed")
        wait_until(
            lambda: app.state(approved).status is RunStatus.DELIVERED,
            90,
            "the approved parent delivered",
        )
        wait_until(
            lambda: app.state(children[cancelled]).status is RunStatus.CANCELLED,
            90,
            "the cancelled parent's child cancelled",
        )
        assert app.state(children[approved]).status is RunStatus.DELIVERED
        assert app.state(cancelled).status is RunStatus.CANCELLED
        assert app.state(approved).tasks["sub@1"].attempt == 1
        kinds = [e.kind for e in app.events(children[approved])]
        assert kinds.count("approved") == 1 and kinds.count("run_created") == 1
        runs = app.store.find_runs("")
        assert sorted(runs) == sorted([approved, cancelled, *children.values()])
    finally:
        app.close()
