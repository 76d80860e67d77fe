"""Kill the real `interlock` CLI with SIGKILL at random moments, resume, and check the ledger.

Used by `tests/stress/test_crash.py` (a CI-sized number of kills) and runnable for more:

    python -m tests.stress.crash_harness --kills 2000 --seed 7
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

WORKER = """
import hashlib, os, random, sys, time
output, log = sys.argv[1], sys.argv[2]
inputs = sys.argv[3:]
task = os.environ["INTERLOCK_TASK_ID"]
random.seed(os.getpid())
digest = hashlib.sha256("".join(open(p).read() for p in inputs).encode()).hexdigest()[:16]
with open(output, "w") as out:
    out.write(f"{task} read {digest}\\n")
    out.flush()
    time.sleep(random.uniform(0, 0.08))  # a kill here leaves a partial file behind
    out.write("complete\\n")
with open(log, "a") as record:
    record.write(f"{os.environ['INTERLOCK_RUN_ID']} {task} {os.environ['INTERLOCK_ATTEMPT']}\\n")
"""

PIPELINE = """
crash:
  phases:
    - id: gather
      workers:
        - {{role: a, command: [{py}, {worker}, "{{output}}", {log}], timeout: 30}}
        - {{role: b, command: [{py}, {worker}, "{{output}}", {log}], timeout: 30}}
        - {{role: c, command: [{py}, {worker}, "{{output}}", {log}], timeout: 30}}
    - id: combine
      mode: sequential
      workers:
        - {{role: d, reads: [a.md, b.md, c.md], timeout: 30,
            command: [{py}, {worker}, "{{output}}", {log}, "{{inputs}}"]}}
        - {{role: e, reads: [d.md], final: true, timeout: 30,
            command: [{py}, {worker}, "{{output}}", {log}, "{{inputs}}"]}}
"""


@dataclass
class Tally:
    """What a crash loop did and found."""

    kills: int = 0
    runs: int = 0
    resumes: int = 0
    reexecuted: int = 0  # tasks whose worker finished more than once (killed before commit)
    violations: list[str] = field(default_factory=list)


def interlock(home: Path, *args: str) -> subprocess.Popen[str]:
    """Start the real CLI in its own process group."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    return subprocess.Popen(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_ids(home: Path) -> list[str]:
    """Every run in the ledger (the CLI may have been killed before printing its id)."""
    if not (home / "ledger.db").exists():
        return []
    with sqlite3.connect(home / "ledger.db") as db:
        try:
            return [r[0] for r in db.execute("SELECT run_id FROM runs")]
        except sqlite3.OperationalError as exc:  # killed (or looked at) before its schema
            if "no such table" not in str(exc):
                raise
            return []


def crash_loop(kills: int, seed: int, workdir: Path, max_delay: float = 1.4) -> Tally:
    """Run pipelines, killing the orchestrator until `kills` kills happened; check each run."""
    rng = random.Random(seed)
    home, log = workdir / "home", workdir / "finished.log"
    worker = workdir / "worker.py"
    worker.write_text(WORKER)
    flow = workdir / "crash.yaml"
    flow.write_text(
        PIPELINE.format(
            py=json.dumps(sys.executable), worker=json.dumps(str(worker)), log=json.dumps(str(log))
        )
    )
    tally = Tally()
    # The delays assume the CLI starts in ~0.5 s. On a loaded machine it takes longer, and
    # every kill would land before a run exists, testing nothing: shift them by the surplus.
    late = max(0.0, startup(home, flow) - 0.5)
    while tally.kills < kills:
        known = set(run_ids(home))
        tally.runs += 1
        process = interlock(home, "run", str(flow), "crash", "--topic", f"run {tally.runs}")
        killed = _maybe_kill(process, rng, max_delay, late=late)
        tally.kills += killed
        new = [r for r in run_ids(home) if r not in known]
        if not new:
            continue  # killed before the run was created: nothing to check
        run_id = new[0]
        while True:
            tally.resumes += 1
            resumed = interlock(home, "resume", "--wait", run_id)
            if _maybe_kill(resumed, rng, max_delay, probability=0.5, late=late):
                tally.kills += 1
                continue
            if resumed.returncode not in (0, 1):
                tally.violations.append(f"{run_id}: resume exited {resumed.returncode}")
            break
        tally.violations += check_run(home, run_id)
    if not (home / "ledger.db").exists():
        tally.violations.append("no run was ever created: every kill came before the CLI started")
        return tally
    finished = Counter(log.read_text().splitlines()) if log.exists() else Counter()
    tally.reexecuted = sum(n - 1 for n in finished.values())
    with sqlite3.connect(home / "ledger.db") as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    if integrity != "ok":
        tally.violations.append(f"integrity_check: {integrity}")
    return tally


def startup(home: Path, flow: Path) -> float:
    """Seconds from starting `interlock run` to its run being in the ledger, here and now
    (the run is left to finish; every invariant is checked on it too)."""
    began = time.monotonic()
    process = interlock(home, "run", str(flow), "crash", "--topic", "start-up")
    while not run_ids(home) and process.poll() is None:
        time.sleep(0.01)
    took = time.monotonic() - began
    process.communicate(timeout=120)
    return took


def _maybe_kill(
    process: subprocess.Popen[str],
    rng: random.Random,
    max_delay: float,
    probability: float = 1.0,
    late: float = 0.0,
) -> bool:
    """SIGKILL the process after a random delay (if it is still running); True if killed."""
    if rng.random() < probability:
        try:
            process.wait(late + rng.uniform(0.3, max_delay))  # the CLI needs ~0.5 s to start
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            return True
    process.communicate(timeout=120)
    return False


def check_run(home: Path, run_id: str) -> list[str]:
    """The invariants every run must keep, whatever the kills."""
    problems = []
    with sqlite3.connect(home / "ledger.db") as db:
        rows = db.execute("SELECT kind, data FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        events = [(kind, json.loads(data)) for kind, data in rows]
    kinds = [k for k, _ in events]
    if "run_failed" in kinds and "interrupted before it started" in json.dumps(events):
        return []  # killed between registering the run and its first event: never started
    if "delivered" not in kinds:
        problems.append(f"{run_id}: not delivered ({kinds[-3:]})")
    completed = Counter(d["task_id"] for k, d in events if k == "task_completed")
    problems += [f"{run_id}: {t} completed {n} times" for t, n in completed.items() if n > 1]
    dispatched = {d["task_id"] for k, d in events if k == "task_dispatched"}
    problems += [
        f"{run_id}: {t} dispatched but never completed" for t in dispatched - set(completed)
    ]
    run_dir = home / "archive" / run_id
    for kind, data in events:
        if kind != "task_completed":
            continue
        path = run_dir / data["artifact"]
        if not path.exists():
            problems.append(f"{run_id}: {data['artifact']} missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != data["sha256"]:
            problems.append(f"{run_id}: {data['artifact']} differs from the committed output")
        elif not path.read_text().endswith("complete\n"):
            problems.append(f"{run_id}: {data['artifact']} is a partial write")
    return problems


def main() -> None:
    """Command line: run as many kills as asked and print the tally."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=500)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        started = time.time()
        tally = crash_loop(args.kills, args.seed, Path(workdir))
    print(
        json.dumps(
            {
                "seed": args.seed,
                "kills": tally.kills,
                "runs": tally.runs,
                "resumes": tally.resumes,
                "reexecuted_before_commit": tally.reexecuted,
                "violations": tally.violations,
                "seconds": round(time.time() - started, 1),
            },
            indent=2,
        )
    )
    sys.exit(1 if tally.violations else 0)


if __name__ == "__main__":
    main()
