"""Throughput of the distributed runtime: tasks per second for 1, 2 and 4 worker processes.

Each round uses a fresh PostgreSQL database, one `interlock orchestrate` process and N
`interlock worker` processes, records RUNS runs of a fan-out pipeline (a plan, ITEMS writers,
a merge: ITEMS + 2 tasks each, trivial `call:` workers so the figure measures the machinery),
and times from the first submission until every run is delivered.

    python benchmarks/distributed.py [--runs 60] [--items 8] [--workers 1,2,4] [--latency 0.05]
                                     [--orchestrators 1] [--dbos RUNS]

Run folders and the workers' folders go under TMPDIR (the report names its file system: on ext4
without a journal, creating files costs far more; see docs/scaling.md).

Before the clock starts one run goes through and the processes are left to settle, so the
CPU per task is the steady state's, without the processes' start-up (seconds of CPU on a
busy machine). `--dbos RUNS` also measures DBOS on the same server in the same invocation
(its CPU per step, in its process and in PostgreSQL's), after
`bash benchmarks/peers/setup.sh dbos`.

Two series: no-op tasks (the machinery alone: on a small machine the CPU it shares with
PostgreSQL and the orchestrator is the limit) and tasks that wait `--latency` seconds in
their worker, as a model call does (then the workers' slots are the limit, and adding
workers adds throughput). Each line also gives how busy the machine's CPUs were.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from run import filesystem

from interlock import Interlock, load_workflow

COMMIT_ORDER_LOCK = 4849676  # the advisory lock of `commit_order` (storage/sql/postgres)
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


def delivered(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM runs WHERE status = 'delivered'").fetchone()
    return int(row[0]) if row else 0


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far; 0 once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backends(url: str, name: str) -> list[int]:
    """Process ids of the PostgreSQL server processes serving database `name`."""
    with psycopg.connect(url, autocommit=True) as db:
        rows = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def wait_delivered(
    watch: psycopg.Connection[Any],
    runs: int,
    processes: list[subprocess.Popen[bytes]],
    deadline: float,
) -> None:
    """Until `runs` runs are delivered; exits naming the trouble if a process dies or the
    deadline passes."""
    while delivered(watch) < runs:
        for process in processes:
            if process.poll() is not None:
                raise SystemExit(
                    f"{' '.join(map(str, process.args[2:]))} exited with code "
                    f"{process.returncode} before {runs} runs were delivered (its output is above)"
                )
        if time.monotonic() > deadline:
            raise SystemExit(
                f"{delivered(watch)} of {runs} runs delivered in time; "
                "raise --timeout on a slow machine"
            )
        time.sleep(0.05)


def settle(processes: list[subprocess.Popen[bytes]], limit: float = 20.0) -> None:
    """Wait (up to `limit` seconds) until no process used more than 20 ms of CPU in the last
    half second: what is still starting up is not charged to the tasks measured."""
    deadline = time.monotonic() + limit
    before = [process_cpu(p.pid) for p in processes]
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = [process_cpu(p.pid) for p in processes]
        if all(b - a < 0.02 for a, b in zip(before, now, strict=True)):
            return
        before = now


class LockWatch(threading.Thread):
    """Samples, every 5 ms, whether some transaction waits for the commit-order lock (the
    advisory lock every append takes): the share of samples with a waiter says whether it
    binds."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True)
        self.name, self.samples, self.waiting = name, 0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        # From the admin database: its server process is not counted as the benchmark's.
        with psycopg.connect(ADMIN, autocommit=True) as db:
            while not self.stop.wait(0.005):
                row = db.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE l.locktype = 'advisory' AND l.objid = %s AND NOT l.granted "
                    "AND d.datname = %s",
                    (COMMIT_ORDER_LOCK, self.name),
                ).fetchone()
                self.samples += 1
                self.waiting += bool(row and row[0])


