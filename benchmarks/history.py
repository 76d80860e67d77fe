"""A store with history, and wide runs: what a big ledger and a wide phase cost.

    python benchmarks/history.py                         # both sections, default sizes
    python benchmarks/history.py --only store --runs 100000
    python benchmarks/history.py --only wide --width 10000

`store`: a ledger of N finished research-3 runs is built through the storage API in bulk (one
real run's history copied N times, spread over the last 120 days, committed 2,000 runs per
transaction), then `interlock runs`, `/metrics`, starting a run and `interlock prune` are timed
against it, and the same commands against an empty ledger in the same invocation.

`wide`: a pipeline with one phase of W command workers (`echo`), driven by `interlock run` in a
child process; then `status` and `explain` on it, and a second run killed half-way (SIGKILL)
and resumed, timed to its end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from interlock import Interlock
from interlock.core import events as ev
from interlock.storage.base import AppendBatch, Lease, NewEvent, RunRegistration, RunSummary

HERE = Path(__file__).resolve().parent
DAY = 86_400.0
RESEARCH3 = {
    "research-3": {
        "phases": [
            {
                "id": "collect",
                "workers": [
                    {"role": "a", "command": ["echo", "a"]},
                    {"role": "b", "command": ["echo", "b"]},
                ],
            },
            {
                "id": "synthesis",
                "workers": [
                    {"role": "s", "command": ["echo", "s"], "reads": ["a.md", "b.md"]}
                    | {"final": True}
                ],
            },
        ]
    }
}


def cli(home: Path, *args: str, check: bool = True) -> tuple[float, str]:
    """Run `interlock --home HOME ARGS...`; (wall seconds, stdout). The CPU seconds it used
    (user + system) are added to `CPU`: on a busy machine they move far less than the wall."""
    began = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if check and done.returncode != 0:
        raise RuntimeError(f"interlock {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return took, done.stdout


CPU: list[float] = []  # CPU seconds of each `cli` call, in order


def timed(home: Path, *args: str, repeat: int = 3) -> dict[str, float]:
    """Median wall and CPU milliseconds of `repeat` runs of one command."""
    walls, cpus = [], []
    for _ in range(repeat):
        walls.append(cli(home, *args)[0])
        cpus.append(CPU[-1])
    return {"wall_ms": best(walls), "cpu_ms": best(cpus)}


def best(times: list[float]) -> float:
    """The median, in milliseconds."""
    return round(statistics.median(times) * 1000, 1)


def template(home: Path, workflow: Path) -> tuple[list[NewEvent], str, str, str]:
    """One real research-3 run's history: (events, definition hash, definition, source)."""
    app = Interlock(home)
    run_id = app.start(str(workflow), "research-3", topic="a topic")
    app.drive(run_id)
    stored = app.store.events(run_id)
    record = app.store.get_run(run_id)
    definition = app.store.definition(record.definition_hash)
    app.close()
    events = [NewEvent(event=s.event, rule=s.rule, why=s.why) for s in stored]
    return events, record.definition_hash, definition, record.source


def build(home: Path, runs: int, workflow: Path) -> float:
    """A ledger of `runs` finished runs (plus the template's): seconds it took."""
    events, definition_hash, definition, source = template(home, workflow)
    first_at = events[0].event.at
    app = Interlock(home)
    store = app.store
    now = time.time()
    began = time.perf_counter()
    statuses = ["delivered"] * 8 + ["failed", "cancelled"]
    for start in range(0, runs, 2000):
        batches, leases = [], []
        for number in range(start, min(runs, start + 2000)):
            run_id = f"research-3-hist-{number:07d}"
            created = now - 120 * DAY + number * (120 * DAY / runs)
            shifted = []
            for new in events:
                event = dataclasses.replace(new.event, at=new.event.at - first_at + created)
                if isinstance(event, ev.RunCreated):
                    event = dataclasses.replace(event, run_id=run_id)
                shifted.append(NewEvent(event=event, rule=new.rule, why=new.why))
            lease = Lease(run_id=run_id, owner="history", token=1, expires_at=now + DAY)
            leases.append(lease)
            status = statuses[number % len(statuses)]
            batches.append(
                AppendBatch(
                    lease=lease,
                    events=shifted,
                    summary=RunSummary(status=status, phase="synthesis", updated_at=created),
                    register=RunRegistration(
                        run_id=run_id,
                        pipeline="research-3",
                        topic=f"topic {number}",
                        definition_hash=definition_hash,
                        definition=definition,
                        source=source,
                        created_at=created,
                    ),
                )
            )
        store.append_many(batches, now, releases=leases)
    app.close()
    return time.perf_counter() - began


def metrics_ms(home: Path, repeat: int = 5) -> tuple[float, float]:
    """(first scrape, median of the next ones) of /metrics' body, in ms, in-process."""
    from interlock.runtime.orchestrator import Orchestrator
    from interlock.server.metrics import Metrics

    app = Interlock(home)
    metrics = Metrics(app.store, Orchestrator(app.store, app.home))
    began = time.perf_counter()
    body = metrics.render()
    first = time.perf_counter() - began
    assert b"interlock_runs{" in body
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        metrics.render()
        times.append(time.perf_counter() - began)
    app.close()
    return round(first * 1000, 1), best(times)


def start_ms(home: Path, workflow: Path, repeat: int = 5) -> float:
    """Median time of `Interlock.start` (a run recorded and its first tasks dispatched)."""
    app = Interlock(home)
    times = []
    for n in range(repeat):
        began = time.perf_counter()
        app.start(str(workflow), "research-3", topic=f"new {n}")
        times.append(time.perf_counter() - began)
    app.close()
    return best(times)


