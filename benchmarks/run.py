"""interlock's benchmark suite: orchestration overhead, throughput, scale, recovery, peers,
and what `check` costs on a wide phase.

    python benchmarks/run.py                 # everything (peers need benchmarks/peers/setup.sh)
    python benchmarks/run.py --only sequential,concurrent --runs 200

Workload "research-3": a first phase with two workers in parallel, a second with one worker
reading both outputs; workers are no-op Python callables returning a short string, so only
orchestration is measured; every transition is durably committed (SQLite, synchronous=FULL).
Prints a table and writes `benchmarks/results/latest.json` (with the machine it ran on).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interlock import Interlock, parse_workflow, register
from interlock.core import events as ev
from interlock.runtime.executors import TaskContext
from interlock.runtime.orchestrator import Orchestrator, Settings
from interlock.storage.base import NewEvent

HERE = Path(__file__).resolve().parent
RESEARCH3 = """
research-3:
  phases:
    - id: collect
      workers:
        - {role: a, call: bench_noop}
        - {role: b, call: bench_noop}
    - id: synthesis
      workers:
        - {role: s, call: bench_noop, reads: [a.md, b.md], final: true}
"""
WAITING = RESEARCH3.replace("research-3", "waiting").replace("bench_noop", "bench_wait", 1)

DONE_AT: dict[str, float] = {}  # run/task -> when the worker function returned
RELEASE: asyncio.Event  # made anew inside each event loop (an Event binds to its loop)


async def noop(ctx: TaskContext) -> str:
    DONE_AT[f"{ctx.spec.run_id}/{ctx.spec.task_id}"] = time.perf_counter()
    return "ok"


async def wait_for_signal(ctx: TaskContext) -> str:
    await release_event().wait()
    return "ok"


register("bench_noop", noop)
register("bench_wait", wait_for_signal)
DEFINITION = parse_workflow(RESEARCH3).get("research-3")
WAIT_DEFINITION = parse_workflow(WAITING).get("waiting")


def release_event(fresh: bool = False) -> asyncio.Event:
    """The signal waiting workers wait for, belonging to the running loop."""
    global RELEASE
    if fresh or "RELEASE" not in globals():
        RELEASE = asyncio.Event()
    return RELEASE


def peak_rss_mib() -> float:
    """Peak resident memory of this process."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


SCRATCH: list[str] = []  # folders made by this invocation; `main` removes them at exit


def scratch(prefix: str) -> Path:
    """A new temporary folder, remembered for removal."""
    folder = tempfile.mkdtemp(prefix=prefix)
    SCRATCH.append(folder)
    return Path(folder)


def remove_scratch() -> None:
    for folder in SCRATCH:
        shutil.rmtree(folder, ignore_errors=True)
    SCRATCH.clear()


def fresh_app(
    concurrency: int = 64, synchronous: str = "FULL", store: str | None = None
) -> Interlock:
    home = scratch("interlock-bench-")
    settings = Settings(max_concurrency=concurrency, heartbeat=0.5)
    if store is not None:
        return Interlock(home, settings=settings, store=store)
    return Interlock(home, settings=settings, synchronous=synchronous)  # type: ignore[arg-type]