def measure(
    workers: int,
    runs: int,
    items: int,
    root: Path,
    latency: float = 0.0,
    timeout: float = 600.0,
    orchestrators: int = 1,
    concurrency: int | None = None,
) -> tuple[float, float, dict[str, float], float]:
    """(tasks per second, share of the machine's CPU busy, CPU ms per task by process kind,
    share of the time an append waited for the commit-order lock) with `workers` worker
    processes and `orchestrators` orchestrator processes."""
    name = f"il_bench_{uuid.uuid4().hex[:8]}"
    admin(f"CREATE DATABASE {name}")
    url = ADMIN.rsplit("/", 1)[0] + "/" + name
    work = root / name
    work.mkdir()
    (work / "bench.yaml").write_text(WORKFLOW)
    (work / "bench_tasks.py").write_text(TASKS)
    env = {
        **os.environ,
        # The tasks module, then whatever interlock the caller chose (its PYTHONPATH).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")])),
        "INTERLOCK_STORE": url,
        "INTERLOCK_HOME": str(work / "home"),
        "BENCH_ITEMS": str(items),
        "BENCH_LATENCY": str(latency),
    }
    app = Interlock(work / "submit", store=url)  # migrates before the processes start
    command = [sys.executable, "-m", "interlock"]
    processes = [
        subprocess.Popen([*command, "orchestrate"], env=env, cwd=work) for _ in range(orchestrators)
    ]
    slots = [] if concurrency is None else ["--concurrency", str(concurrency)]
    processes += [
        subprocess.Popen([*command, "worker", *slots], env=env, cwd=work) for _ in range(workers)
    ]
    try:
        os.environ["BENCH_ITEMS"] = str(items)
        # One run before the clock starts: the processes have imported and connected what
        # they need (on a busy machine that takes seconds of CPU, which is start-up cost,
        # not a task's), then they are left to settle.
        app.submit(work / "bench.yaml", topic="w")
        watch = psycopg.connect(url, autocommit=True)  # one connection, not one per look
        wait_delivered(watch, 1, processes, time.monotonic() + timeout)
        settle(processes)
        started, cpu_before = time.perf_counter(), cpu_times()
        before = {p.pid: process_cpu(p.pid) for p in processes}
        server = {pid: process_cpu(pid) for pid in backends(url, name)}
        lock = LockWatch(name)
        lock.start()
        me = time.thread_time()  # this thread's: the lock's sampler is not the submitter
        # Parsed once, as a program submitting many runs of one pipeline would.
        definition = load_workflow(work / "bench.yaml").get("bench")
        for i in range(runs):
            app.submit(definition, topic=f"t{i}")
        submitting = time.thread_time() - me
        wait_delivered(watch, runs + 1, processes, time.monotonic() + timeout)
        elapsed = time.perf_counter() - started
        watch.close()
        lock.stop.set()
        lock.join()
        busy, total = (now - then for now, then in zip(cpu_times(), cpu_before, strict=True))
        tasks = runs * (items + 2)
        spent = {p.pid: process_cpu(p.pid) - before[p.pid] for p in processes}
        server_spent = sum(process_cpu(pid) - server.get(pid, 0.0) for pid in backends(url, name))
        cpu = {
            "orchestrators": sum(spent[p.pid] for p in processes[:orchestrators]),
            "workers": sum(spent[p.pid] for p in processes[orchestrators:]),
            "postgres": server_spent,
            "submitter": submitting,
        }
        per_task = {k: round(v * 1000 / tasks, 2) for k, v in cpu.items()}
        waited = lock.waiting / max(lock.samples, 1)
    finally:
        app.close()
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=30)
        admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return runs * (items + 2) / elapsed, busy / max(total, 1), per_task, waited


