"""research-3 on Prefect 3 with its local SQLite-backed server (ephemeral mode).

Run with the interpreter of benchmarks/.envs/prefect:

    python prefect_research3.py [--runs N] [--concurrent M]

One run is one async flow: two async tasks awaited together with
asyncio.gather, then a third task taking both outputs.  PREFECT_HOME points
at a temp dir and no API URL is set, so Prefect starts its own API server
in a subprocess, on a SQLite database in that dir, and every flow-run state
change goes through that server's orchestration API.  Result persistence is
on (PREFECT_RESULTS_PERSIST_BY_DEFAULT), so each task's and flow's return
value is written to local result storage in the temp dir.

Concurrent runs are M flow calls awaited together on one event loop.

Prints one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback

TMP = tempfile.mkdtemp(prefix="bench-prefect-")
# Settings must be in the environment before prefect is imported.
for _k in [k for k in os.environ if k.startswith("PREFECT_")]:
    del os.environ[_k]
os.environ.update(
    {
        "PREFECT_HOME": TMP,
        "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "true",
        "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
        "PREFECT_LOCAL_STORAGE_PATH": os.path.join(TMP, "results"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
)

import asyncio  # noqa: E402
from importlib.metadata import version  # noqa: E402


def hard_timeout(seconds: float, result: dict, cleanup) -> None:
    def fire() -> None:
        result["error"] = f"hard timeout after {seconds:.0f}s"
        try:
            cleanup()
        finally:
            print(json.dumps(result), flush=True)
            os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def stop_servers() -> None:
    """Stop the API server subprocess Prefect started for this process."""
    try:
        from prefect.server.api.server import SubprocessASGIServer

        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()
    except Exception:
        traceback.print_exc()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    result: dict = {
        "peer": "prefect",
        "backend": "sqlite",
        "version": version("prefect"),
        "sequential_runs_per_s": None,
        "ms_per_step": None,
        "concurrent_runs_per_s": None,
        "error": None,
        "durability": "local API server on SQLite (WAL, synchronous=NORMAL as Prefect sets it); "
        "results persisted to local storage",
    }

    def cleanup() -> None:
        stop_servers()
        shutil.rmtree(TMP, ignore_errors=True)

    hard_timeout(args.timeout, result, cleanup)

    from prefect import flow, task

    @task
    async def worker(topic: str, part: str) -> str:
        return f"{part}:{topic}"

    @task
    async def writer(topic: str, a: str, b: str) -> str:
        return f"report({a},{b})"

    @flow
    async def research3(topic: str) -> str:
        a, b = await asyncio.gather(worker(topic, "web"), worker(topic, "papers"))
        return await writer(topic, a, b)

    async def bench() -> None:
        for i in range(3):
            await research3(f"warm{i}")

        t0 = time.perf_counter()
        for i in range(args.runs):
            out = await research3(f"seq{i}")
            assert out == f"report(web:seq{i},papers:seq{i})", out
        seq = time.perf_counter() - t0
        result["sequential_runs_per_s"] = round(args.runs / seq, 2)
        result["ms_per_step"] = round(seq * 1000 / (args.runs * 3), 3)

        if args.concurrent > 0:
            try:
                t0 = time.perf_counter()
                outs = await asyncio.gather(
                    *(research3(f"conc{i}") for i in range(args.concurrent))
                )
                conc = time.perf_counter() - t0
                assert all(o.startswith("report(") for o in outs), outs[:3]
                result["concurrent_runs_per_s"] = round(args.concurrent / conc, 2)
            except Exception as exc:
                result["error"] = f"concurrent: {type(exc).__name__}: {exc}"[:300]

    try:
        asyncio.run(bench())
    except Exception as exc:
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        cleanup()

    print(json.dumps(result), flush=True)
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
