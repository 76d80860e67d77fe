"""The `llm` section of the benchmark suite: research-3 runs whose three workers are model calls.

A local OpenAI-compatible server (`llm_server.py`, in a process of its own so that its CPU is
not counted here) answers every call after `latency` seconds with a streamed answer. The same
calls, shaped the same way (two at once, then one, per run), are then made by bare HTTP
clients with no orchestration at all: aiohttp is the reference every ratio is taken against,
httpx and httpx2 are shown beside it. Each client is measured in the same invocation, one after
another, so a machine shared with other work slows all of them alike.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from interlock import Interlock, parse_workflow
from interlock.runtime.orchestrator import Settings

HERE = Path(__file__).resolve().parent
WORKFLOW = """
llm-research-3:
  phases:
    - id: collect
      workers:
        - {role: a, model: bench, task: "Perspective A", timeout: 600}
        - {role: b, model: bench, task: "Perspective B", timeout: 600}
    - id: synthesis
      workers:
        - {role: s, model: bench, task: "Synthesis", reads: [a.md, b.md], final: true,
           timeout: 600}
"""
CONFIG = """
[providers.bench]
kind = "openai"
base_url = "{url}/v1"
max_concurrency = {cap}

[models.bench]
provider = "bench"
model = "bench-model"
"""
BODY = {"model": "bench-model", "messages": [{"role": "user", "content": "Perspective A"}]}
STREAM_BODY = {**BODY, "stream": True, "stream_options": {"include_usage": True}}


@contextmanager
def model_server(latency: float, chunks: int) -> Iterator[str]:
    """The local model server's base URL, while it runs."""
    server = [sys.executable, str(HERE / "llm_server.py")]
    child = subprocess.Popen(
        [*server, "--latency", str(latency), "--chunks", str(chunks)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().split()
        if line[:1] != ["port"]:
            raise RuntimeError("the benchmark's model server did not start")
        yield f"http://127.0.0.1:{line[1]}"
    finally:
        assert child.stdin is not None
        child.stdin.close()  # the server stops when its stdin closes
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


Call = Callable[[], Awaitable[int]]


async def research3_shape(runs: int, call: Call) -> int:
    """Each run: two calls at once, then a third; returns how many answers were complete."""

    async def one_run() -> int:
        first = await asyncio.gather(call(), call())
        return sum(first) + await call()

    return sum(await asyncio.gather(*(one_run() for _ in range(runs))))


def measured(runs: int, latency: float, cap: int, drive: Callable[[], int]) -> dict[str, Any]:
    """Wall time, CPU of this process and calls/s of `drive` (which returns the calls done)."""
    cpu, wall = time.process_time(), time.perf_counter()
    completed = drive()
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    calls = 3 * runs
    # Two rounds of calls one after another at least, and no faster than `cap` at a time.
    ideal = max(2 * latency, calls * latency / cap)
    return {
        "calls": calls,
        "completed": completed,
        "seconds": round(wall, 2),
        "ideal_seconds": round(ideal, 2),
        "wall_over_ideal": round(wall / ideal, 2),
        "calls_per_s": round(calls / wall, 1),
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_call": round(cpu / calls * 1000, 2),
    }


def bare_aiohttp(url: str, runs: int, cap: int) -> int:
    """The reference: aiohttp alone, reading each event's JSON."""
    import aiohttp

    async def go() -> int:
        limit = asyncio.Semaphore(cap)
        connector = aiohttp.TCPConnector(limit=cap)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def call() -> int:
                async with limit, session.post(f"{url}/v1/chat/completions", json=STREAM_BODY) as r:
                    done = 0
                    async for line in r.content:
                        if line.startswith(b"data: "):
                            data = line[6:].strip()
                            if data == b"[DONE]":
                                done = 1
                                break
                            json.loads(data)
                    return done

            return await research3_shape(runs, call)

    return asyncio.run(go())


def bare_httpx(module_name: str, url: str, runs: int, cap: int, connections: int) -> int:
    """httpx (or its fork httpx2) alone, with `connections` in its pool: as many as calls
    allowed at once, or fewer, so that calls queue in the pool as they did in interlock."""
    module: Any = __import__(module_name)

    async def go() -> int:
        limit = asyncio.Semaphore(cap)
        limits = module.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with module.AsyncClient(limits=limits, timeout=None) as client:

            async def call() -> int:
                async with limit:
                    request = client.stream("POST", f"{url}/v1/chat/completions", json=STREAM_BODY)
                    async with request as r:
                        done = 0
                        async for line in r.aiter_lines():
                            if line.startswith("data: "):
                                data = line[6:].strip()
                                if data == "[DONE]":
                                    done = 1
                                    break
                                json.loads(data)
                        return done

            return await research3_shape(runs, call)

    return asyncio.run(go())


def interlock_runs(url: str, runs: int, cap: int, home: Path) -> tuple[int, dict[str, int]]:
    """research-3 with model workers through interlock; (calls answered, runs by status)."""
    (home / "interlock.toml").write_text(CONFIG.format(url=url, cap=cap))
    definition = parse_workflow(WORKFLOW).get("llm-research-3")
    settings = Settings(max_concurrency=2 * runs + 16)
    app = Interlock(home, settings=settings)
    orchestrator = app.orchestrator

    async def go() -> None:
        for start in range(0, runs, 1000):
            count = min(1000, runs - start)
            orchestrator.create_runs([(definition, "bench", None, None)] * count)
        await orchestrator.run_until_settled()

    asyncio.run(go())
    statuses = {
        status: len(app.store.list_runs(status=status, limit=runs + 1))
        for status in ("delivered", "failed", "running", "paused")
    }
    statuses["lost"] = runs - sum(statuses.values())
    app.close()
    return 3 * statuses["delivered"], statuses


CLIENTS = ("aiohttp", "httpx", "httpx2", "httpx-pool100", "httpx2-pool100")


def llm(
    runs: int, latency: float, chunks: int, cap: int, clients: str, home: Path
) -> dict[str, Any]:
    """interlock and the bare clients on the same server, one after another; interlock's run
    folders go in `home` (empty), which the caller removes."""
    results: dict[str, Any] = {
        "runs": runs,
        "concurrent_calls": min(2 * runs, cap),
        "latency_s": latency,
        "chunks": chunks,
        "provider_max_concurrency": cap,
    }
    # What each client imports on its first call is loaded here, outside the measurement.
    import aiohttp  # noqa: F401
    import httpx  # noqa: F401
    from genai_prices import data_snapshot

    import interlock.providers
    import interlock.runtime.models
    import interlock.storage.sqlite  # noqa: F401

    data_snapshot.get_snapshot()  # the price table interlock reads to cost its first call

    with model_server(latency, chunks) as url:
        statuses: dict[str, int] = {}

        def through_interlock() -> int:
            answered, found = interlock_runs(url, runs, cap, home)
            statuses.update(found)
            return answered

        results["interlock"] = measured(runs, latency, cap, through_interlock)
        results["interlock"].update(statuses)
        for name in [c.strip() for c in clients.split(",") if c.strip()]:
            if name == "aiohttp":
                drive = lambda: bare_aiohttp(url, runs, cap)  # noqa: E731
            elif name.split("-pool")[0] in ("httpx", "httpx2"):
                # "httpx-pool100": a pool of 100 connections (httpx's default) for the calls
                module, _, pool = name.partition("-pool")
                size = int(pool) if pool.isdigit() else cap
                drive = lambda m=module, n=size: bare_httpx(m, url, runs, cap, n)  # type: ignore[misc]  # noqa: E731
            else:
                raise ValueError(f"--llm-clients: no client {name!r}; clients: {CLIENTS}")
            results[f"bare_{name}"] = measured(runs, latency, cap, drive)
    reference = results.get("bare_aiohttp")
    if reference:
        ours = results["interlock"]
        results["throughput_vs_aiohttp"] = round(ours["calls_per_s"] / reference["calls_per_s"], 2)
        results["cpu_vs_aiohttp"] = round(
            ours["cpu_ms_per_call"] / max(reference["cpu_ms_per_call"], 1e-9), 1
        )
    return results
