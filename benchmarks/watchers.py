"""Fan-out to watchers: live-update lag and orchestration throughput with 0 and N WebSocket
clients watching every run, in one invocation.

    python benchmarks/watchers.py                      # 0 and 200 clients, 400 runs each
    python benchmarks/watchers.py --clients 200 --runs 400 --mode batch
    python benchmarks/watchers.py --pairs 3            # 3 pairs of rounds, medians

`interlock serve` runs in a child process with the SQLite ledger. The runs (research-3 with
no-op Python workers, from `watch_tasks.py`) are started through its API (8 requests at a
time) and driven by it. Each client (all in this process, on one event loop) connects to `/ws/runs`
(`--mode summary`: `?view=summary`, run summaries per tick, what the dashboard's runs list
uses; `batch`: every event, `?batch=1`, arrays of messages; `single`: every event, one message
per frame) and notes, for every frame, how long after the oldest event in it was recorded it
arrived: the lag.
Throughput is runs delivered per second from the first submission to the last delivery, as
one extra client sees it (present in both rounds). On a shared machine wall times drift: with
`--pairs N` the two rounds are run N times, in alternating order, and the medians reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import websockets

HERE = Path(__file__).resolve().parent
WORKFLOW = {
    "research-3": {
        "phases": [
            {
                "id": "collect",
                "workers": [
                    {"role": "a", "call": "watch_tasks:noop"},
                    {"role": "b", "call": "watch_tasks:noop"},
                ],
            },
            {
                "id": "synthesis",
                "workers": [{"role": "s", "call": "watch_tasks:noop", "final": True}],
            },
        ]
    }
}
FIRST_AT = re.compile(rb'"at":([0-9.e+]+)')


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process `pid` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def client(url: str, lags: list[float], stop: asyncio.Event) -> None:
    """A watcher of every run: the lag of each frame's oldest event."""
    async with websockets.connect(url, max_size=None, max_queue=None) as ws:
        while not stop.is_set():
            try:
                frame = await asyncio.wait_for(ws.recv(decode=False), 0.5)
            except TimeoutError:
                continue
            now = time.time()
            found = FIRST_AT.search(frame)
            if found:
                lags.append(now - float(found.group(1)))


async def observer(
    url: str, runs: int, done: asyncio.Event, finished: list[float], lags: list[float]
) -> None:
    """Counts final events until every submitted run ended (noting the lag of each event)."""
    ended: set[str] = set()
    async with websockets.connect(url, max_size=None, max_queue=None) as ws:
        while len(finished) < runs:
            data = json.loads(await ws.recv())
            now = time.time()
            for message in data if isinstance(data, list) else [data]:
                if message.get("type") == "runs":  # summaries: each run's latest state
                    lags.append(now - message["at"])
                    for run in message["runs"]:
                        if run["final"] and run["run_id"] not in ended:
                            ended.add(run["run_id"])
                            finished.append(now)
                if message.get("type") == "event":
                    lags.append(now - message["at"])
                    if message.get("final"):
                        finished.append(now)
    done.set()


