"""What a task concurrency key costs: research-3 runs whose three workers have a key (with a
limit no run reaches, so nothing waits) against the same runs without, in one invocation.

    python benchmarks/task_keys.py [--runs 300] [--rounds 3]

Both are driven by one orchestrator, all runs created at once, on SQLite with
`synchronous=NORMAL` (so the disk does not hide the CPU). The figure is process CPU time per
run (user + system, `resource.getrusage`), the median of the rounds; the ratio is keyed over
plain. A keyed attempt records two more events (`task_slot_awaited`, `task_slot_taken`) and
asks the store for its slot in a transaction of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from interlock import Interlock, parse_workflow, register
from interlock.runtime.executors import TaskContext
from interlock.runtime.orchestrator import Settings

KEY = "concurrency: {key: topic, limit: 100000}"
FLOW = """
research:
  phases:
    - id: collect
      workers:
        - {{role: a, call: keys_noop{key}}}
        - {{role: b, call: keys_noop{key}}}
    - id: synth
      workers:
        - {{role: s, call: keys_noop, reads: [a.md, b.md], final: true{key}}}
"""


async def noop(ctx: TaskContext) -> str:
    """A worker that does nothing: only orchestration is measured."""
    return "ok\n"


register("keys_noop", noop)


def cpu() -> float:
    """CPU seconds this process used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(keyed: bool, runs: int) -> tuple[float, float]:
    """(CPU ms per run, wall seconds) of `runs` research-3 runs created at once."""
    text = FLOW.format(key=", " + KEY if keyed else "")
    definition = parse_workflow(text).get("research")
    home = Path(tempfile.mkdtemp(prefix="interlock-keys-"))
    app = Interlock(home, settings=Settings(max_concurrency=256), synchronous="NORMAL")
    try:

        async def go() -> tuple[float, float]:
            before, started = cpu(), time.perf_counter()
            app.orchestrator.create_runs(
                [(definition, f"t{i % 50}", None, None) for i in range(runs)]
            )
            await app.orchestrator.run_until_settled()
            return cpu() - before, time.perf_counter() - started

        spent, wall = asyncio.run(go())
        delivered = app.store.count_runs().get("delivered", 0)
        assert delivered == runs, f"{delivered} of {runs} runs delivered"
    finally:
        app.close()
        shutil.rmtree(home, ignore_errors=True)
    return spent / runs * 1000, wall


def main() -> None:
    """Alternate plain and keyed rounds; print medians and their ratio as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    plain: list[tuple[float, float]] = []
    keyed: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        plain.append(measure(False, args.runs))
        keyed.append(measure(True, args.runs))
    plain_ms = statistics.median(p[0] for p in plain)
    keyed_ms = statistics.median(k[0] for k in keyed)
    result: dict[str, Any] = {
        "runs": args.runs,
        "plain_cpu_ms_per_run": round(plain_ms, 3),
        "keyed_cpu_ms_per_run": round(keyed_ms, 3),
        "keyed_over_plain": round(keyed_ms / plain_ms, 3),
        "plain_wall_s": round(statistics.median(p[1] for p in plain), 3),
        "keyed_wall_s": round(statistics.median(k[1] for k in keyed), 3),
        "rounds_plain_cpu_ms": [round(p[0], 3) for p in plain],
        "rounds_keyed_cpu_ms": [round(k[0], 3) for k in keyed],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