class DispatchLatency:
    """Time from the last collect worker returning to the synthesis dispatch being durable."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def __call__(self, run_id: str, seq: int, new: NewEvent, state: Any) -> None:
        event = new.event
        if isinstance(event, ev.TaskDispatched) and event.role == "s":
            done = max(DONE_AT.pop(f"{run_id}/a@1", 0), DONE_AT.pop(f"{run_id}/b@1", 0))
            if done:
                self.samples.append(time.perf_counter() - done)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def sequential(runs: int, synchronous: str = "FULL", store: str | None = None) -> dict[str, Any]:
    """Runs one after another: the overhead interlock adds to every step."""
    app = fresh_app(synchronous=synchronous, store=store)
    latency = DispatchLatency()
    app.orchestrator.listeners.append(latency)

    async def go() -> float:
        started = time.perf_counter()
        for _ in range(runs):
            app.orchestrator.create_run(DEFINITION, topic="bench")
            await app.orchestrator.run_until_settled()
        return time.perf_counter() - started

    elapsed = asyncio.run(go())
    return {
        "runs": runs,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(runs / elapsed, 1),
        "ms_per_step": round(elapsed / runs / 3 * 1000, 3),
        "handoff_p50_ms": round(percentile(latency.samples, 0.5) * 1000, 3),
        "handoff_p99_ms": round(percentile(latency.samples, 0.99) * 1000, 3),
    }


def concurrent(runs: int, store: str | None = None) -> dict[str, Any]:
    """Many runs started at once, driven by one orchestrator with group commit."""
    app = fresh_app(concurrency=256, store=store)
    latency = DispatchLatency()
    app.orchestrator.listeners.append(latency)

    async def go() -> float:
        started = time.perf_counter()
        app.orchestrator.create_runs([(DEFINITION, "bench", None, None)] * runs)
        await app.orchestrator.run_until_settled()
        return time.perf_counter() - started

    elapsed = asyncio.run(go())
    return {
        "runs": runs,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(runs / elapsed, 1),
        "steps_per_s": round(3 * runs / elapsed, 1),
        "handoff_p99_ms": round(percentile(latency.samples, 0.99) * 1000, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def tick_cost(orchestrator: Orchestrator, run_id: str, repeat: int = 200) -> float:
    """Median seconds of one tick of one run that has a new observation each time."""
    driver = orchestrator.drivers[run_id]
    samples = []
    for i in range(repeat):
        driver.commands.append(_note(run_id, i))
        orchestrator._mark(driver)
        started = time.perf_counter()
        orchestrator._tick(time.time())
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _note(run_id: str, i: int) -> Any:
    from interlock.storage.base import CommandRecord

    return CommandRecord(id=-(i + 1), run_id=run_id, kind="message", message=f"note {i}")


def scale(runs: int) -> dict[str, Any]:
    """Thousands of runs in flight, then completed; tick cost against history length."""
    app = fresh_app(concurrency=runs * 2)
    orchestrator = app.orchestrator

    async def go() -> dict[str, Any]:
        release_event(fresh=True)
        started = time.perf_counter()
        for chunk in range(0, runs, 1000):
            count = min(1000, runs - chunk)
            orchestrator.create_runs([(WAIT_DEFINITION, "scale", None, None)] * count)
        driving = asyncio.create_task(orchestrator.run_until_settled())
        while sum(len(d.workers.handles) for d in orchestrator.drivers.values()) < runs:
            await asyncio.sleep(0.05)
        in_flight_s = time.perf_counter() - started
        rss_in_flight = peak_rss_mib()
        release_event().set()
        await driving
        return {
            "runs": runs,
            "seconds_to_all_in_flight": round(in_flight_s, 2),
            "seconds_total": round(time.perf_counter() - started, 2),
            "peak_rss_mib_in_flight": round(rss_in_flight, 1),
        }

    result = asyncio.run(go())
    result.update(history_independence())
    return result


def history_independence() -> dict[str, Any]:
    """A run's tick costs the same with 10 and with 10,000 earlier events."""
    app = fresh_app()
    orchestrator = app.orchestrator

    async def go() -> tuple[float, float]:
        release_event(fresh=True)
        short = orchestrator.create_run(WAIT_DEFINITION, topic="short")
        long = orchestrator.create_run(WAIT_DEFINITION, topic="long")
        driving = asyncio.create_task(orchestrator.run_until_settled())
        await asyncio.sleep(0.2)
        driver = orchestrator.drivers[long]
        for i in range(0, 10_000, 500):  # grow the history in large appends
            from interlock.storage.base import AppendBatch

            notes = [
                NewEvent(event=ev.MessageNoted(at=time.time(), message=f"n{j}"))
                for j in range(i, i + 500)
            ]
            for note in notes:
                from interlock.core.state import apply

                apply(driver.state, note.event)
            orchestrator.store.append(
                AppendBatch(lease=driver.lease, events=notes, summary=driver.summary()), time.time()
            )
        cost_short = tick_cost(orchestrator, short)
        cost_long = tick_cost(orchestrator, long)
        release_event().set()
        await driving
        return cost_short, cost_long

    short, long = asyncio.run(go())
    return {
        "tick_ms_10_events": round(short * 1000, 3),
        "tick_ms_10000_events": round(long * 1000, 3),
        "tick_ratio_long_over_short": round(long / short, 2),
    }


