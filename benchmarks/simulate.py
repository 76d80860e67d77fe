"""Run the deterministic simulator over many seeds, or rerun one seed exactly.

    python benchmarks/simulate.py --seed 1234          # replay one seed, print what it did
    python benchmarks/simulate.py --seeds 100000       # seeds 0..99999, on every core
    python benchmarks/simulate.py --seeds 5000 --start 7000000 --pipeline loop
    python benchmarks/simulate.py --seeds 10000 --pipeline children   # sub-pipelines
    python benchmarks/simulate.py --seeds 500 --pipeline children-mixed   # with waits, reviews
    python benchmarks/simulate.py --seeds 2000 --pipeline mixed   # generated mixes of features
    python benchmarks/simulate.py --seeds 61 --digests a.json   # each seed's history sha256

Prints seeds per second and every violation with the command that reproduces it; exits 1 when
any seed broke an invariant.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from typing import Any

from interlock.sim import SimResult
from interlock.sim import simulate as simulate_one
from interlock.sim.child_mix import NAME as CHILDREN_MIXED
from interlock.sim.child_mix import MixedChildSimulation


def simulate(seed: int, *, pipeline: str | None = None) -> SimResult:
    """One seed of `pipeline` (`children-mixed`: `interlock.sim.child_mix`)."""
    if pipeline == CHILDREN_MIXED:
        return MixedChildSimulation(seed).run()
    return simulate_one(seed, pipeline=pipeline)


def _chunk(args: tuple[int, int, str | None]) -> dict[str, Any]:
    start, count, pipeline = args
    statuses: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    failures = []
    digests = {}
    crashes = events = 0
    for seed in range(start, start + count):
        result = simulate(seed, pipeline=pipeline)
        statuses[result.status or "error"] += 1
        faults.update(result.faults)
        crashes += result.crashes
        events += result.events
        digests[seed] = result.digest
        if result.violations:
            failures.append(result.summary())
    return {
        "statuses": statuses,
        "faults": faults,
        "failures": failures,
        "crashes": crashes,
        "events": events,
        "digests": digests,
    }


def run_many(seeds: int, start: int, jobs: int, pipeline: str | None) -> dict[str, Any]:
    """Simulate seeds start..start+seeds-1 across `jobs` processes; returns the tally."""
    size = max(1, min(500, seeds // (jobs * 4) or 1))
    chunks = [
        (s, min(size, start + seeds - s), pipeline) for s in range(start, start + seeds, size)
    ]
    began = time.perf_counter()
    if jobs > 1:
        with multiprocessing.Pool(jobs) as pool:
            parts = pool.map(_chunk, chunks)
    else:
        parts = [_chunk(c) for c in chunks]
    elapsed = time.perf_counter() - began
    statuses: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    digests: dict[int, str] = {}
    crashes = events = 0
    for part in parts:
        digests.update(part["digests"])
        statuses.update(part["statuses"])
        faults.update(part["faults"])
        failures += part["failures"]
        crashes += part["crashes"]
        events += part["events"]
    return {
        "seeds": seeds,
        "first_seed": start,
        "seconds": round(elapsed, 2),
        "seeds_per_second": round(seeds / elapsed, 1),
        "ended": dict(sorted(statuses.items())),
        "orchestrator_crashes": crashes,
        "events_recorded": events,
        "faults_injected": dict(sorted(faults.items())),
        "violations": len(failures),
        "failing_seeds": failures[:20],
        "digests": dict(sorted(digests.items())),
    }


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, help="rerun one seed and print what it did")
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--pipeline",
        help="only this catalog pipeline (or 'random'; 'mixed': generated mixes of features; "
        "'children': a parent with a child run; 'children-mixed': with waits, fan-out, reviews)",
    )
    parser.add_argument(
        "--digests",
        metavar="FILE",
        help="write each seed's history sha256 to FILE (JSON): two batches compare with diff",
    )
    args = parser.parse_args()
    if args.seed is not None:
        result = simulate(args.seed, pipeline=args.pipeline)
        print(json.dumps(result.summary(), indent=2))
        sys.exit(0 if result.ok else 1)
    tally = run_many(args.seeds, args.start, args.jobs, args.pipeline)
    digests = tally.pop("digests")
    if args.digests:
        with open(args.digests, "w") as out:
            json.dump(digests, out, indent=1)
    print(json.dumps(tally, indent=2))
    for failure in tally["failing_seeds"]:
        print(f"VIOLATION seed {failure['seed']}: {failure['violations'][0]}", file=sys.stderr)
        print(f"  rerun: {failure['rerun']}", file=sys.stderr)
    sys.exit(1 if tally["violations"] else 0)


if __name__ == "__main__":
    main()
