"""Throughput of the distributed runtime: tasks per second for 1, 2 and 4 worker processes.

Each round uses a fresh PostgreSQL database, one `interlock orchestrate` process and N
`interlock worker` processes, records RUNS runs of a fan-out pipeline (a plan, ITEMS writers,
a merge: ITEMS + 2 tasks each, trivial `call:` workers so the figure measures the machinery),
and times from the first submission until every run is delivered.

    python benchmarks/distributed.py [--runs 60] [--items 8] [--workers 1,2,4] [--latency 0.05]

Two series: no-op tasks (the machinery alone: on a small machine the CPU it shares with
PostgreSQL and the orchestrator is the limit) and tasks that wait `--latency` seconds in
their worker, as a model call does (then the workers' slots are the limit, and adding
workers adds throughput). Each line also gives how busy the machine's CPUs were.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from interlock.api import Interlock

ADMIN = os.environ.get("INTERLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

WORKFLOW = """
bench:
  phases:
    - id: plan
      workers:
        - role: planner
          call: bench_tasks:plan
          extract:
            items: {json: items, type: list}
    - id: write
      for_each: planner.items
      workers:
        - role: writer
          call: bench_tasks:write
    - id: merge
      workers:
        - role: editor
          call: bench_tasks:merge
          reads: [writer.md]
          final: true
"""

TASKS = """
import json, os, time

LATENCY = float(os.environ.get("BENCH_LATENCY", "0"))

def plan(context):
    count = int(os.environ["BENCH_ITEMS"])
    return json.dumps({"items": [f"{context.topic}-{i}" for i in range(count)]})

def write(context):
    if LATENCY:
        time.sleep(LATENCY)  # a stand-in for a model call's wait
    return f"About {context.item}.\\n"

def merge(context):
    return context.read("writer.md")
"""


def admin(statement: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as db:
        db.execute(statement)


def delivered(url: str) -> int:
    with psycopg.connect(url) as db:
        row = db.execute("SELECT count(*) FROM runs WHERE status = 'delivered'").fetchone()
    return int(row[0]) if row else 0


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def measure(
    workers: int, runs: int, items: int, root: Path, latency: float = 0.0, timeout: float = 600.0
) -> tuple[float, float]:
    """(tasks per second, share of the machine's CPU busy) with `workers` worker processes."""
    name = f"il_bench_{uuid.uuid4().hex[:8]}"
    admin(f"CREATE DATABASE {name}")
    url = ADMIN.rsplit("/", 1)[0] + "/" + name
    work = root / name
    work.mkdir()
    (work / "bench.yaml").write_text(WORKFLOW)
    (work / "bench_tasks.py").write_text(TASKS)
    env = {
        **os.environ,
        "PYTHONPATH": str(work),
        "INTERLOCK_STORE": url,
        "INTERLOCK_HOME": str(work / "home"),
        "BENCH_ITEMS": str(items),
        "BENCH_LATENCY": str(latency),
    }
    app = Interlock(work / "submit", store=url)  # migrates before the processes start
    command = [sys.executable, "-m", "interlock"]
    processes = [subprocess.Popen([*command, "orchestrate"], env=env, cwd=work)]
    processes += [
        subprocess.Popen([*command, "worker", "--concurrency", "4"], env=env, cwd=work)
        for _ in range(workers)
    ]
    try:
        time.sleep(2.0)  # let every process connect before the clock starts
        os.environ["BENCH_ITEMS"] = str(items)
        started, cpu_before = time.perf_counter(), cpu_times()
        for i in range(runs):
            run_id = app.start(work / "bench.yaml", topic=f"t{i}")
            app.orchestrator.release(app.orchestrator.drivers[run_id])
        deadline = time.monotonic() + timeout
        while delivered(url) < runs:
            for process in processes:
                if process.poll() is not None:
                    raise SystemExit(
                        f"{' '.join(process.args[2:])} exited with code {process.returncode} "
                        f"before the {runs} runs were delivered (its output is above)"
                    )
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{delivered(url)} of {runs} runs delivered after {timeout:g} s; "
                    "raise --timeout on a slow machine"
                )
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        busy, total = (now - then for now, then in zip(cpu_times(), cpu_before, strict=True))
    finally:
        app.close()
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=30)
        admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return runs * (items + 2) / elapsed, busy / max(total, 1)


def worker_counts(text: str) -> list[int]:
    """An argparse type: "1,2,4" as [1, 2, 4]."""
    counts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() and int(part) > 0 for part in counts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of positive numbers like 1,2,4")
    return [int(part) for part in counts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument(
        "--workers", type=worker_counts, default="1,2,4", help="comma-separated process counts"
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=0.05,
        help="seconds each writer task waits, as a model call would (second series)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds a round may take before it fails"
    )
    parser.add_argument("--json", action="store_true", help="End with one line of JSON.")
    args = parser.parse_args()
    print(f"{args.runs} runs x {args.items + 2} tasks, {os.cpu_count()} CPUs")
    figures: dict[str, float] = {}
    series = [("noop", 0.0)] + ([("wait", args.latency)] if args.latency else [])
    with tempfile.TemporaryDirectory() as root:
        for label, latency in series:
            for count in args.workers:
                rate, busy = measure(
                    count, args.runs, args.items, Path(root), latency, args.timeout
                )
                figures[f"{label}_tasks_per_s_{count}_workers"] = round(rate, 1)
                figures[f"{label}_cpu_busy_{count}_workers"] = round(busy, 2)
                what = "no-op tasks" if not latency else f"tasks waiting {latency * 1000:g} ms"
                print(
                    f"{what}, {count} worker process(es): {rate:7.1f} tasks/s "
                    f"(CPU {busy:.0%} busy)",
                    flush=True,
                )
    if args.json:
        summary = {"runs": args.runs, "tasks_per_run": args.items + 2, "latency_s": args.latency}
        print(json.dumps({**summary, **figures}))


if __name__ == "__main__":
    main()