RECOVERY_CHILD = """
import asyncio, sys, time
sys.path.insert(0, {here!r})
import run as bench
from interlock import Interlock
from interlock.runtime.orchestrator import Settings
app = Interlock({home!r}, settings=Settings(max_concurrency=100000))
async def go():
    app.orchestrator.create_runs([(bench.WAIT_DEFINITION, "recovery", None, None)] * {runs})
    task = asyncio.create_task(app.orchestrator.run_until_settled())
    while sum(len(d.workers.handles) for d in app.orchestrator.drivers.values()) < {runs}:
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    await task
asyncio.run(go())
"""


def recovery(runs: int) -> dict[str, Any]:
    """kill -9 with runs in flight, then time until every run is driven again."""
    home = str(scratch("interlock-recovery-"))
    child = subprocess.Popen(
        [sys.executable, "-c", RECOVERY_CHILD.format(here=str(HERE), home=home, runs=runs)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    started = time.perf_counter()
    app = Interlock(home, settings=Settings(max_concurrency=runs * 2))
    orchestrator = app.orchestrator

    async def go() -> float:
        release_event(fresh=True)
        for record in app.store.list_runs(status="running", limit=runs * 2):
            orchestrator.take(record.run_id)
        driving = asyncio.create_task(orchestrator.run_until_settled())
        while sum(len(d.workers.handles) for d in orchestrator.drivers.values()) < runs:
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
        release_event().set()
        await driving
        return elapsed

    elapsed = asyncio.run(go())
    return {"runs": runs, "seconds_until_all_driven": round(elapsed, 3)}


PG_ADMIN = os.environ.get("INTERLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def postgres(runs: int, concurrent_runs: int) -> dict[str, Any]:
    """research-3 with the ledger in PostgreSQL (a fresh database), sequential and concurrent."""
    import uuid

    import psycopg

    name = f"il_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    try:
        seq = sequential(runs, store=url)
        con = concurrent(concurrent_runs, store=url)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return {
        "sequential_runs_per_s": seq["runs_per_s"],
        "sequential_ms_per_step": seq["ms_per_step"],
        "handoff_p50_ms": seq["handoff_p50_ms"],
        "concurrent_runs": con["runs"],
        "concurrent_runs_per_s": con["runs_per_s"],
    }


def commit_floor(runs: int, concurrent_runs: int) -> dict[str, Any]:
    """The disk's ceiling for research-3: the same three durable transactions per run (create
    with its dispatches; both results with the next dispatch; the last result with delivery),
    written by bare sqlite3 with no orchestration at all; then the same with the files a run
    leaves (its folder, three outputs, `final.md`, `status.json` written atomically, the move
    to the archive), written plainly as interlock writes them. On a journaling file system the
    fsync of each commit also flushes those files' new blocks, so they cost disk time too.

    Then the ceiling of group commit, as the `concurrent` section drives its runs: the same
    transactions and files for `concurrent_runs` runs, GROUP runs to a transaction (the
    `concurrent` section's 256 tasks at once are 128 runs' first phase)."""
    commits_only = _floor(runs, with_files=False)
    with_files = _floor(runs, with_files=True)
    grouped = _floor(concurrent_runs, with_files=False, group=GROUP)
    grouped_files = _floor(concurrent_runs, with_files=True, group=GROUP)
    return {
        "runs": runs,
        "runs_per_s": round(commits_only, 1),
        "with_run_files_runs_per_s": round(with_files, 1),
        "group_commit_runs": concurrent_runs,
        "group_commit_runs_per_s": round(grouped, 1),
        "group_commit_with_run_files_runs_per_s": round(grouped_files, 1),
    }


GROUP = 128  # runs to a transaction in the group-commit floor


def _floor(runs: int, *, with_files: bool, group: int = 1) -> float:
    import sqlite3

    folder = scratch("interlock-floor-")
    (folder / "runs").mkdir()
    (folder / "archive").mkdir()
    db = sqlite3.connect(folder / "t.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, last_seq INT, status TEXT)")
    db.execute(
        "CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT, seq INT, kind TEXT, "
        "data TEXT, UNIQUE (run_id, seq))"
    )

    def write(path: Path, data: bytes, atomic: bool = False) -> None:
        target = path.with_suffix(".tmp") if atomic else path
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)
        if atomic:
            os.replace(target, path)

    status = b'{"status":"running"}' * 20
    run_ids = [f"research-3-{i:012x}" for i in range(runs)]
    started = time.perf_counter()
    for first in range(0, runs, group):
        together = run_ids[first : first + group]
        for step, count in enumerate((4, 8, 5)):  # events per commit in a research-3 run
            db.execute("BEGIN IMMEDIATE")
            for run_id in together:
                if step == 0:
                    db.execute("INSERT INTO runs VALUES (?, 0, 'running')", (run_id,))
                    if with_files:
                        os.mkdir(folder / "runs" / run_id)
                (seq,) = db.execute(
                    "SELECT last_seq FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                rows = [
                    (run_id, seq + k, "event", '{"task_id":"a@1"}') for k in range(1, count + 1)
                ]
                db.executemany(
                    "INSERT INTO events (run_id, seq, kind, data) VALUES (?,?,?,?)", rows
                )
                db.execute("UPDATE runs SET last_seq = ? WHERE run_id = ?", (seq + count, run_id))
            db.execute("COMMIT")
            if with_files and step == 1:
                for run_id in together:
                    write(folder / "runs" / run_id / "a.md", b"ok")
                    write(folder / "runs" / run_id / "b.md", b"ok")
        if with_files:
            for run_id in together:
                run_dir = folder / "runs" / run_id
                write(run_dir / "s.md", b"ok")
                write(run_dir / "final.md", b"ok")
                write(run_dir / "status.json", status, atomic=True)
                os.rename(run_dir, folder / "archive" / run_id)
    return runs / (time.perf_counter() - started)


def disk_limits() -> dict[str, Any]:
    """What this disk allows: SQLite commits/s (WAL, synchronous=FULL) and fsyncs/s."""
    import sqlite3

    folder = scratch("interlock-disk-")
    db = sqlite3.connect(folder / "t.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (x)")
    count, started = 2000, time.perf_counter()
    for i in range(count):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t VALUES (?)", (i,))
        db.execute("COMMIT")
    commits = count / (time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(count):
        fd = os.open(folder / "f", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"x")
        os.fsync(fd)
        os.close(fd)
    fsyncs = count / (time.perf_counter() - started)
    return {"sqlite_commits_per_s": round(commits), "fsyncs_per_s": round(fsyncs)}


def distributed() -> dict[str, Any]:
    """Tasks/s on PostgreSQL with 1, 2 and 4 worker processes (benchmarks/distributed.py)."""
    script = HERE / "distributed.py"
    if not script.exists():
        return {"error": "benchmarks/distributed.py is missing"}
    result = subprocess.run(
        [sys.executable, str(script), "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    if result.returncode != 0 or not lines:
        return {"error": (result.stderr or result.stdout)[-500:]}
    return dict(json.loads(lines[-1]))


def peers(runs: int, concurrent_runs: int) -> list[dict[str, Any]]:
    """The same workload on the peers, each in its own environment."""
    sys.path.insert(0, str(HERE / "peers"))
    from run_peers import run_all  # type: ignore[import-not-found]

    return list(run_all(runs, concurrent_runs, None))


def check_width(width: int) -> dict[str, Any]:
    """`interlock check`'s work on one parallel phase of `width` no-op workers, then a final one.

    Loading (parse, validate) and exploring are timed apart; exploring used to be exponential
    in the width (16 workers did not finish in a minute).
    """
    from interlock.core.explore import explore

    workers = [{"role": f"w{n}", "call": "bench_noop"} for n in range(width)]
    phases = [
        {"id": "fan", "workers": workers},
        {"id": "out", "workers": [{"role": "z", "call": "bench_noop", "final": True}]},
    ]
    text = json.dumps({"wide": {"phases": phases}})
    cpu, wall = time.process_time(), time.perf_counter()
    definition = parse_workflow(text, json_only=True).get("wide")
    loaded_cpu, loaded_wall = time.process_time(), time.perf_counter()
    report = explore(definition)
    assert report.sound, report.problems
    return {
        "width": width,
        "file_bytes": len(text),
        "load_s": round(loaded_wall - wall, 3),
        "explore_s": round(time.perf_counter() - loaded_wall, 3),
        "explore_cpu_s": round(time.process_time() - loaded_cpu, 3),
        "total_cpu_s": round(time.process_time() - cpu, 3),
        "states": report.states,
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def check_depth(depths: list[int]) -> dict[str, Any]:
    """`interlock check`'s exploring of a pipeline of n phases of one no-op worker each, for
    each n in `depths`, with each phase's way on a condition over the previous worker's value.

    Exploring used to be quadratic in the number of phases (each fork copied, and each state's
    key hashed, the whole history: 600 phases took ~4 s); the CPU per phase should stay flat.
    """
    from interlock.core.explore import explore

    rows = []
    for depth in depths:
        phases: list[dict[str, Any]] = []
        for n in range(depth):
            extract = {"ok": {"json": "ok", "type": "bool"}}
            phases.append({"id": f"p{n}", "workers": [{"role": f"w{n}", "call": "bench_noop"}]})
            phases[-1]["workers"][0]["extract"] = extract
            if 0 < n < depth - 1:
                phases[-1]["next"] = [{"if": f"w{n - 1}.ok", "goto": f"p{n + 1}"}]
        phases[-1]["workers"][0]["final"] = True
        definition = parse_workflow(json.dumps({"deep": {"phases": phases}}), json_only=True)
        cpu, wall = time.process_time(), time.perf_counter()
        report = explore(definition.get("deep"), max_states=10 * depth + 100)
        assert report.sound, report.problems
        spent = time.process_time() - cpu
        rows.append(
            {
                "phases": depth,
                "states": report.states,
                "explore_s": round(time.perf_counter() - wall, 3),
                "explore_cpu_s": round(spent, 3),
                "cpu_ms_per_phase": round(1000 * spent / depth, 3),
            }
        )
    return {"depths": rows, "peak_rss_mib": round(peak_rss_mib(), 1)}


SHAPE_EXTRACT = {"ok": {"json": "ok", "type": "bool"}, "xs": {"json": "xs", "type": "list"}}


def check_shape(name: str, length: int) -> dict[str, Any]:
    """A pipeline of `length` phases of one no-op worker, with the ways of shape `name`:
    `optional` (each phase may skip the next), `diamond` (one of two phases, then both ways
    join), `reads_first` (each may skip the next on the first worker's value and its own),
    `fan_out` (each fans out over the first worker's list and may skip the next), `pauses`
    (each pauses for a person and may skip the next), `loops` (each runs again while its
    value says not ok, at most 3 times), `loops_back` (each sends the run back to the one
    before while its value says not ok, `max_visits: 2`), `back_two` (the same, two phases
    back), `back_skip` (back to the one before, or on to the one after the next),
    `back_fan_out` (loops back in phases that fan out over the first worker's list),
    `back_pauses` (loops back in phases that pause for a person), `back_always` (every
    third phase always sends the run back two phases, `max_visits: 2`, no condition)."""
    phases: list[dict[str, Any]] = [
        {"id": f"p{n}", "workers": [{"role": f"w{n}", "call": "bench_noop"}]} for n in range(length)
    ]
    for n, phase in enumerate(phases):
        phase["workers"][0]["extract"] = SHAPE_EXTRACT
        skip = [{"if": f"w{n}.ok", "goto": f"p{n + 2}"}] if n + 2 < length else []
        if name == "optional":
            phase["next"] = skip
        elif name == "diamond" and n % 3 == 0 and n + 3 < length:
            phase["next"] = skip
            phases[n + 1]["next"] = [{"goto": f"p{n + 3}"}]
        elif name == "reads_first" and n + 2 < length:
            phase["next"] = [{"if": f"w0.ok && w{n}.ok", "goto": f"p{n + 2}"}]
        elif name == "fan_out" and 0 < n < length - 1:
            phase["for_each"] = {"items": "w0.xs", "concurrency": 2}
            phase["next"] = skip
        elif name == "pauses" and n < length - 1:
            phase["pause_after"] = True
            phase["next"] = skip
        elif name == "loops" and n < length - 1:
            phase["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n}", "max_visits": 3}]
        elif name == "loops_back" and 0 < n < length - 1:
            phase["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n - 1}", "max_visits": 2}]
        elif name == "back_two" and 1 < n < length - 1:
            phase["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n - 2}", "max_visits": 2}]
        elif name == "back_skip" and 0 < n < length - 1:
            phase["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n - 1}", "max_visits": 2}, *skip]
        elif name == "back_fan_out" and 0 < n < length - 1:
            phase["for_each"] = {"items": "w0.xs", "concurrency": 2}
            phase["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n - 1}", "max_visits": 2}]
        elif name == "back_pauses" and 0 < n < length - 1:
            phase["pause_after"] = True
            phase["next"] = [{"if": f"!w{n}.ok", "goto": f"p{n - 1}", "max_visits": 2}]
        elif name == "back_always" and n % 3 == 2 and n < length - 1:
            phase["next"] = [{"goto": f"p{n - 2}", "max_visits": 2}]
    phases[-1]["workers"][0]["final"] = True
    return {name: {"phases": phases}}


CHECK_SHAPES = (
    "optional",
    "diamond",
    "reads_first",
    "fan_out",
    "pauses",
    "loops",
    "loops_back",
    "back_two",
    "back_skip",
    "back_fan_out",
    "back_pauses",
    "back_always",
)


def check_shapes(length: int) -> list[dict[str, Any]]:
    """`interlock check`'s exploring of pipelines of `length` phases of each shape of ways
    (`check_shape`), and the cost quote's dearest way over what it explored (each visit at
    1). Exploring used to be exponential in the number of optional phases (2,585 states for
    16, 17,712 and 19 s of CPU for 20), and in the number of loops: it forgets what no later
    phase reads and the visit counts of loops left behind, keeps one state where a run with
    fewer visits can do all that one with more can, and past `WIDEN_AT` runs at one place
    keeps their lowest counts (loops back mixed with skips: 5,844 states and 48 s at 30
    phases before). The quote of loops back weighed each run a kept state stands for (about
    cubic: 10 s at 60 phases); past `MAX_PAIRS` of them it is a bound from the rules."""
    from interlock.core.explore import explore

    rows = []
    for name in CHECK_SHAPES:
        text = json.dumps(check_shape(name, length))
        definition = parse_workflow(text, json_only=True).get(name)
        cpu = time.process_time()
        report = explore(definition, max_states=1000 * length)
        assert report.sound, report.problems
        spent = time.process_time() - cpu
        total, _ = report.ways.dearest({p.id: 1.0 for p in definition.pipeline.phases})
        quoted = time.process_time() - cpu - spent
        rows.append(
            {
                "shape": name,
                "phases": length,
                "states": report.states,
                "widened": report.widened,
                "cpu_s": round(spent, 3),
                "quote_cpu_s": round(quoted, 3),
                "dearest_visits": total,
                "quote_exact": report.ways.exact,
            }
        )
    return rows


def median_of(repeat: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `measure` `repeat` times; the round with the median runs/s, and every round's."""
    rounds = [measure() for _ in range(max(1, repeat))]
    rounds.sort(key=lambda r: r.get("runs_per_s") or r.get("sequential_runs_per_s") or 0)
    chosen = dict(rounds[len(rounds) // 2])
    key = "runs_per_s" if "runs_per_s" in chosen else "sequential_runs_per_s"
    chosen["rounds_runs_per_s"] = [r.get(key) for r in rounds]
    return chosen


SECTIONS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "sequential": lambda a: median_of(a.repeat, lambda: sequential(a.runs)),
    # The same without an fsync per commit: what the CPU allows once the disk is out of the way.
    "sequential_sync_normal": lambda a: median_of(
        a.repeat, lambda: sequential(a.runs, synchronous="NORMAL")
    ),
    "disk": lambda a: disk_limits(),
    # Bare sqlite3 doing research-3's three durable commits per run: the ceiling on this disk.
    "floor": lambda a: median_of(a.repeat, lambda: commit_floor(a.runs, a.concurrent)),
    "concurrent": lambda a: median_of(a.repeat, lambda: concurrent(a.concurrent)),
    "scale": lambda a: scale(a.scale),
    "recovery": lambda a: recovery(a.recovery),
    "postgres": lambda a: median_of(a.repeat, lambda: postgres(a.runs, a.concurrent)),
    "distributed": lambda a: distributed(),
    "check": lambda a: {
        **check_width(a.check_width),
        "shapes": check_shapes(a.check_shape_phases),
    },
    "check_depth": lambda a: check_depth(a.check_depths),
    "peers": lambda a: peers(a.runs, min(a.concurrent, 200)),
    "llm": lambda a: llm_section(a),
    "batch": lambda a: batch_section(a),
}


def batch_section(args: argparse.Namespace) -> dict[str, Any]:
    """`interlock batch` of no-op command rows: rows/s, peak memory, and how long `batch
    status` of the whole batch takes (`batch.py`)."""
    from batch import measure  # type: ignore[import-not-found]

    return dict(measure(args.batch_rows, args.batch_concurrency))


def llm_section(args: argparse.Namespace) -> dict[str, Any]:
    """Model calls at scale against a local streaming server (`llm.py`)."""
    from llm import llm  # type: ignore[import-not-found]

    home = scratch("interlock-llm-")
    return dict(
        llm(args.llm_runs, args.llm_latency, args.llm_chunks, args.llm_cap, args.llm_clients, home)
    )


def filesystem(path: str) -> str:
    """The file system holding `path` and, for ext4, whether it keeps a journal. Without one,
    the kernel gives a new file none of the inodes freed in the last 60 s (300 s while their
    table block is unwritten) and walks past each of them to find one, so thousands of files
    deleted shortly before (an earlier measurement's run folders) make every file a run
    creates cost more CPU: measured here, 4.7 s of kernel time for 500 model-call runs right
    after such a deletion, 0.9 s with none in the minutes before."""
    path = os.path.realpath(path)
    device, point, kind = "?", "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        here = fields[1].rstrip("/") + "/"
        if (path + "/").startswith(here) and len(fields[1]) >= len(point):
            device, point, kind = fields[0], fields[1], fields[2]
    if kind != "ext4":
        return f"{kind} on {device}"
    name = os.path.basename(os.path.realpath(device))
    journals = os.listdir("/proc/fs/jbd2") if os.path.isdir("/proc/fs/jbd2") else []
    journaled = any(entry.startswith(f"{name}-") for entry in journals)
    return f"ext4 on {device}, {'with' if journaled else 'no'} journal"


def machine() -> dict[str, Any]:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "filesystem": filesystem(tempfile.gettempdir()),
        "date": time.strftime("%Y-%m-%d"),
    }


def report(results: dict[str, Any]) -> None:
    """Print the table and the ratios against the peers."""
    print(f"\nmachine: {results['machine']['cpu']}, {results['machine']['cores']} cores")
    print(f"run folders on: {results['machine']['filesystem']}")
    if results["machine"]["filesystem"].endswith("no journal"):
        print("  (ext4 without a journal: files deleted in the minutes before a measurement")
        print("   make each new file cost more; see benchmarks/README.md, 'The file system')")
    for name in (
        "disk",
        "floor",
        "sequential",
        "sequential_sync_normal",
        "concurrent",
        "scale",
        "recovery",
        "postgres",
        "distributed",
        "check",
        "llm",
        "check_depth",
    ):
        if name in results:
            print(f"\n{name}")
            for key, value in results[name].items():
                if isinstance(value, dict):  # one client of the 'llm' section
                    print(f"  {key}")
                    for inner, figure in value.items():
                        print(f"    {inner:<30} {figure}")
                else:
                    print(f"  {key:<32} {value}")
    ours = {  # a peer is compared with interlock on the same kind of backend
        "sqlite": (
            results.get("sequential", {}).get("runs_per_s"),
            results.get("concurrent", {}).get("runs_per_s"),
        ),
        "postgres": (
            results.get("postgres", {}).get("sequential_runs_per_s"),
            results.get("postgres", {}).get("concurrent_runs_per_s"),
        ),
    }
    if "peers" in results:
        print(
            f"\n{'peer':<16}{'backend':<12}{'seq runs/s':>12}{'ratio':>9}{'conc runs/s':>13}"
            f"{'ratio':>9}  note"
        )
        for row in results["peers"]:
            seq, con = row.get("sequential_runs_per_s"), row.get("concurrent_runs_per_s")
            ours_seq, ours_con = ours.get(row.get("backend") or "", ours["sqlite"])
            r1 = f"{ours_seq / seq:.1f}x" if seq and ours_seq else "-"
            r2 = f"{ours_con / con:.1f}x" if con and ours_con else "-"
            print(
                f"{row['peer']:<16}{row.get('backend') or '-':<12}{seq or '-':>12}{r1:>9}"
                f"{con or '-':>13}{r2:>9}  {row.get('error') or ''}"
            )


def positive_count(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--runs", type=positive_count, default=200)
    parser.add_argument(
        "--repeat",
        type=positive_count,
        default=3,
        help="rounds of the timed sections (the median is kept)",
    )
    parser.add_argument("--concurrent", type=positive_count, default=1000)
    parser.add_argument("--scale", type=positive_count, default=10_000)
    parser.add_argument("--recovery", type=positive_count, default=1000)
    parser.add_argument(
        "--check-width", type=positive_count, default=10_000, help="workers of the 'check' phase"
    )
    parser.add_argument(
        "--check-shape-phases",
        type=positive_count,
        default=60,
        help="phases of each shape of ways of the 'check' section",
    )
    parser.add_argument(
        "--llm-runs", type=positive_count, default=500, help="runs of the 'llm' section"
    )
    parser.add_argument("--llm-latency", type=float, default=1.0, help="seconds per model call")
    parser.add_argument("--llm-chunks", type=int, default=20, help="fragments per model answer")
    parser.add_argument(
        "--llm-cap", type=positive_count, default=2000, help="model calls at once, at most"
    )
    parser.add_argument(
        "--llm-clients", default="aiohttp,httpx,httpx2", help="bare clients measured beside"
    )
    parser.add_argument(
        "--batch-rows", type=positive_count, default=10_000, help="rows of the 'batch' section"
    )
    parser.add_argument(
        "--batch-concurrency", type=positive_count, default=16, help="runs at once of 'batch'"
    )
    parser.add_argument(
        "--check-depths",
        type=lambda text: [positive_count(n) for n in text.split(",")],
        default=[100, 600, 2000],
        help="phases of the 'check_depth' pipelines, comma-separated",
    )
    parser.add_argument(
        "--keep-scratch",
        action="store_true",
        help="leave the run folders made here in place (remove them later yourself): on ext4"
        " without a journal, deleting thousands of files slows the next measurement's",
    )
    parser.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    args = parser.parse_args()
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        parser.error(
            f"--only: no section {unknown[0] if unknown else '(none given)'!r}; "
            f"sections: {', '.join(SECTIONS)}"
        )
    # Run folders go when the process exits, not between sections: thousands of files
    # deleted just before a section would slow its file creations (`filesystem`).
    if not args.keep_scratch:
        atexit.register(remove_scratch)
    results: dict[str, Any] = {"machine": machine()}
    for name in names:
        print(f"running {name}...", flush=True)
        try:
            results[name] = SECTIONS[name](args)
        except Exception as exc:  # one failing section must not hide the others
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    report(results)
    if args.keep_scratch:
        print("\nrun folders kept:", *SCRATCH, sep="\n  ")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
