"""Arm every named crash point of the runtime in the real CLI, let it die, resume, check.

Used by `test_crash_points.py` (a CI-sized number of iterations) and runnable for more:

    python -m tests.reliability.crash_points --per-point 30

Each iteration starts `interlock run` with `INTERLOCK_CRASH_AT=<point>:<n>` in a fresh state
directory. The process kills itself with SIGKILL on the n-th pass through the point (or
finishes, when the run passes it fewer times); `interlock resume` then drives the run to its
end, and the ledger, the outputs and SQLite's own integrity check must all be sound.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.stress.crash_harness import PIPELINE, WORKER, check_run

from interlock.runtime.faults import CRASH_POINTS


@dataclass
class PointTally:
    """What the iterations of one crash point did."""

    iterations: int = 0
    killed: int = 0
    resumes: int = 0
    violations: list[str] = field(default_factory=list)


def cli(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI to its end (or its death), in its own process group."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write_flow(workdir: Path) -> Path:
    """The crash pipeline (three parallel workers, then two sequential ones) and its worker."""
    worker, log = workdir / "worker.py", workdir / "finished.log"
    worker.write_text(WORKER)
    flow = workdir / "crash.yaml"
    py, wk, lg = (json.dumps(str(x)) for x in (sys.executable, worker, log))
    flow.write_text(PIPELINE.format(py=py, worker=wk, log=lg))
    return flow


def integrity(home: Path) -> str:
    """SQLite's integrity check of the ledger."""
    with sqlite3.connect(home / "ledger.db") as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def one_iteration(flow: Path, workdir: Path, point: str, n: int) -> tuple[bool, int, list[str]]:
    """Crash at the n-th pass of `point`, resume to the end; (killed, resumes, problems)."""
    stamp = time.monotonic_ns()
    home = workdir / f"home-{point}-{n}-{stamp}"
    run_id = f"crash-{point.replace('_', '-')}-{n}-{stamp}"  # unique: the worker log is shared
    first = cli(home, "run", str(flow), "crash", "--topic", "t", "--run-id", run_id,
                crash_at=f"{point}:{n}")  # fmt: skip
    killed = first.returncode == -signal.SIGKILL
    problems = []
    if not killed and first.returncode != 0:
        problems.append(f"{run_id}: run exited {first.returncode}: {first.stderr[-500:]}")
    resumes = 0
    if killed:
        resumed = cli(home, "resume", run_id)
        resumes += 1
        if resumed.returncode != 0:
            problems.append(
                f"{run_id}: resume exited {resumed.returncode}: {resumed.stderr[-500:]}"
            )
    problems += check_run(home, run_id)
    final = home / "archive" / run_id / "final.md"
    if not final.is_file() or not final.read_text().endswith("complete\n"):
        problems.append(f"{run_id}: final.md missing or partial in the archive")
    if (home / "runs" / run_id).exists():
        problems.append(f"{run_id}: the live directory was left behind after archiving")
    check = integrity(home)
    if check != "ok":
        problems.append(f"{run_id}: integrity_check: {check}")
    return killed, resumes, problems


def crash_every_point(
    per_point: int, workdir: Path, jobs: int = 2
) -> tuple[dict[str, PointTally], int]:
    """`per_point` iterations for every crash point (n = 1, 2, 3, 1, 2, 3...); also returns
    how many worker runs were repeated (killed after the work, before its commit)."""
    flow = write_flow(workdir)
    plan = [(point, 1 + i % 3) for point in CRASH_POINTS for i in range(per_point)]
    tallies = {point: PointTally() for point in CRASH_POINTS}
    with ThreadPoolExecutor(jobs) as pool:
        outcomes = pool.map(lambda p: (p[0], one_iteration(flow, workdir, *p)), plan)
        for point, (killed, resumes, problems) in outcomes:
            tally = tallies[point]
            tally.iterations += 1
            tally.killed += killed
            tally.resumes += resumes
            tally.violations += problems
    log = workdir / "finished.log"
    finished = Counter(log.read_text().splitlines()) if log.exists() else Counter()
    return tallies, sum(n - 1 for n in finished.values())


def main() -> None:
    """Command line: iterations per point, then a table of the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-point", type=int, default=10)
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
