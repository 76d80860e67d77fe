"""Arm every crash point while a parent runs a child pipeline that pauses for approval: the
real CLI dies there (SIGKILL), then is resumed and approved (through the parent or through
the child) until the parent delivers. Nothing completed may run twice, nothing may be lost.

Used by `test_subpipelines_crash.py` and runnable for more:

    python -m tests.reliability.subpipeline_crash --per-point 6
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.reliability.crash_points import PointTally, cli, integrity
from tests.stress.crash_harness import WORKER, check_run

from interlock import Interlock
from interlock.core.subpipelines import child_run_id
from interlock.runtime.faults import CRASH_POINTS, SUBPIPELINE_CRASH_POINTS

POINTS = CRASH_POINTS + SUBPIPELINE_CRASH_POINTS

FLOW = """
parent:
  phases:
    - id: gather
      workers:
        - {{role: a, command: [{py}, {worker}, "{{output}}", {log}], timeout: 30}}
    - id: delegate
      workers:
        - {{role: sub, pipeline: child}}
    - id: finish
      workers:
        - {{role: e, reads: [sub.md], final: true, timeout: 30,
            command: [{py}, {worker}, "{{output}}", {log}, "{{inputs}}"]}}
child:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {{role: c, command: [{py}, {worker}, "{{output}}", {log}], timeout: 30}}
    - id: write
      workers:
        - {{role: d, reads: [c.md], final: true, timeout: 30,
            command: [{py}, {worker}, "{{output}}", {log}, "{{inputs}}"]}}
"""


def write_flow(workdir: Path) -> Path:
    """The parent and child pipelines and their worker script."""
    worker, log = workdir / "worker.py", workdir / "finished.log"
    worker.write_text(WORKER)
    flow = workdir / "subpipelines.yaml"
    py, wk, lg = (json.dumps(str(x)) for x in (sys.executable, worker, log))
    flow.write_text(FLOW.format(py=py, worker=wk, log=lg))
    return flow


def status_of(home: Path, run_id: str, child: str) -> str:
    """How the run stands in the ledger (its folded status); "approved" for a paused run
    whose approval (of it or of its child) is posted, not yet recorded."""
    app = Interlock(home)
    try:
        status = app.state(run_id).status.value
        pending = [c.kind for r in (run_id, child) for c in app.store.pending_commands(r)]
        return "approved" if status == "paused" and "approve" in pending else status
    finally:
        app.store.close()


def one_iteration(flow: Path, workdir: Path, point: str, n: int) -> tuple[bool, int, list[str]]:
    """Crash at the n-th pass of `point`, then resume and approve (through the parent on odd
    passes, the child on even ones) until the parent delivers; (killed, steps, problems)."""
    stamp = time.monotonic_ns()
    home = workdir / f"home-{point}-{n}-{stamp}"
    run_id = f"sub-{point.replace('_', '-')}-{n}-{stamp}"
    child = child_run_id(run_id, "sub@1", 1)
    first = cli(home, "run", str(flow), "parent", "--topic", "t", "--run-id", run_id,
                crash_at=f"{point}:{n}")  # fmt: skip
    killed = first.returncode == -signal.SIGKILL
    problems: list[str] = []
    steps, approved = 0, False
    while (status := status_of(home, run_id, child)) != "delivered" and steps < 8:
        steps += 1
        if status == "paused":
            # The first approval is armed too: it drives both runs past the pause.
            target = run_id if n % 2 else child
            step = cli(home, "approve", target, crash_at=None if approved else f"{point}:{n}")
            approved = True
            killed |= step.returncode == -signal.SIGKILL
            if step.returncode == -signal.SIGKILL:
                continue
        else:
            step = cli(home, "resume", run_id)
        if step.returncode not in (0, 3):  # 3: paused again for approval
            said = step.stderr[-400:]
            problems.append(f"{run_id}: step {steps} exited {step.returncode}: {said}")
            break
    for run in (run_id, child):
        problems += check_run(home, run)
    app = Interlock(home)
    try:
        runs = app.store.find_runs("")
        if sorted(runs) != sorted([run_id, child]):
            problems.append(f"{run_id}: runs in the store: {runs} (one child expected)")
        approvals = [e.kind for e in app.events(child)].count("approved")
        if approvals != 1:
            problems.append(f"{run_id}: the child was approved {approvals} times")
        sub = app.state(run_id).tasks.get("sub@1")
        delivered = app.state(child)
        tasks = delivered.tasks.values()
        final = next((t for t in tasks if t.artifact == delivered.delivered), None)
        if sub is None or final is None or sub.sha256 != final.sha256 or sub.attempt != 1:
            problems.append(f"{run_id}: the parent's sub@1 is not the child's final output")
    finally:
        app.store.close()
    check = integrity(home)
    if check != "ok":
        problems.append(f"{run_id}: integrity_check: {check}")
    return killed, steps, problems


def crash_every_point(
    per_point: int, workdir: Path, jobs: int = 2, points: tuple[str, ...] = POINTS
) -> tuple[dict[str, PointTally], int]:
    """`per_point` iterations of every point (passes 1, 2, 3, 4, ...); also returns how many
    worker runs were repeated (killed after the work, before its commit)."""
    flow = write_flow(workdir)
    plan = [(point, 1 + i) for point in points for i in range(per_point)]
    tallies = {point: PointTally() for point in points}
    with ThreadPoolExecutor(jobs) as pool:
        outcomes = pool.map(lambda p: (p[0], one_iteration(flow, workdir, *p)), plan)
        for point, (killed, steps, problems) in outcomes:
            tally = tallies[point]
            tally.iterations += 1
            tally.killed += killed
            tally.resumes += steps
            tally.violations += problems
    log = workdir / "finished.log"
    finished = Counter(log.read_text().splitlines()) if log.exists() else Counter()
    return tallies, sum(n - 1 for n in finished.values())


def main() -> None:
    """Command line: iterations per point, then the results as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-point", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        tallies, repeats = crash_every_point(args.per_point, Path(workdir), args.jobs)
    summary = {
        point: {"iterations": t.iterations, "killed": t.killed, "violations": t.violations}
        for point, t in tallies.items()
    }
    print(json.dumps({"points": summary, "worker_runs_repeated": repeats}, indent=2))
    sys.exit(1 if any(t.violations for t in tallies.values()) else 0)


if __name__ == "__main__":
    main()
