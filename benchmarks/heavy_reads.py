"""How long a health check waits while another client reads a run with a long history.

    python benchmarks/heavy_reads.py                    # a run of about 100,000 events
    python benchmarks/heavy_reads.py --visits 2000      # a smaller one

A run of a looping pipeline is created through the API and its history written straight
through the store (each visit of the loop: phase started, task dispatched, started, completed,
phase completed, branch taken; then a pause), so the server adopts a paused run of that size.
Then, for each heavy read (`/graph`, `/attempts`, `/attempts/N`, `/export`, `/runs/ID`),
one client sends it while another times `/api/health` every 20 ms: the worst and median
health latency, and how long the read itself took, cold (first read) and warm (a repeat).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from interlock.api import Interlock
from interlock.core import events as ev
from interlock.core.state import artifact_name, task_id_for
from interlock.storage.base import AppendBatch, NewEvent, RunSummary

WORKFLOW = """
loop:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: drafter, command: ["{python}", "-c", "print('x')"], output: draft.md}
      next:
        - {goto: draft, max_visits: 1000, if: "false"}
    - id: ship
      workers:
        - {role: shipper, command: ["{python}", "-c", "print('x')"], final: true}
quick:
  phases:
    - id: only
      workers:
        - {role: solo, command: ["{python}", "-c", "print('x')"], final: true}
"""


def history(visits: int, at: float) -> list[ev.Event]:
    """The events of `visits` visits of the loop's phase, then a pause."""
    out: list[ev.Event] = []
    for visit in range(1, visits + 1):
        task = task_id_for("drafter", visit, None)
        artifact = artifact_name("draft.md", visit, None)
        out += [
            ev.PhaseStarted(at=at, phase="draft", visit=visit),
            ev.TaskDispatched(
                at=at,
                task_id=task,
                phase="draft",
                role="drafter",
                visit=visit,
                item=None,
                attempt=1,
            ),
            ev.TaskStarted(at=at, task_id=task, attempt=1, worker="bench"),
            ev.TaskCompleted(
                at=at, task_id=task, attempt=1, artifact=artifact, sha256="0" * 64, size=2
            ),
            ev.PhaseCompleted(at=at, phase="draft", visit=visit),
        ]
        if visit < visits:
            out.append(ev.BranchTaken(at=at, phase="draft", visit=visit, goto="draft", rule=1))
    out.append(ev.Paused(at=at, phase="draft", visit=visits, reason="pause_after"))
    return out


def build(home: Path, visits: int) -> str:
    """A paused run of the loop with `visits` visits, its lease handed back."""
    workflow = home.parent / "loop.yaml"
    workflow.write_text(WORKFLOW)
    api = Interlock(home)
    run_id = api.start(workflow, "loop", topic="a long history")
    driver = api.orchestrator.drivers[run_id]
    # A lease of an hour: writing the history takes longer than the orchestrator's.
    lease = api.store.acquire_lease(run_id, driver.lease.owner, 3600.0, time.time())
    events = history(visits, time.time())
    summary = RunSummary(status="paused", phase="draft", updated_at=time.time())
    for start in range(0, len(events), 2000):
        chunk = [
            NewEvent(event=e, rule="bench", why="written by the benchmark")
            for e in events[start : start + 2000]
        ]
        api.store.append(AppendBatch(lease=lease, events=chunk, summary=summary), time.time())
    api.store.release_lease(lease)
    api.store.close()
    return run_id


class Server:
    """`interlock serve` in its own process (so the clients here never hold its GIL)."""

    def __init__(self, home: Path, workflow: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        command = [
            sys.executable,
            "-m",
            "interlock",
            "serve",
            "--port",
            str(port),
            "-w",
            str(workflow),
        ]
        self.process = subprocess.Popen(command, env={**os.environ, "INTERLOCK_HOME": str(home)})
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def measure(url: str, path: str) -> dict[str, Any]:
    """Health latencies while `path` is read once; and the read's own time."""
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.get("/api/health")
                latencies.append(time.perf_counter() - started)
                time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    time.sleep(0.2)
    with httpx.Client(base_url=url, timeout=300) as client:
        started = time.perf_counter()
        answer = client.get(path)
        took = time.perf_counter() - started
    time.sleep(0.1)
    done.set()
    prober.join()
    return {
        "path": path,
        "status": answer.status_code,
        "read_s": round(took, 3),
        "health_max_s": round(max(latencies), 3),
        "health_median_s": round(statistics.median(latencies), 4),
        "bytes": len(answer.content),
    }


def polled_run(url: str, run_id: str, pollers: int) -> dict[str, Any]:
    """How long a one-task run takes while `pollers` clients poll the long run's graph."""
    done = threading.Event()
    polls: list[int] = []

    def poll() -> None:
        with httpx.Client(base_url=url, timeout=300) as client:
            while not done.is_set():
                polls.append(client.get(f"/api/runs/{run_id}/graph").status_code)

    threads = [threading.Thread(target=poll) for _ in range(pollers)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    with httpx.Client(base_url=url, timeout=300) as client:
        started = time.perf_counter()
        quick = client.post("/api/runs", json={"pipeline": "quick", "topic": "t"}).json()["run_id"]
        while client.get(f"/api/runs/{quick}").json()["status"] != "delivered":
            time.sleep(0.05)
        took = time.perf_counter() - started
    done.set()
    for thread in threads:
        thread.join()
    return {
        "quick_run_s": round(took, 3),
        "pollers": pollers,
        "polls": len(polls),
        "answers": {str(code): polls.count(code) for code in sorted(set(polls))},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=16_667, help="6 events each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        started = time.perf_counter()
        run_id = build(home, args.visits)
        print(
            f"run {run_id}: {6 * args.visits} events in {time.perf_counter() - started:.1f}s",
            file=sys.stderr,
        )
        server = Server(home, home.parent / "loop.yaml")
        try:
            results = []
            middle = httpx.get(
                f"{server.url}/api/runs/{run_id}/events?since={3 * args.visits}&limit=10"
            ).json()
            seq = next(e["seq"] for e in middle if e["kind"] == "task_dispatched")
            for path in ("graph", "attempts", f"attempts/{seq}", "export", ""):
                url = f"/api/runs/{run_id}/{path}".rstrip("/")
                for label in ("cold", "warm"):
                    result = measure(server.url, url)
                    result["pass"] = label
                    results.append(result)
                    print(json.dumps(result), flush=True)
            print(json.dumps(polled_run(server.url, run_id, pollers=4)), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