def dbos_round(python: Path, runs: int, concurrent: int) -> tuple[float, float, dict[str, Any]]:
    """(CPU seconds of the DBOS process, CPU seconds of the PostgreSQL server processes
    serving its database, its JSON line) for one `peers/dbos_research3.py` invocation."""
    name = f"il_bench_dbos_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "BENCH_DBOS_DB": name, "BENCH_PG_ADMIN_URL": ADMIN}
    script = Path(__file__).parent / "peers" / "dbos_research3.py"
    argv = [str(python), str(script), "--backend", "postgres"]
    argv += ["--runs", str(runs), "--concurrent", str(concurrent)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    seen: dict[int, float] = {}  # server process -> CPU seconds when last seen
    with psycopg.connect(ADMIN, autocommit=True) as db:
        while child.poll() is None:
            rows = db.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchall()
            for (pid,) in rows:
                seen[int(pid)] = max(seen.get(int(pid), 0.0), process_cpu(int(pid)))
            time.sleep(0.1)
    out, _ = child.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # only this child ended meanwhile
    spent = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    line = json.loads(out.strip().splitlines()[-1])
    if line.get("error"):
        raise SystemExit(f"DBOS failed: {line['error']}")
    return spent, sum(seen.values()), line


def dbos_cpu(python: Path, runs: int) -> dict[str, float]:
    """DBOS's CPU per step (its process and the PostgreSQL server's, in ms) and its steps/s
    on research-3 runs (3 steps each): `runs` sequential and `runs` concurrent runs, less
    a round of one run (start-up, warm-up and teardown cost the same in both)."""
    small = dbos_round(python, 1, 0)
    full = dbos_round(python, runs, runs)
    steps = (runs + runs - 1) * 3
    return {
        "dbos": round((full[0] - small[0]) * 1000 / steps, 2),
        "postgres": round((full[1] - small[1]) * 1000 / steps, 2),
        "concurrent_steps_per_s": round(3 * float(full[2]["concurrent_runs_per_s"] or 0), 1),
        "sequential_steps_per_s": round(3 * float(full[2]["sequential_runs_per_s"] or 0), 1),
    }


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
    parser.add_argument(
        "--orchestrators", type=int, default=1, help="`interlock orchestrate` processes"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="tasks each worker process runs at once (`interlock worker --concurrency`; "
        "unless given, the workers' own default: 32 `call:` tasks)",
    )
    parser.add_argument(
        "--dbos",
        type=int,
        default=0,
        metavar="RUNS",
        help="also measure DBOS on the same server (RUNS sequential and RUNS concurrent "
        "research-3 runs; needs `bash benchmarks/peers/setup.sh dbos`)",
    )
    parser.add_argument("--json", action="store_true", help="End with one line of JSON.")
    args = parser.parse_args()
    print(
        f"{args.runs} runs x {args.items + 2} tasks, {args.orchestrators} orchestrator(s), "
        f"workers running {args.concurrency or 'their default of 32'} tasks at once, "
        f"{os.cpu_count()} CPUs"
    )
    figures: dict[str, float] = {}
    series = [("noop", 0.0)] + ([("wait", args.latency)] if args.latency else [])
    with tempfile.TemporaryDirectory() as root:
        where = filesystem(root)
        print(f"run folders and workers' folders on: {where} (set TMPDIR to move them)")
        if where.endswith("no journal"):
            print("  (ext4 without a journal: every file created walks past the inodes freed in")
            print("   the last minutes; see docs/scaling.md, 'Where the rest went')")
        for label, latency in series:
            for count in args.workers:
                rate, busy, per_task, waited = measure(
                    count,
                    args.runs,
                    args.items,
                    Path(root),
                    latency,
                    args.timeout,
                    args.orchestrators,
                    args.concurrency,
                )
                figures[f"{label}_tasks_per_s_{count}_workers"] = round(rate, 1)
                figures[f"{label}_cpu_busy_{count}_workers"] = round(busy, 2)
                total = round(sum(per_task.values()), 2)
                figures[f"{label}_cpu_ms_per_task_{count}_workers"] = total
                figures[f"{label}_lock_waited_{count}_workers"] = round(waited, 3)
                shares = ", ".join(f"{k} {v:g}" for k, v in per_task.items())
                what = "no-op tasks" if not latency else f"tasks waiting {latency * 1000:g} ms"
                print(
                    f"{what}, {count} worker process(es): {rate:7.1f} tasks/s "
                    f"(CPU {busy:.0%} busy); CPU per task {total:g} ms ({shares}); "
                    f"an append waited for the commit-order lock {waited:.1%} of the time",
                    flush=True,
                )
    if args.dbos:
        python = Path(__file__).parent / ".envs" / "dbos" / "bin" / "python"
        if not python.exists():
            raise SystemExit(f"{python} is missing: run `bash benchmarks/peers/setup.sh dbos`")
        dbos = dbos_cpu(python, args.dbos)
        total = round(dbos["dbos"] + dbos["postgres"], 2)
        figures.update({f"dbos_{k}": v for k, v in dbos.items()})
        figures["dbos_cpu_ms_per_step"] = total
        print(
            f"DBOS on the same server: {dbos['concurrent_steps_per_s']:g} steps/s concurrent, "
            f"{dbos['sequential_steps_per_s']:g} sequential; CPU per step {total:g} ms "
            f"(dbos {dbos['dbos']:g}, postgres {dbos['postgres']:g})",
            flush=True,
        )
    if args.json:
        summary = {
            "runs": args.runs,
            "tasks_per_run": args.items + 2,
            "latency_s": args.latency,
            "orchestrators": args.orchestrators,
            "worker_concurrency": args.concurrency,
        }
        print(json.dumps({**summary, **figures}))


if __name__ == "__main__":
    main()
