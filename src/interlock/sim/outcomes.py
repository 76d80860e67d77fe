"""What happened, judged against what the history says happened.

The history can be consistent and still wrong about the world: a reused task the runtime ran
anyway, an attempt started twice by one process, a delivered file whose bytes are not the
revision the history delivered, a delivered output made from an old version of its inputs.
The simulated workers count every real execution and write, into each output, the SHA-256 of
every input file they read from disk when they ran (`sim.workers`); these checks compare that
with the oracle's model (`sim.oracle`), sharing no code with the engine.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from interlock.sim.oracle import Oracle

READ_KEY = "read"  # the key of a simulated output that lists what its worker read
Executions = Counter[tuple[str, str, int]]  # (run, task, attempt) -> times started
Starts = Counter[tuple[str, str, int, str]]  # (run, task, attempt, process) -> times started


def _sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def execution_problems(
    oracle: Oracle, run_id: str, executions: Executions, starts: Starts
) -> list[str]:
    """Reused tasks never run; no attempt started twice by one process; nothing started that
    the history never dispatched."""
    problems = []
    for reuse in oracle.reused:
        ran = executions.get((run_id, reuse.task_id, reuse.attempt), 0)
        if ran:
            problems.append(
                f"{reuse.task_id} attempt {reuse.attempt} is recorded as reused "
                f"({reuse.via}) but its worker ran {ran} time(s)"
            )
    for (run, task, attempt, process), n in sorted(starts.items()):
        if run == run_id and n > 1:
            problems.append(f"{task} attempt {attempt} was started {n} times by {process}")
    for run, task, attempt in sorted(executions):
        if run == run_id and (task, attempt) not in oracle.dispatched:
            problems.append(f"{task} attempt {attempt} ran but was never recorded as dispatched")
    return problems


def file_problems(oracle: Oracle, run_dir: Path | None) -> list[str]:
    """Every output file holds the revision the history last gave it; a delivered run's
    final.md and result are its final task's latest revision, made from the current versions
    of what it read."""
    if run_dir is None:
        return []
    problems = []
    for artifact, sha in sorted(oracle.files.items()):
        found = _sha(run_dir / artifact)
        if found is None:
            problems.append(f"{artifact} missing from {run_dir}")
        elif found != sha:
            problems.append(f"{artifact} is not the revision the history last recorded")
    delivered = oracle.delivered
    if delivered is None or oracle.status != "delivered":
        return problems
    task = oracle.tasks.get(delivered.task_id)
    if task is None or task.artifact != delivered.artifact or task.status != "completed":
        problems.append(f"delivered {delivered.artifact}, which is not a completed output")
        return problems
    final = run_dir / "final.md"
    if _sha(final) != task.sha256:
        problems.append(
            f"final.md is not the delivered revision of {task.artifact} "
            f"({'an edit' if task.edited else 'its completion'})"
        )
    if not task.edited:
        problems += _read_problems(oracle, final)
    return problems


def _read_problems(oracle: Oracle, final: Path) -> list[str]:
    """The delivered output was made from the versions of its inputs the history holds now."""
    try:
        read = json.loads(final.read_bytes()).get(READ_KEY, {})
    except (ValueError, AttributeError, OSError):
        return []  # not a simulated worker's output
    problems = []
    for name, sha in sorted(read.items()):
        now = oracle.files.get(name)
        if now is not None and now != sha:
            problems.append(f"the delivered output was made from an old version of {name}")
    return problems


def end_problems(
    oracle: Oracle, run_id: str, run_dir: Path | None, executions: Executions, starts: Starts
) -> list[str]:
    """How a run may end, judged from its history, its files and its workers alone."""
    problems = []
    if oracle.status == "running":
        problems.append("the run is stuck: running with nothing in flight or scheduled")
    for task in oracle.tasks.values():
        open_ = task.status in ("dispatched", "started", "retry_wait")
        if oracle.status in ("delivered", "failed", "cancelled") and open_:
            problems.append(f"{task.task_id} left {task.status} in an ended run")
        # A failed item was accepted by the oracle only within its fan-out's tolerance.
        if oracle.status == "delivered" and task.status not in ("completed", "item_failed"):
            problems.append(f"{task.task_id} is {task.status} in a delivered run")
        if oracle.status == "paused" and task.status in ("dispatched", "started"):
            problems.append(f"{task.task_id} still in flight in a paused run at the end")
    if oracle.status == "delivered":
        problems += [f"delivered while {s}" for s in oracle.stale()]
        if not oracle.archived:
            problems.append("delivered but never archived")
    problems += file_problems(oracle, run_dir)
    problems += execution_problems(oracle, run_id, executions, starts)
    return problems