async def round_of(port: int, server: int, clients: int, runs: int, mode: str) -> dict[str, Any]:
    """Submit `runs` runs with `clients` watchers connected; lag and throughput."""
    query = {"batch": "?batch=1", "summary": "?view=summary"}.get(mode, "")
    url = f"ws://127.0.0.1:{port}/ws/runs{query}"
    stop, done = asyncio.Event(), asyncio.Event()
    lags: list[float] = []
    watchers = [asyncio.create_task(client(url, lags, stop)) for _ in range(clients)]
    finished: list[float] = []
    seen: list[float] = []
    counting = asyncio.create_task(observer(url, runs, done, finished, seen))
    await asyncio.sleep(1.0 + clients / 100)  # every client connected and said hello
    cpu = cpu_seconds(server)
    own = time.process_time()
    began = time.time()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        slots = asyncio.Semaphore(8)

        async def start(number: int) -> None:
            async with slots:
                body = {"pipeline": "research-3", "topic": f"watched {number}"}
                answer = await http.post("/api/runs", json=body)
                assert answer.status_code == 201, answer.text

        await asyncio.gather(*(start(n) for n in range(runs)))
    await asyncio.wait_for(done.wait(), 600)
    took = max(finished) - began
    cpu = cpu_seconds(server) - cpu
    own = time.process_time() - own
    stop.set()
    await asyncio.gather(*watchers, counting, return_exceptions=True)
    return {
        "clients": clients,
        "runs": runs,
        "runs_per_s": round(runs / took, 1),
        # The server's own CPU per run: what the watchers cost it, apart from the machine's
        # share it got (the clients run on the same cores).
        "server_cpu_ms_per_run": round(1000 * cpu / runs, 2),
        # What this process (the clients, the observer, the submissions) took meanwhile.
        "clients_cpu_ms_per_run": round(1000 * own / runs, 2),
        "frames": len(lags),
        "lag_p50_s": round(percentile(lags, 0.5), 3) if lags else None,
        "lag_p99_s": round(percentile(lags, 0.99), 3) if lags else None,
        "lag_max_s": round(max(lags), 3) if lags else None,
        "observer_lag_p50_s": round(percentile(seen, 0.5), 3),
        "observer_lag_p99_s": round(percentile(seen, 0.99), 3),
    }


def serve(home: Path, flow: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-m", "interlock", "--home", str(home), "serve", "--port", str(port)]
    home.mkdir(parents=True, exist_ok=True)
    log = (home.parent / f"serve-{port}.log").open("wb")
    process = subprocess.Popen(
        [*argv, "-w", str(flow), "--no-schedules", "--rate-limit", "1000000"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.1)
    process.kill()
    said = (home.parent / f"serve-{port}.log").read_text()[-2000:]
    raise RuntimeError(f"the server did not start: {said}")


def one_round(scratch: Path, flow: Path, clients: int, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh server and ledger, `args.runs` runs with `clients` watchers."""
    port = free_port()
    server = serve(scratch / f"home-{port}", flow, port)
    try:
        result = asyncio.run(round_of(port, server.pid, clients, args.runs, args.mode))
    finally:
        server.terminate()
        server.wait(30)
    print(json.dumps(result), flush=True)
    return result


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--mode", choices=["summary", "batch", "single"], default="summary")
    parser.add_argument("--pairs", type=int, default=1, help="rounds of 0 and N clients")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="interlock-watchers-"))
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    try:
        flow = scratch / "research3.json"
        flow.write_text(json.dumps(WORKFLOW))
        for number in range(args.pairs):
            # Alternate which round goes first, so a machine getting busier or quieter
            # during the invocation favours neither.
            order = (0, args.clients) if number % 2 == 0 else (args.clients, 0)
            done = {clients: one_round(scratch, flow, clients, args) for clients in order}
            pairs.append((done[0], done[args.clients]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    slowdowns = [1 - loaded["runs_per_s"] / base["runs_per_s"] for base, loaded in pairs]
    grew = [
        loaded["server_cpu_ms_per_run"] / base["server_cpu_ms_per_run"] - 1
        for base, loaded in pairs
    ]
    loaded_rounds = [loaded for _, loaded in pairs]

    def middle(key: str) -> float | None:
        values = [r[key] for r in loaded_rounds if r[key] is not None]
        return round(median(values), 3) if values else None

    print(
        json.dumps(
            {
                "mode": args.mode,
                "pairs": args.pairs,
                "orchestration_slowed": f"{100 * median(slowdowns):.1f}%",
                "orchestration_slowed_each": [f"{100 * x:.1f}%" for x in slowdowns],
                "server_cpu_per_run_grew": f"{100 * median(grew):.1f}%",
                "lag_p50_s": middle("lag_p50_s"),
                "lag_p99_s": middle("lag_p99_s"),
                "lag_p99_s_worst": max((r["lag_p99_s"] or 0.0) for r in loaded_rounds),
                "lag_p50_s_one_client": round(
                    median([base["observer_lag_p50_s"] for base, _ in pairs]), 3
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