def commands(home: Path, workflow: Path) -> dict[str, Any]:
    """The timed commands against one ledger."""
    runs = timed(home, "runs")
    failed = timed(home, "runs", "--status", "failed")
    app = Interlock(home)
    in_process = []
    for _ in range(5):
        began = time.perf_counter()
        app.store.list_runs(limit=30)
        in_process.append(time.perf_counter() - began)
    app.close()
    first_scrape, scrape = metrics_ms(home)
    run_cli = timed(home, "run", str(workflow), "research-3", "--topic", "t")
    return {
        "runs_cli": runs,
        "runs_failed_cli": failed,
        "list_runs_query_ms": best(in_process),
        "metrics_first_ms": first_scrape,
        "metrics_ms": scrape,
        "start_ms": start_ms(home, workflow),
        "run_cli": run_cli,
    }


def store_section(runs: int) -> dict[str, Any]:
    """The store section: an empty ledger and one of `runs` finished runs, side by side."""
    scratch = Path(tempfile.mkdtemp(prefix="interlock-history-"))
    try:
        workflow = scratch / "research3.json"
        workflow.write_text(json.dumps(RESEARCH3))
        empty, full = scratch / "empty", scratch / "full"
        Interlock(empty).close()
        result: dict[str, Any] = {"runs": runs, "empty": commands(empty, workflow)}
        result["build_s"] = round(build(full, runs, workflow), 1)
        result["ledger_mib"] = round((full / "ledger.db").stat().st_size / 2**20, 1)
        result["full"] = commands(full, workflow)
        took, text = cli(full, "prune", "--older-than", "60d", "--dry-run")
        result["prune_dry_run_s"] = round(took, 2)
        result["prune_dry_run"] = text.strip().splitlines()[-1:]
        took, text = cli(full, "prune", "--older-than", "60d")
        result["prune_s"] = round(took, 2)
        result["prune"] = text.strip().splitlines()[-1:]
        result["after_prune"] = commands(full, workflow)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def wide_workflow(folder: Path, width: int) -> Path:
    workers = [{"role": f"w{n}", "command": ["echo", "ok"]} for n in range(width)]
    final = {"role": "s", "command": ["echo", "done"], "final": True}
    phases = [{"id": "fan", "workers": workers}, {"id": "end", "workers": [final]}]
    path = folder / f"wide{width}.json"
    path.write_text(json.dumps({"wide": {"phases": phases}}))
    return path


def cpu_of(process: subprocess.Popen[bytes]) -> float:
    """User + system CPU seconds the child used, once it ended."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    process.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def wide_section(width: int) -> dict[str, Any]:
    """A W-wide phase: the run, status and explain on it, and a resume from half-way."""
    scratch = Path(tempfile.mkdtemp(prefix="interlock-wide-"))
    try:
        workflow = wide_workflow(scratch, width)
        home = scratch / "home"
        argv = [sys.executable, "-m", "interlock", "--home", str(home)]
        began = time.perf_counter()
        child = subprocess.Popen(
            [*argv, "run", str(workflow), "wide", "--topic", "t", "--run-id", "wide-1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        cpu = cpu_of(child)
        result: dict[str, Any] = {
            "width": width,
            "run_s": round(time.perf_counter() - began, 1),
            "run_cpu_s": round(cpu, 1),
        }
        app = Interlock(home)
        state = app.state("wide-1")
        result["status_of_run"] = state.status.value
        result["timed_out"] = sum(1 for s in app.events("wide-1") if s.kind == "task_timed_out")
        app.close()
        result["status"] = timed(home, "status", "wide-1")
        result["status_json"] = timed(home, "status", "wide-1", "--json")
        result["explain"] = timed(home, "explain", "wide-1")
        # A second run, killed once half its workers completed, then resumed to its end.
        child = subprocess.Popen(
            [*argv, "run", str(workflow), "wide", "--topic", "t", "--run-id", "wide-2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        live = home / "runs" / "wide-2"
        while child.poll() is None:
            done = sum(1 for _ in live.glob("w*.md")) if live.is_dir() else 0
            if done >= width // 2:
                child.send_signal(signal.SIGKILL)
                break
            time.sleep(0.2)
        child.wait()
        began = time.perf_counter()
        resumed = subprocess.Popen(
            [*argv, "resume", "wide-2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        cpu = cpu_of(resumed)
        result["resume_to_end_s"] = round(time.perf_counter() - began, 1)
        result["resume_cpu_s"] = round(cpu, 1)
        app = Interlock(home)
        assert app.state("wide-2").status.value == "delivered"
        began = time.perf_counter()
        app.state("wide-2")
        result["fold_ms"] = round((time.perf_counter() - began) * 1000, 1)
        app.close()
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="store,wide", help="store, wide or both")
    parser.add_argument("--runs", type=int, default=100_000, help="finished runs in the store")
    parser.add_argument("--width", type=int, default=2000, help="workers of the wide phase")
    parser.add_argument("--out", help="write the results as JSON here too")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for section in args.only.split(","):
        if section == "store":
            results["store"] = store_section(args.runs)
        elif section == "wide":
            results["wide"] = wide_section(args.width)
        else:
            parser.error(f"--only: no section {section!r}; sections: store, wide")
        print(json.dumps({section: results[section]}, indent=2), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
